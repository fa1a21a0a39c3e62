package fhirsearch

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"exchange/fhirdefs"
)

// A small FHIRPath evaluator, for the subset search parameter expressions
// use: paths (Condition.code.coding), unions (|), parentheses,
// ofType(T), as(T) and "as T" on choice elements, where(resolve() is T) on
// references (answered from the reference's type, since nothing is
// resolved), where(element = 'text') on a primitive child (url, system,
// type), and extension('url'). It covers every R5 search parameter of the
// types the imported store keeps except the boolean expressions
// (deceased.exists() and ...) and nested criteria (where(extension(...)
// .exists())), which the catalog skips with that reason.

// fhirPath is a compiled expression: a union of paths.
type fhirPath []pathExpr

// pathExpr is one path: a root (the resource type) and steps.
type pathExpr struct {
	root  string
	steps []step
}

type stepKind int

const (
	stepField stepKind = iota
	stepOfType
	stepResolveIs
	stepWhereEquals
)

type step struct {
	kind stepKind
	arg  string // field name, type, or the element compared
	// value is the text the element equals (stepWhereEquals).
	value string
}

// compileFHIRPath parses an expression of the supported subset.
func compileFHIRPath(expr string) (fhirPath, error) {
	var out fhirPath
	for _, part := range fhirdefs.SplitUnion(expr) {
		p, err := compilePath(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		out = append(out, p...)
	}
	return out, nil
}

// compilePath compiles one alternative. A parenthesized union followed by
// steps distributes the steps over the union.
func compilePath(s string) (fhirPath, error) {
	if strings.HasPrefix(s, "(") {
		end := fhirdefs.MatchingParen(s, 0)
		if end < 0 {
			return nil, fmt.Errorf("unbalanced parentheses")
		}
		inner, err := compileFHIRPath(s[1:end])
		if err != nil {
			return nil, err
		}
		rest := strings.TrimSpace(s[end+1:])
		if rest == "" {
			return inner, nil
		}
		tail, err := compileSteps(strings.TrimPrefix(rest, "."))
		if err != nil {
			return nil, err
		}
		for i := range inner {
			inner[i].steps = append(inner[i].steps, tail...)
		}
		return inner, nil
	}
	if path, typ, ok := strings.Cut(s, " as "); ok { // the operator form of as(T)
		if typ = strings.TrimSpace(typ); !isIdentifier(typ) {
			return nil, fmt.Errorf("%q: not a type", typ)
		}
		p, err := compilePath(strings.TrimSpace(path))
		for i := range p {
			p[i].steps = append(p[i].steps, step{kind: stepOfType, arg: typ})
		}
		return p, err
	}
	root, rest, _ := strings.Cut(s, ".")
	if !isIdentifier(root) {
		return nil, fmt.Errorf("%q is not a path", s)
	}
	steps, err := compileSteps(rest)
	if err != nil {
		return nil, err
	}
	return fhirPath{{root: root, steps: steps}}, nil
}

func compileSteps(s string) ([]step, error) {
	var steps []step
	for s != "" {
		var name string
		i := strings.IndexAny(s, ".(")
		if i < 0 {
			name, s = s, ""
		} else {
			name = s[:i]
			if s[i] == '(' {
				end := fhirdefs.MatchingParen(s, i)
				if end < 0 {
					return nil, fmt.Errorf("unbalanced parentheses")
				}
				st, err := function(name, strings.TrimSpace(s[i+1:end]))
				if err != nil {
					return nil, err
				}
				steps = append(steps, st...)
				s = strings.TrimPrefix(s[end+1:], ".")
				continue
			}
			s = s[i+1:]
		}
		if !isIdentifier(name) {
			return nil, fmt.Errorf("%q is not an element name", name)
		}
		steps = append(steps, step{kind: stepField, arg: name})
	}
	return steps, nil
}

// function compiles a function call into the steps it stands for.
func function(name, arg string) ([]step, error) {
	switch name {
	case "ofType", "as":
		if !isIdentifier(arg) {
			return nil, fmt.Errorf("%s(%s): not a type", name, arg)
		}
		return []step{{kind: stepOfType, arg: arg}}, nil
	case "where":
		if t, ok := strings.CutPrefix(arg, "resolve() is "); ok && isIdentifier(strings.TrimSpace(t)) {
			return []step{{kind: stepResolveIs, arg: strings.TrimSpace(t)}}, nil
		}
		if m := equalsText.FindStringSubmatch(arg); m != nil {
			return []step{{kind: stepWhereEquals, arg: m[1], value: m[2]}}, nil
		}
	case "extension": // extension('url') is extension.where(url = 'url')
		if m := extensionText.FindStringSubmatch(arg); m != nil {
			return []step{{kind: stepField, arg: "extension"}, {kind: stepWhereEquals, arg: "url", value: m[1]}}, nil
		}
	}
	return nil, fmt.Errorf("%s(%s) is not supported", name, arg)
}

// equalsText is the criterion element = 'text' (a literal without quotes
// or escapes).
var equalsText = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*)\s*=\s*'([^'\\]*)'$`)

// extensionText is the argument of extension('url').
var extensionText = regexp.MustCompile(`^'([^'\\]+)'$`)

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(unicode.IsLetter(r) || r == '_' || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// node is a value reached by a path, with its type when a choice element's
// name told it (valueQuantity: Quantity).
type node struct {
	value any
	typ   string
}

// evalInto appends to out every value the expression selects in a
// resource. steps are the two buffers the steps pass the values between:
// Index evaluates tens of expressions per resource, and reusing them
// (and out) spares a slice per step of each.
func (fp fhirPath) evalInto(out []node, resourceType string, resource map[string]any, steps *[2][]node) []node {
	for _, p := range fp {
		if p.root != resourceType {
			continue
		}
		nodes, next := append(steps[0][:0], node{value: resource, typ: resourceType}), steps[1]
		for _, st := range p.steps {
			nodes, next = st.apply(next[:0], nodes), nodes
		}
		out = append(out, nodes...)
		steps[0], steps[1] = nodes, next
	}
	return out
}

// apply appends to out the values the step selects from in.
func (st step) apply(out, in []node) []node {
	for _, n := range in {
		m, isObject := n.value.(map[string]any)
		switch st.kind {
		case stepField:
			if !isObject {
				continue
			}
			if v, ok := m[st.arg]; ok {
				out = appendValues(out, v, "")
				continue
			}
			// A choice element: value[x] is written valueQuantity.
			for k, v := range m {
				if len(k) > len(st.arg) && strings.HasPrefix(k, st.arg) && unicode.IsUpper(rune(k[len(st.arg)])) {
					out = appendValues(out, v, k[len(st.arg):])
				}
			}
		case stepOfType:
			if strings.EqualFold(n.typ, st.arg) {
				out = append(out, n)
			}
		case stepResolveIs:
			if isObject && referenceType(m) == st.arg {
				out = append(out, n)
			}
		case stepWhereEquals:
			if isObject && m[st.arg] == st.value {
				out = append(out, n)
			}
		}
	}
	return out
}

func appendValues(out []node, v any, typ string) []node {
	if arr, ok := v.([]any); ok {
		for _, x := range arr {
			if x != nil {
				out = append(out, node{value: x, typ: typ})
			}
		}
		return out
	}
	if v != nil {
		out = append(out, node{value: v, typ: typ})
	}
	return out
}

// referenceType is the type a Reference points at: Patient for
// "Patient/1" or "https://host/fhir/Patient/1"; the type element when no
// literal reference says.
func referenceType(ref map[string]any) string {
	if r, _ := ref["reference"].(string); r != "" {
		if typ, _, ok := typeAndID(r); ok {
			return typ
		}
		return ""
	}
	t, _ := ref["type"].(string)
	return t
}

// typeAndID splits a literal reference into its type and id.
func typeAndID(ref string) (string, string, bool) {
	ref, _, _ = strings.Cut(ref, "/_history/")
	// The last two segments, cut without splitting the whole reference.
	rest, id, ok := cutLast(ref, "/")
	if !ok {
		return "", "", false
	}
	_, typ, _ := cutLast(rest, "/")
	if !isIdentifier(typ) || !unicode.IsUpper(rune(typ[0])) || id == "" {
		return "", "", false
	}
	return typ, id, true
}

// cutLast is strings.Cut at the last sep: s before it, after it, whether
// s holds it (when not: "", s, false).
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return "", s, false
}
