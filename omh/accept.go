package omh

import (
	"encoding/json"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The accept check is a shortcut in front of the schema library, not a
// second validator. Validating a data point with the library was the
// largest stage of ingest, a third of it: its validator allocates a
// scope and evaluation record for every schema and value it visits, so
// that it can report where and why a value fails. A valid data point, which
// is nearly every one, needs none of that. The accept check answers the
// one question "does the library accept this value?" from the library's
// own compiled schemas, allocating nothing of its own, and only where it
// can answer exactly; the library still compiles the schemas, resolves every
// reference, checks the schemas against their meta-schemas, and decides
// every data point the check does not accept, with its own error message.
//
// It is equal to the library where it answers because:
//   - It reads the library's compiled *jsonschema.Schema, the schema as the
//     library will apply it (references resolved, draft-04's boolean
//     exclusiveMinimum folded, a $ref's siblings dropped before 2019), and
//     evaluates each keyword as the library's validator does (validator.go
//     of jsonschema v6): the same order of type, enum, format and $ref, the
//     library's own format functions and compiled patterns, the library's
//     integer test (any number whose decimal value is whole, 1.0 too) and
//     enum equality (a string equals only the same string).
//   - It knows a small set of keywords (those the Open mHealth and IEEE
//     1752 schemas use) and any schema node with any other keyword set,
//     found by reflection over every exported field so that a keyword a
//     later library version adds is unknown too, is unsure; so is a schema
//     of draft 2019-09 or later, a value of a kind Parse does not produce,
//     and a chain deeper than maxAcceptDepth (which is also how a reference
//     cycle, an error to the library, ends).
//   - Its verdicts are exact both ways, not only its acceptances, because
//     oneOf counts the branches that pass and needs both: an unsure branch
//     makes the oneOf unsure unless two others already pass.
//
// TestAcceptCheckAgrees compares both over the schemas' test data against
// every schema, FuzzAcceptCheck over mutated data points, and
// TestAcceptCheckEdges on small schemas at the edges of the keyword set.

// verdict is the accept check's answer about the library's.
type verdict uint8

const (
	unsure   verdict = iota // the library decides
	accepted                // the library accepts the value
	rejected                // the library rejects the value
)

// maxAcceptDepth bounds the schema nodes one check descends through; the
// data point schemas need a few dozen at most.
const maxAcceptDepth = 256

// jsonKind is a set of JSON value kinds, as the type keyword names them.
type jsonKind uint8

const (
	kindNull jsonKind = 1 << iota
	kindBoolean
	kindNumber
	kindInteger // only in a type keyword: a value is a number
	kindString
	kindArray
	kindObject
)

var kindNames = map[string]jsonKind{"null": kindNull, "boolean": kindBoolean, "number": kindNumber,
	"integer": kindInteger, "string": kindString, "array": kindArray, "object": kindObject}

// kindOf is the kind of a value as Parse decodes it, or 0 for anything
// else (a float64, say), which the check leaves to the library.
func kindOf(v any) jsonKind {
	switch v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBoolean
	case json.Number:
		return kindNumber
	case string:
		return kindString
	case []any:
		return kindArray
	case map[string]any:
		return kindObject
	}
	return 0
}

// acceptNode is one compiled schema, prepared for the accept check.
type acceptNode struct {
	// checked says the keywords below apply; else constant is the whole
	// verdict: a boolean schema's, or unsure for a schema the check does
	// not know.
	checked  bool
	constant verdict

	types  jsonKind // 0: any
	enum   *acceptEnum
	format func(any) error
	ref    *acceptNode // before 2019, $ref is the only keyword compiled

	allOf, anyOf, oneOf []*acceptNode

	required []string
	// requiredOther are the required names that are not properties:
	// checkProperties finds a required property missing as it looks it up.
	requiredOther []string
	properties    map[string]*acceptNode
	propertyList  []acceptProperty // properties, as a list to look up
	additional    *acceptNode      // additionalProperties as a schema
	noAdditional  bool             // additionalProperties: false

	items    *acceptNode
	minItems int // -1: none

	pattern jsonschema.Regexp
}

// acceptProperty is a member of the properties keyword: its name and its
// schema.
type acceptProperty struct {
	name     string
	schema   *acceptNode
	required bool
}

// acceptEnum is an enum keyword: its strings indexed, and the kinds of its
// values.
type acceptEnum struct {
	strings map[string]bool
	kinds   jsonKind
}

// schemaFieldsKnown are the exported fields of jsonschema.Schema the accept
// check evaluates; schemaFieldsInert are those that never change a
// verdict (identity and annotations). Any other field set makes a node
// unsure.
var (
	schemaFieldsKnown = map[string]bool{"Bool": true, "Ref": true, "Types": true, "Enum": true,
		"AllOf": true, "AnyOf": true, "OneOf": true, "Format": true, "Required": true, "Properties": true,
		"AdditionalProperties": true, "Items": true, "MinItems": true, "Pattern": true}
	schemaFieldsInert = map[string]bool{"DraftVersion": true, "Location": true, "ID": true, "Anchor": true,
		"Title": true, "Description": true, "Default": true, "Comment": true, "ReadOnly": true,
		"WriteOnly": true, "Examples": true, "Deprecated": true}
)

// acceptBuilder prepares the nodes of compiled schemas, each once, so that
// schemas that share subschemas share their nodes and cycles close.
type acceptBuilder map[*jsonschema.Schema]*acceptNode

func (b acceptBuilder) node(s *jsonschema.Schema) *acceptNode {
	if n, ok := b[s]; ok {
		return n
	}
	n := &acceptNode{}
	b[s] = n
	if !b.fill(n, s) {
		// In place: nodes built meanwhile may point to n.
		*n = acceptNode{constant: unsure}
	}
	return n
}

// fill prepares n from s, reporting false when the check does not know s.
func (b acceptBuilder) fill(n *acceptNode, s *jsonschema.Schema) bool {
	if s.DraftVersion >= 2019 || !onlyKnownFields(s) {
		return false
	}
	if s.Bool != nil {
		n.constant = rejected
		if *s.Bool {
			n.constant = accepted
		}
		return true
	}
	n.checked = true
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			n.types |= kindNames[t]
		}
	}
	if s.Enum != nil {
		n.enum = &acceptEnum{strings: map[string]bool{}}
		for _, e := range s.Enum.Values {
			k := kindOf(e)
			if k == 0 {
				return false
			}
			n.enum.kinds |= k
			if str, ok := e.(string); ok {
				n.enum.strings[str] = true
			}
		}
	}
	if s.Format != nil {
		n.format = s.Format.Validate
		if s.Format.Name == "date-time" {
			n.format = dateTimeFormat(s.Format.Validate)
		}
	}
	if s.Ref != nil {
		n.ref = b.node(s.Ref)
	}
	n.allOf, n.anyOf, n.oneOf = b.nodes(s.AllOf), b.nodes(s.AnyOf), b.nodes(s.OneOf)
	n.required = s.Required
	for _, name := range s.Required {
		if _, ok := s.Properties[name]; !ok {
			n.requiredOther = append(n.requiredOther, name)
		}
	}
	if s.Properties != nil {
		n.properties = make(map[string]*acceptNode, len(s.Properties))
		for name, p := range s.Properties {
			n.properties[name] = b.node(p)
			n.propertyList = append(n.propertyList, acceptProperty{name, n.properties[name], slices.Contains(s.Required, name)})
		}
		// In a fixed order, so that runs check alike.
		slices.SortFunc(n.propertyList, func(a, b acceptProperty) int { return strings.Compare(a.name, b.name) })
	}
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		n.noAdditional = !a
	case *jsonschema.Schema:
		n.additional = b.node(a)
	default:
		return false
	}
	switch items := s.Items.(type) {
	case nil:
	case *jsonschema.Schema:
		n.items = b.node(items)
	default: // a tuple
		return false
	}
	n.minItems = -1
	if s.MinItems != nil {
		n.minItems = *s.MinItems
	}
	n.pattern = s.Pattern
	return true
}

func (b acceptBuilder) nodes(schemas []*jsonschema.Schema) []*acceptNode {
	var out []*acceptNode
	for _, s := range schemas {
		out = append(out, b.node(s))
	}
	return out
}

// onlyKnownFields reports whether every exported field of s that is set
// is one the check evaluates or one that never changes a verdict.
func onlyKnownFields(s *jsonschema.Schema) bool {
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.IsExported() && !schemaFieldsKnown[f.Name] && !schemaFieldsInert[f.Name] && !v.Field(i).IsZero() {
			return false
		}
	}
	return true
}

// check returns the library's verdict on v, or unsure; depth is how many
// more nodes it may descend through.
func (n *acceptNode) check(v any, depth int) verdict {
	if !n.checked {
		return n.constant
	}
	if depth == 0 {
		return unsure
	}
	depth--
	k := kindOf(v)
	if k == 0 {
		return unsure
	}
	if n.types != 0 && n.types&k == 0 && (n.types&kindInteger == 0 || k != kindNumber || !isInteger(v.(json.Number))) {
		return rejected
	}
	if n.enum != nil {
		if vd := n.enum.check(v, k); vd != accepted {
			return vd
		}
	}
	if n.format != nil && n.format(v) != nil {
		return rejected
	}
	if n.ref != nil {
		return n.ref.check(v, depth)
	}
	// Every keyword must pass: a rejection decides, an unsure one leaves
	// the rest to look for a rejection.
	result := accepted
	meet := func(vd verdict) bool {
		if vd != accepted {
			result = vd
		}
		return vd == rejected
	}
	switch v := v.(type) {
	case map[string]any:
		if meet(n.checkObject(v, depth)) {
			return rejected
		}
	case []any:
		if n.minItems >= 0 && len(v) < n.minItems {
			return rejected
		}
		if n.items != nil {
			for _, item := range v {
				if meet(n.items.check(item, depth)) {
					return rejected
				}
			}
		}
	case string:
		if n.pattern != nil && !n.pattern.MatchString(v) {
			return rejected
		}
	}
	for _, s := range n.allOf {
		if meet(s.check(v, depth)) {
			return rejected
		}
	}
	if len(n.anyOf) > 0 && meet(anyOf(n.anyOf, v, depth)) {
		return rejected
	}
	if len(n.oneOf) > 0 && meet(oneOf(n.oneOf, v, depth)) {
		return rejected
	}
	return result
}

func (n *acceptNode) checkObject(obj map[string]any, depth int) verdict {
	if len(n.propertyList) <= len(obj)+lookupMargin {
		return n.checkProperties(obj, depth)
	}
	for _, name := range n.required {
		if _, ok := obj[name]; !ok {
			return rejected
		}
	}
	result := accepted
	for name, value := range obj {
		var vd verdict
		switch p, ok := n.properties[name]; {
		case ok:
			vd = p.check(value, depth)
		case n.noAdditional:
			return rejected
		case n.additional != nil:
			vd = n.additional.check(value, depth)
		default:
			continue
		}
		if vd == rejected {
			return rejected
		}
		if vd == unsure {
			result = unsure
		}
	}
	return result
}

// lookupMargin is how many more properties than members an object may
// have for checkProperties to look them up rather than checkObject
// iterate over its members: a map iteration costs a few lookups (a data
// point's objects are checked one or more times each, and iterating over
// their members was a third of the accept check).
const lookupMargin = 3

// checkProperties is checkObject's loop over the members of obj, taken
// the other way round: each property of the schema is looked up in obj,
// and the members that are not properties, counted, are only visited when
// a schema applies to them. The verdict is the same: a member that is
// rejected rejects the object, else one unsure makes it unsure, whatever
// the order they come in; a required member missing rejects it too,
// whether found before or while the properties are looked up.
func (n *acceptNode) checkProperties(obj map[string]any, depth int) verdict {
	for _, name := range n.requiredOther {
		if _, ok := obj[name]; !ok {
			return rejected
		}
	}
	result, matched := accepted, 0
	for _, p := range n.propertyList {
		value, ok := obj[p.name]
		if !ok {
			if p.required {
				return rejected
			}
			continue
		}
		matched++
		switch p.schema.check(value, depth) {
		case rejected:
			return rejected
		case unsure:
			result = unsure
		}
	}
	switch {
	case matched == len(obj) || !n.noAdditional && n.additional == nil:
		return result
	case n.noAdditional:
		return rejected
	}
	for name, value := range obj {
		if _, ok := n.properties[name]; ok {
			continue
		}
		switch n.additional.check(value, depth) {
		case rejected:
			return rejected
		case unsure:
			result = unsure
		}
	}
	return result
}

// anyOf: one branch that passes decides; else any unsure one leaves it
// unsure.
func anyOf(branches []*acceptNode, v any, depth int) verdict {
	result := rejected
	for _, s := range branches {
		switch s.check(v, depth) {
		case accepted:
			return accepted
		case unsure:
			result = unsure
		}
	}
	return result
}

// oneOf: exactly one branch must pass; two that pass decide a rejection
// whatever the others say.
func oneOf(branches []*acceptNode, v any, depth int) verdict {
	passed, sure := 0, true
	for _, s := range branches {
		switch s.check(v, depth) {
		case accepted:
			if passed++; passed == 2 {
				return rejected
			}
		case unsure:
			sure = false
		}
	}
	switch {
	case !sure:
		return unsure
	case passed == 1:
		return accepted
	}
	return rejected
}

// check is the enum keyword: a string is in it or not; a value of a kind
// none of its values has is not; anything else (a number among numbers,
// say) is left to the library.
func (e *acceptEnum) check(v any, k jsonKind) verdict {
	if s, ok := v.(string); ok {
		if e.strings[s] {
			return accepted
		}
		return rejected
	}
	if e.kinds&k == 0 {
		return rejected
	}
	return unsure
}

// isInteger is the library's test of the integer type: the number's
// decimal value is whole. Digits alone, as most numbers are, are whole
// without parsing.
func isInteger(n json.Number) bool {
	s := string(n)
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	digits := len(s) > 0
	for i := 0; i < len(s) && digits; i++ {
		digits = s[i] >= '0' && s[i] <= '9'
	}
	if digits {
		return true
	}
	r, ok := new(big.Rat).SetString(string(n))
	return ok && r.IsInt()
}

// dateTimeFormat is the library's date-time format check (lib) with a
// shortcut in front: every data point holds two or more date-times, and
// the library's check allocates on every call (it splits the time at its
// colons), two allocations a data point. A string plainDateTime passes,
// the library passes; anything else (a leap second, an unusual form, a
// value that is not a date-time) goes to the library, which decides.
func dateTimeFormat(lib func(any) error) func(any) error {
	return func(v any) error {
		if s, ok := v.(string); ok && plainDateTime(s) {
			return nil
		}
		return lib(v)
	}
}

// plainDateTime reports whether s is a date-time of RFC 3339 as devices
// write it, yyyy-mm-ddThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm) (t and z in
// either case), of a day its month has and a second from 00 to 59. The
// library's check (validateDateTime of jsonschema v6's format.go) passes
// every such string: its date is what time.Parse("2006-01-02") reads, and
// its time what validateTime reads, whose leap-second rule needs a second
// of 60, left to the library here. TestPlainDateTime and
// FuzzPlainDateTime compare both.
func plainDateTime(s string) bool {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' && s[10] != 't' || s[13] != ':' || s[16] != ':' {
		return false
	}
	centuries, ok1 := twoDigits(s[0:2])
	years, ok2 := twoDigits(s[2:4])
	month, ok3 := twoDigits(s[5:7])
	day, ok4 := twoDigits(s[8:10])
	hour, ok5 := twoDigits(s[11:13])
	minute, ok6 := twoDigits(s[14:16])
	second, ok7 := twoDigits(s[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 ||
		month < 1 || month > 12 || day < 1 || day > daysIn(centuries*100+years, month) || hour > 23 || minute > 59 || second > 59 {
		return false
	}
	rest := s[19:]
	if len(rest) > 0 && rest[0] == '.' {
		i := 1
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	if rest == "Z" || rest == "z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	zh, ok1 := twoDigits(rest[1:3])
	zm, ok2 := twoDigits(rest[4:6])
	return ok1 && ok2 && zh <= 23 && zm <= 59
}

// twoDigits reads two decimal digits.
func twoDigits(s string) (int, bool) {
	if s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

// daysIn is the number of days of a month (1 to 12) of a year, counted by
// the time package as time.Parse checks a date: day 0 of the next month
// is the month's last.
func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
