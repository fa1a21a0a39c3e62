package converter

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"exchange/fhirdefs"
)

// MapSetVersion names the official map set this engine runs: HL7's
// fhir-cross-version R4toR5 maps at commit 32d6a4cb (byte-identical at
// upstream HEAD of 2026-03), which carry no version of their own.
const MapSetVersion = "hl7.fhir.uv.xver R4toR5 0.1.0 (32d6a4cb)"

// Engine runs the compiled maps. It is safe for concurrent use: nothing
// in it changes after Compile.
type Engine struct {
	groups   map[string]*cgroup
	typePlus map[string]*cgroup   // the <<type+>> group of each R4 source type
	pairs    map[typePair]*cgroup // the <<types>> group of each (R4 source, R5 target) pair
	// element is the maps' Element group: it carries a primitive's id and
	// extensions (its `_x` sibling) wherever a rule assigns the primitive.
	element *cgroup
	// noValueCopies turns the shortcut of value-copying groups off
	// (cgroup.copiesValue), for the tests that compare it with the groups
	// run.
	noValueCopies bool
	r4, r5        *fhirdefs.Package
	log           *slog.Logger
	stats         Stats
	defs          sync.Map // defKey -> *tdef: the typing tables, made on first use
	// supported caches Supports for the types that have a map: the
	// verification of a type's map against the R4 definitions runs once.
	supported sync.Map // R4 type -> error (nil: converted)
}

type typePair struct{ source, target string }

// Stats describes a compiled map set, for the start-up log.
type Stats struct {
	Files, Groups, Rules int
	Patched              int // rules replaced or added by patches
	// Unsupported counts rules that never run: conditions other than
	// equality and inequality, and FHIRPath (evaluate) transforms.
	Unsupported int
	// ConceptMaps counts the ConceptMaps translate() calls use; 0 when
	// codes pass through (no ConceptMapsDir).
	ConceptMaps int
	Took        time.Duration
}

// Stats returns what Compile read and built.
func (e *Engine) Stats() Stats { return e.stats }

type cgroup struct {
	name             string
	params           []param // types resolved to type names
	extends          *cgroup
	rules            []*crule
	sourceType       string // of the first source parameter, when typed
	targetType       string // of the first target parameter, when typed
	defaultKind, loc string
	// copiesValue: the group only copies a primitive's value, as the
	// maps' primitive groups do (see valueCopy).
	copiesValue bool
}

type crule struct {
	name    string
	line    int
	sources []csource
	targets []ctarget
	then    []*crule
	calls   []ccall
	// simple: `src.a -> tgt.b` with no variables' use beyond the copy:
	// dispatched on the (source type, target type) pair.
	simple bool
	// skip is why the rule never runs ("" when it does).
	skip string
	// encodes: the rule's one source is a primitive its condition pins
	// to a literal (`src.type as s where (s = 'allergy')`), so the
	// literals its targets write (a Coding's system, code and display)
	// stand for that R4 value: they carry it, for the loss report.
	encodes bool
}

type csource struct {
	source
	elem  *elemRef // of Element, when it names one
	where *condition
}

// ctarget is a target with, for translate(), the ConceptMap it names
// (nil when codes pass through).
type ctarget struct {
	target
	elem       *elemRef // of Element, when it names one
	conceptMap *conceptMap
}

type ccall struct {
	group *cgroup
	args  []argument
}

// Options are the inputs of Compile.
type Options struct {
	MapsDir    string // FHIR_XVER_PACKAGE_DIR: the official *4to5.fml files
	PatchesDir string // FHIR_XVER_PATCHES_DIR: optional local patches
	// ConceptMapsDir holds the ConceptMaps that translate() applies
	// (FHIR_XVER_CONCEPTMAPS_DIR). Empty: translate() passes codes through
	// unchanged (FHIR_XVER_TRANSLATE_CODES=false).
	ConceptMapsDir string
	// R4 types the source: R4's own definitions (the R4 StructureDefinitions
	// the maps were written against); R5 types the target.
	R4, R5 *fhirdefs.Package
	Log    *slog.Logger
}

// Compile parses every map and patch and builds the engine. An error
// names the file and line at fault.
func Compile(o Options) (*Engine, error) {
	start := time.Now()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	files, err := filepath.Glob(filepath.Join(o.MapsDir, "*.fml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("FHIR_XVER_PACKAGE_DIR %s: no *.fml maps (run scripts/setup)", o.MapsDir)
	}
	e := &Engine{groups: map[string]*cgroup{}, typePlus: map[string]*cgroup{}, pairs: map[typePair]*cgroup{},
		r4: o.R4, r5: o.R5, log: o.Log}
	official, err := parseDir(files)
	if err != nil {
		return nil, err
	}
	var conceptMaps map[string]*conceptMap
	if o.ConceptMapsDir != "" {
		if conceptMaps, err = loadConceptMaps(o.ConceptMapsDir); err != nil {
			return nil, err
		}
	}
	used := map[*conceptMap]bool{}
	e.stats.Files = len(files)
	groups := map[string]*group{}
	var order []string
	aliases := map[string]map[string]string{} // file -> alias -> type
	for _, m := range official {
		aliases[m.File] = aliasTypes(m)
		for _, g := range m.Groups {
			if _, dup := groups[g.Name]; dup {
				return nil, fmt.Errorf("%s:%d: group %s is defined twice", g.File, g.Line, g.Name)
			}
			groups[g.Name] = g
			order = append(order, g.Name)
		}
	}
	if o.PatchesDir != "" {
		patchFiles, _ := filepath.Glob(filepath.Join(o.PatchesDir, "*.fml"))
		patches, err := parseDir(patchFiles)
		if err != nil {
			return nil, fmt.Errorf("FHIR_XVER_PATCHES_DIR: %w", err)
		}
		for _, m := range patches {
			aliases[m.File] = aliasTypes(m)
			for _, g := range m.Groups {
				if base, ok := groups[g.Name]; ok {
					e.stats.Patched += patchGroup(base, g)
					continue
				}
				groups[g.Name] = g
				order = append(order, g.Name)
				e.stats.Patched += len(g.Rules)
			}
		}
	}
	for _, name := range order {
		g := groups[name]
		cg := &cgroup{name: name, defaultKind: g.Default, loc: fmt.Sprintf("%s:%d", g.File, g.Line)}
		for _, prm := range g.Params {
			if t, ok := aliases[g.File][prm.Type]; ok {
				prm.Type = t
			}
			cg.params = append(cg.params, prm)
		}
		for _, prm := range cg.params {
			if prm.Mode == "source" && cg.sourceType == "" {
				cg.sourceType = prm.Type
			}
			if prm.Mode == "target" && cg.targetType == "" {
				cg.targetType = prm.Type
			}
		}
		e.groups[name] = cg
		switch g.Default {
		case "type+":
			if cg.sourceType == "" {
				return nil, fmt.Errorf("%s: <<type+>> group %s has no source type", cg.loc, name)
			}
			e.typePlus[cg.sourceType] = cg
		case "types":
			e.pairs[typePair{cg.sourceType, cg.targetType}] = cg
		}
	}
	for _, name := range order {
		g, cg := groups[name], e.groups[name]
		if g.Extends != "" {
			if cg.extends = e.groups[g.Extends]; cg.extends == nil {
				return nil, fmt.Errorf("%s: group %s extends unknown group %s", cg.loc, name, g.Extends)
			}
		}
		if cg.rules, err = e.compileRules(g.File, g.Rules, conceptMaps, used); err != nil {
			return nil, err
		}
	}
	e.element = e.groups["Element"]
	for _, cg := range e.groups {
		cg.copiesValue = e.element != nil && cg.extends == e.element && readsNoValue(e.element) && copiesOnlyValue(cg)
	}
	e.stats.Groups = len(e.groups)
	e.stats.ConceptMaps = len(used)
	e.stats.Took = time.Since(start)
	return e, nil
}

func parseDir(files []string) ([]*mapFile, error) {
	var maps []*mapFile
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m, err := parseFML(filepath.Base(f), string(data))
		if err != nil {
			return nil, err
		}
		maps = append(maps, m)
	}
	return maps, nil
}

// aliasTypes maps a file's `uses` aliases to type names: the last segment
// of the canonical (http://hl7.org/fhir/4.0/StructureDefinition/Condition
// is Condition, typed by R4 on the source side and R5 on the target side).
func aliasTypes(m *mapFile) map[string]string {
	out := map[string]string{}
	for _, u := range m.Uses {
		if u.Alias != "" {
			out[u.Alias] = u.URL[strings.LastIndexByte(u.URL, '/')+1:]
		}
	}
	return out
}

// patchGroup applies a patch group to the official one: a rule replaces
// the official rule of the same name, or is appended. It returns how many
// rules it changed.
func patchGroup(base, patch *group) int {
	for _, r := range patch.Rules {
		i := slices.IndexFunc(base.Rules, func(o *rule) bool { return r.Name != "" && o.Name == r.Name })
		if i >= 0 {
			base.Rules[i] = r
		} else {
			base.Rules = append(base.Rules, r)
		}
	}
	return len(patch.Rules)
}

// compileRules compiles a list of rules. conceptMaps are the ConceptMaps
// by URL (nil: codes pass through); used collects those translate() names.
func (e *Engine) compileRules(file string, rules []*rule, conceptMaps map[string]*conceptMap, used map[*conceptMap]bool) ([]*crule, error) {
	var out []*crule
	for _, r := range rules {
		e.stats.Rules++
		cr := &crule{name: r.Name, line: r.Line}
		for _, s := range r.Sources {
			cs := csource{source: s, elem: newElemRef(s.Element)}
			if s.Where != "" {
				c, ok := parseCondition(s.Where)
				if !ok {
					cr.skip = "condition (" + s.Where + ") is neither an equality nor an inequality"
				}
				cs.where = c
			}
			cr.sources = append(cr.sources, cs)
		}
		for _, t := range r.Targets {
			ct := ctarget{target: t, elem: newElemRef(t.Element)}
			switch {
			case t.Transform == nil:
			case t.Transform.Kind == "evaluate":
				cr.skip = fmt.Sprintf("FHIRPath transform (%v) is not supported", firstLiteral(t.Transform))
			case t.Transform.Kind == "translate" && conceptMaps != nil:
				url, output := translateArgs(t.Transform)
				if output != "code" {
					cr.skip = fmt.Sprintf("translate() to %q is not supported (only 'code')", output)
					break
				}
				if ct.conceptMap = conceptMaps[url]; ct.conceptMap == nil {
					return nil, fmt.Errorf("%s:%d: rule %s: translate() names ConceptMap %q, which is not among the ConceptMaps", file, r.Line, r.Name, url)
				}
				used[ct.conceptMap] = true
			}
			cr.targets = append(cr.targets, ct)
		}
		if cr.skip != "" {
			e.stats.Unsupported++
			e.log.Debug("FML rule skipped", "file", file, "line", r.Line, "rule", r.Name, "reason", cr.skip)
		}
		for _, c := range r.Calls {
			g := e.groups[c.Group]
			if g == nil {
				return nil, fmt.Errorf("%s:%d: rule %s calls unknown group %s", file, r.Line, r.Name, c.Group)
			}
			cr.calls = append(cr.calls, ccall{group: g, args: c.Args})
		}
		var err error
		if cr.then, err = e.compileRules(file, r.Then, conceptMaps, used); err != nil {
			return nil, err
		}
		cr.simple = len(r.Sources) == 1 && r.Sources[0].Element != "" && len(r.Targets) == 1 &&
			r.Targets[0].Element != "" && r.Targets[0].Transform == nil && len(r.Then) == 0 && len(r.Calls) == 0
		cr.encodes = len(cr.sources) == 1 && cr.sources[0].where.pins(cr.sources[0].Var)
		out = append(out, cr)
	}
	return out, nil
}

// copiesOnlyValue reports whether g is a primitive group of the maps:
// `group string(source src, target tgt) extends Element { src.value as v
// -> tgt.value = v; }`, one rule that copies the source's value into
// the target's, unchanged.
func copiesOnlyValue(g *cgroup) bool {
	if len(g.params) != 2 || g.params[0].Mode != "source" || g.params[1].Mode != "target" || len(g.rules) != 1 {
		return false
	}
	src, tgt, r := g.params[0].Name, g.params[1].Name, g.rules[0]
	if r.skip != "" || len(r.sources) != 1 || len(r.targets) != 1 || len(r.then) != 0 || len(r.calls) != 0 {
		return false
	}
	s, t := r.sources[0], r.targets[0]
	return s.Context == src && s.Element == "value" && s.Type == "" && s.where == nil && s.Var != "" && s.Var != src && s.Var != tgt &&
		t.Context == tgt && t.Element == "value" && t.Var == "" && t.conceptMap == nil && t.Transform != nil &&
		t.Transform.Kind == "value" && len(t.Transform.Args) == 1 && t.Transform.Args[0].Var == s.Var
}

// readsNoValue reports whether every rule of g that runs reads an
// element other than `value` of g's source, and g extends nothing: run
// on a primitive without its `_x` sibling (no id, no extension), such a
// group finds nothing and does nothing.
func readsNoValue(g *cgroup) bool {
	if g.extends != nil || len(g.params) == 0 || g.params[0].Mode != "source" {
		return false
	}
	for _, r := range g.rules {
		if r.skip == "" && (len(r.sources) == 0 || r.sources[0].Context != g.params[0].Name || r.sources[0].Element == "" || r.sources[0].Element == "value") {
			return false
		}
	}
	return true
}

// translateArgs reads translate(source, 'map URL', 'output').
func translateArgs(t *transform) (url, output string) {
	if len(t.Args) == 3 {
		url, _ = t.Args[1].Literal.(string)
		output, _ = t.Args[2].Literal.(string)
	}
	return url, output
}

// condition is `path = value` or `path != value`: the only conditions
// the engine evaluates.
type condition struct {
	left, right operand
	not         bool
}

// operand is a path from a variable (s.system), or a literal.
type operand struct {
	path    []string   // variable first
	elems   []*elemRef // the path's elements: path[1:]
	literal any
}

var conditionPattern = regexp.MustCompile(`^\s*(\S+?)\s*(!=|=)\s*(\S+)\s*$`)
var pathPattern = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$`)

// pins reports whether the condition holds for one value of the
// variable only: `v = 'literal'` (or the literal first).
func (c *condition) pins(variable string) bool {
	if c == nil || c.not || variable == "" {
		return false
	}
	self := func(o operand) bool { return len(o.path) == 1 && o.path[0] == variable }
	literal := func(o operand) bool { return o.path == nil && o.literal != nil }
	return self(c.left) && literal(c.right) || literal(c.left) && self(c.right)
}

func parseCondition(text string) (*condition, bool) {
	m := conditionPattern.FindStringSubmatch(text)
	if m == nil {
		return nil, false
	}
	left, ok1 := parseOperand(m[1])
	right, ok2 := parseOperand(m[3])
	if !ok1 || !ok2 {
		return nil, false
	}
	return &condition{left: left, right: right, not: m[2] == "!="}, true
}

func parseOperand(s string) (operand, bool) {
	switch {
	case len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' && !strings.Contains(s[1:len(s)-1], "'"):
		return operand{literal: s[1 : len(s)-1]}, true
	case s == "true" || s == "false":
		return operand{literal: s == "true"}, true
	case json.Valid([]byte(s)) && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')):
		return operand{literal: json.Number(s)}, true
	case pathPattern.MatchString(s):
		path := strings.Split(s, ".")
		o := operand{path: path}
		for _, name := range path[1:] {
			o.elems = append(o.elems, newElemRef(name))
		}
		return o, true
	}
	return operand{}, false
}

// ResourceTypes lists the R4 resource types the engine converts (those
// Supports accepts), sorted.
func (e *Engine) ResourceTypes() []string {
	var out []string
	for t := range e.typePlus {
		if e.Supports(t) == nil {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// errNoGroup is a dispatch with no group for its pair of types.
var errNoGroup = errors.New("no group maps the types")
