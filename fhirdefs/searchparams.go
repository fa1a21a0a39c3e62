package fhirdefs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SearchParam is a search parameter of one resource type, as the package
// defines it: its type and the part of its FHIRPath expression that
// applies to that type.
type SearchParam struct {
	Code string
	Type string // token, string, date, reference, quantity, number, uri, composite, special
	// Expression is "" when the definition has no part rooted at the type
	// (its expression names other types only, or there is none).
	Expression string
	// URL is the definition's canonical URL.
	URL string
}

type searchParamFile struct {
	ResourceType string   `json:"resourceType"`
	URL          string   `json:"url"`
	Code         string   `json:"code"`
	Base         []string `json:"base"`
	Type         string   `json:"type"`
	Expression   string   `json:"expression"`
}

// SearchParameter returns the package's definition of a search parameter
// of a resource type. The package's SearchParameter resources are read
// once, on first use. Returns ErrUnknownType when there is none, or none
// with an expression for the type.
func (p *Package) SearchParameter(resourceType, code string) (*SearchParam, error) {
	if err := p.loadSearchParamsOnce(); err != nil {
		return nil, err
	}
	sp, ok := p.searchParams[resourceType+"."+code]
	if !ok || sp.Expression == "" {
		return nil, fmt.Errorf("%w: no search parameter %s of %s", ErrUnknownType, code, resourceType)
	}
	return sp, nil
}

// SearchParameters returns every search parameter the package defines
// for a resource type (its base lists the type), sorted by code, those
// without an expression for the type included: the caller decides what
// it can use.
func (p *Package) SearchParameters(resourceType string) ([]*SearchParam, error) {
	if err := p.loadSearchParamsOnce(); err != nil {
		return nil, err
	}
	return p.searchParamsByType[resourceType], nil
}

func (p *Package) loadSearchParamsOnce() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.searchParams != nil {
		return nil
	}
	return p.loadSearchParams()
}

func (p *Package) loadSearchParams() error {
	files, err := filepath.Glob(filepath.Join(p.dir, "SearchParameter-*.json"))
	if err != nil {
		return err
	}
	byKey := map[string]*SearchParam{}
	byType := map[string][]*SearchParam{}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "SearchParameter-example") {
			continue // the package's examples of a SearchParameter (part-agree, ...), not of the specification's search
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var sp searchParamFile
		if err := json.Unmarshal(data, &sp); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		if sp.ResourceType != "SearchParameter" {
			continue
		}
		for _, base := range sp.Base {
			if byKey[base+"."+sp.Code] != nil {
				continue // the package defines Resource._filter twice: the first, in file order, is kept
			}
			def := &SearchParam{Code: sp.Code, Type: sp.Type, Expression: partsFor(sp.Expression, base), URL: sp.URL}
			byKey[base+"."+sp.Code] = def
			byType[base] = append(byType[base], def)
		}
	}
	for _, defs := range byType {
		slices.SortFunc(defs, func(a, b *SearchParam) int { return strings.Compare(a.Code, b.Code) })
	}
	p.searchParams, p.searchParamsByType = byKey, byType
	return nil
}

// partsFor keeps, of a union expression shared by several types, the
// alternatives rooted at one type: "Condition.code | Observation.code"
// gives "Observation.code" for Observation.
func partsFor(expr, resourceType string) string {
	var keep []string
	for _, part := range SplitUnion(expr) {
		root := strings.TrimLeft(strings.TrimSpace(part), "(")
		if strings.HasPrefix(root, resourceType+".") || root == resourceType {
			keep = append(keep, strings.TrimSpace(part))
		}
	}
	return strings.Join(keep, " | ")
}

// SplitUnion splits a FHIRPath expression at its top-level '|' operators
// (not inside parentheses or string literals).
func SplitUnion(expr string) []string {
	var parts []string
	start := 0
	scanFHIRPath(expr, func(i, depth int) bool {
		if expr[i] == '|' && depth == 0 {
			parts = append(parts, expr[start:i])
			start = i + 1
		}
		return true
	})
	return append(parts, expr[start:])
}

// MatchingParen returns the index of the ')' that closes the '(' at open
// in a FHIRPath expression, string literals skipped; -1 when none does.
func MatchingParen(expr string, open int) int {
	end := -1
	scanFHIRPath(expr[open:], func(i, depth int) bool {
		if expr[open+i] == ')' && depth == 1 {
			end = open + i
			return false
		}
		return true
	})
	return end
}

// scanFHIRPath calls visit with each byte offset of an expression outside
// its string literals ('...', with \' escapes) and the parenthesis depth
// before that byte, until visit returns false.
func scanFHIRPath(expr string, visit func(i, depth int) bool) {
	depth, inString := 0, false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if c == '\'' && (i == 0 || expr[i-1] != '\\') {
			inString = !inString
			continue
		}
		if inString {
			continue
		}
		if !visit(i, depth) {
			return
		}
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		}
	}
}
