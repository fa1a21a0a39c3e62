package converter

import (
	"exchange/fhirdefs"

	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// The syntax tree of FHIR Mapping Language, as much of it as the official
// R4 -> R5 maps use (and a little more: several sources, `check`).

// mapFile is one parsed `.fml` file: a StructureMap.
type mapFile struct {
	File   string
	URL    string // from the `/// url = "..."` metadata, or `map "url" = name`
	Name   string
	Uses   []use
	Groups []*group
}

// use is `uses "<canonical>" alias <alias> as source|target`.
type use struct {
	URL, Alias, Mode string
}

// group is `group Name(params) extends Other <<type+>> { rules }`.
type group struct {
	Name    string
	Params  []param
	Extends string
	// Default is "type+" for the default group of its source type,
	// "types" for a conversion between the pair of its parameter types,
	// or "".
	Default string
	Rules   []*rule
	File    string
	Line    int
}

// param is `source|target name [: type]`.
type param struct {
	Mode, Name, Type string
}

// rule is `sources -> targets then ... "name";`. A rule may have no
// targets (`src.a as s then { ... }`).
type rule struct {
	Name    string
	Sources []source
	Targets []target
	Then    []*rule // a nested block
	Calls   []call  // then Group(a, b), ...
	Line    int
}

// source is `context[.element][ : type][ as var][ where (cond)][ check (cond)]`.
type source struct {
	Context, Element, Type, Var string
	Where                       string // the FHIRPath condition, without its parentheses
}

// target is `context[.element][ = transform][ as var]`.
type target struct {
	Context, Element, Var string
	Transform             *transform
}

// transform is the value of a target: a variable or literal, a
// function (create, translate, evaluate, ...), or a parenthesised
// FHIRPath expression (Kind "evaluate").
type transform struct {
	Kind string // "value", "create", "translate", "evaluate", or another function name
	Args []argument
}

// argument is a variable name or a literal (string, bool or json.Number).
type argument struct {
	Var     string
	Literal any
}

// call is `Group(var, var, ...)` after `then`.
type call struct {
	Group string
	Args  []argument
}

// parseFML parses the text of one map file. CRLF line ends are fine.
func parseFML(file, text string) (*mapFile, error) {
	p := &parser{file: file, src: strings.ReplaceAll(text, "\r\n", "\n"), line: 1}
	m := &mapFile{File: file}
	if err := p.parseFile(m); err != nil {
		return nil, err
	}
	return m, nil
}

type parser struct {
	file string
	src  string
	pos  int
	line int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, p.line, fmt.Sprintf(format, args...))
}

// skip passes whitespace and comments. `///` metadata lines are handed
// to meta when given.
func (p *parser) skip(meta func(key, value string)) {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '\n':
			p.line++
			p.pos++
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case strings.HasPrefix(p.src[p.pos:], "//"):
			end := strings.IndexByte(p.src[p.pos:], '\n')
			if end < 0 {
				end = len(p.src) - p.pos
			}
			comment := p.src[p.pos : p.pos+end]
			if meta != nil && strings.HasPrefix(comment, "///") {
				if k, v, ok := strings.Cut(strings.TrimPrefix(comment, "///"), "="); ok {
					meta(strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`))
				}
			}
			p.pos += end
		case strings.HasPrefix(p.src[p.pos:], "/*"):
			end := strings.Index(p.src[p.pos+2:], "*/")
			if end < 0 {
				p.pos = len(p.src)
				return
			}
			p.line += strings.Count(p.src[p.pos:p.pos+2+end], "\n")
			p.pos += end + 4
		default:
			return
		}
	}
}

func (p *parser) eof() bool {
	p.skip(nil)
	return p.pos >= len(p.src)
}

// peek reports whether the next token is tok (a punctuation or a word).
func (p *parser) peek(tok string) bool {
	p.skip(nil)
	if !strings.HasPrefix(p.src[p.pos:], tok) {
		return false
	}
	if isIdentStart(rune(tok[0])) { // a whole word only
		end := p.pos + len(tok)
		return end >= len(p.src) || !isIdentPart(rune(p.src[end]))
	}
	return true
}

func (p *parser) accept(tok string) bool {
	if p.peek(tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) expect(tok string) error {
	if !p.accept(tok) {
		return p.errorf("expected %q, found %q", tok, p.near())
	}
	return nil
}

func (p *parser) near() string {
	rest := p.src[p.pos:]
	if len(rest) > 30 {
		rest = rest[:30]
	}
	return rest
}

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }
func isIdentPart(r rune) bool  { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func (p *parser) ident() (string, error) {
	p.skip(nil)
	start := p.pos
	for p.pos < len(p.src) && (isIdentPart(rune(p.src[p.pos])) && (p.pos > start || isIdentStart(rune(p.src[p.pos])))) {
		p.pos++
	}
	if p.pos == start {
		return "", p.errorf("expected a name, found %q", p.near())
	}
	return p.src[start:p.pos], nil
}

// quoted reads a 'single' or "double" quoted string with backslash escapes.
func (p *parser) quoted() (string, error) {
	p.skip(nil)
	if p.pos >= len(p.src) || (p.src[p.pos] != '\'' && p.src[p.pos] != '"') {
		return "", p.errorf("expected a string, found %q", p.near())
	}
	q := p.src[p.pos]
	var b strings.Builder
	for i := p.pos + 1; i < len(p.src); i++ {
		switch c := p.src[i]; {
		case c == '\\' && i+1 < len(p.src):
			i++
			switch e := p.src[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(e)
			}
		case c == q:
			p.pos = i + 1
			return b.String(), nil
		case c == '\n':
			return "", p.errorf("unterminated string")
		default:
			b.WriteByte(c)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) atString() bool {
	p.skip(nil)
	return p.pos < len(p.src) && (p.src[p.pos] == '\'' || p.src[p.pos] == '"')
}

// balanced reads a parenthesised FHIRPath text, its string literals
// respected (fhirdefs' scanner: 'it\'s' included), and returns it without
// the outer parentheses.
func (p *parser) balanced() (string, error) {
	if err := p.expect("("); err != nil {
		return "", err
	}
	open := p.pos - 1
	end := fhirdefs.MatchingParen(p.src, open)
	if end < 0 {
		return "", p.errorf("unbalanced parentheses")
	}
	p.line += strings.Count(p.src[open:end], "\n")
	p.pos = end + 1
	return strings.TrimSpace(p.src[open+1 : end]), nil
}

func (p *parser) parseFile(m *mapFile) error {
	p.skip(func(k, v string) {
		switch k {
		case "url":
			m.URL = v
		case "name":
			m.Name = v
		}
	})
	for !p.eof() {
		switch {
		case p.accept("map"):
			url, err := p.quoted()
			if err != nil {
				return err
			}
			if err := p.expect("="); err != nil {
				return err
			}
			m.URL = url
			if p.atString() {
				m.Name, err = p.quoted()
			} else {
				m.Name, err = p.ident()
			}
			if err != nil {
				return err
			}
		case p.accept("uses"):
			var u use
			var err error
			if u.URL, err = p.quoted(); err != nil {
				return err
			}
			if p.accept("alias") {
				if u.Alias, err = p.ident(); err != nil {
					return err
				}
			}
			if err := p.expect("as"); err != nil {
				return err
			}
			if u.Mode, err = p.ident(); err != nil {
				return err
			}
			m.Uses = append(m.Uses, u)
		case p.accept("imports"):
			if _, err := p.quoted(); err != nil {
				return err
			}
		case p.peek("group"):
			g, err := p.parseGroup()
			if err != nil {
				return err
			}
			g.File = m.File
			m.Groups = append(m.Groups, g)
		default:
			return p.errorf("unexpected %q", p.near())
		}
		p.accept(";")
	}
	return nil
}

func (p *parser) parseGroup() (*group, error) {
	_ = p.expect("group")
	g := &group{Line: p.line}
	var err error
	if g.Name, err = p.ident(); err != nil {
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for !p.accept(")") {
		var prm param
		if prm.Mode, err = p.ident(); err != nil {
			return nil, err
		}
		if prm.Mode != "source" && prm.Mode != "target" {
			return nil, p.errorf("group %s: parameter mode %q is not source or target", g.Name, prm.Mode)
		}
		if prm.Name, err = p.ident(); err != nil {
			return nil, err
		}
		if p.accept(":") {
			if prm.Type, err = p.ident(); err != nil {
				return nil, err
			}
		}
		g.Params = append(g.Params, prm)
		if !p.accept(",") && !p.peek(")") {
			return nil, p.errorf("group %s: expected , or ) in the parameters", g.Name)
		}
	}
	if p.accept("extends") {
		if g.Extends, err = p.ident(); err != nil {
			return nil, err
		}
	}
	if p.accept("<<") {
		kind, err := p.ident()
		if err != nil {
			return nil, err
		}
		if p.accept("+") {
			kind += "+"
		}
		if err := p.expect(">>"); err != nil {
			return nil, err
		}
		g.Default = kind
	}
	if g.Rules, err = p.parseRuleBlock(); err != nil {
		return nil, fmt.Errorf("group %s: %w", g.Name, err)
	}
	return g, nil
}

// parseRuleBlock parses `{ rule; rule; ... }`.
func (p *parser) parseRuleBlock() ([]*rule, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	var rules []*rule
	for !p.accept("}") {
		if p.eof() {
			return nil, p.errorf("unterminated block")
		}
		r, err := p.parseRule()
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func (p *parser) parseRule() (*rule, error) {
	r := &rule{Line: p.line}
	for {
		s, err := p.parseSource()
		if err != nil {
			return nil, err
		}
		r.Sources = append(r.Sources, s)
		if !p.accept(",") {
			break
		}
	}
	if p.accept("->") {
		for {
			t, err := p.parseTarget()
			if err != nil {
				return nil, err
			}
			r.Targets = append(r.Targets, t)
			if !p.accept(",") {
				break
			}
		}
	}
	if p.accept("then") {
		if p.peek("{") {
			var err error
			if r.Then, err = p.parseRuleBlock(); err != nil {
				return nil, err
			}
		} else {
			for {
				c, err := p.parseCall()
				if err != nil {
					return nil, err
				}
				r.Calls = append(r.Calls, c)
				if !p.accept(",") {
					break
				}
			}
		}
	}
	if p.atString() {
		var err error
		if r.Name, err = p.quoted(); err != nil {
			return nil, err
		}
	}
	if err := p.expect(";"); err != nil {
		return nil, err
	}
	if r.Name == "" && len(r.Sources) == 1 {
		r.Name = r.Sources[0].Element // FML's implicit name: the source element
	}
	return r, nil
}

func (p *parser) parseSource() (source, error) {
	var s source
	var err error
	if s.Context, err = p.ident(); err != nil {
		return s, err
	}
	if p.accept(".") {
		if s.Element, err = p.ident(); err != nil {
			return s, err
		}
	}
	if p.accept(":") {
		if s.Type, err = p.ident(); err != nil {
			return s, err
		}
	}
	for {
		switch {
		case p.accept("as"):
			if s.Var, err = p.ident(); err != nil {
				return s, err
			}
		case p.accept("where"):
			if s.Where, err = p.balanced(); err != nil {
				return s, err
			}
		case p.accept("check"):
			// An assertion on the input: not evaluated (no map uses one).
			if _, err = p.balanced(); err != nil {
				return s, err
			}
		default:
			return s, nil
		}
	}
}

func (p *parser) parseTarget() (target, error) {
	var t target
	var err error
	if t.Context, err = p.ident(); err != nil {
		return t, err
	}
	if p.accept(".") {
		if t.Element, err = p.ident(); err != nil {
			return t, err
		}
	}
	if p.accept("=") {
		if t.Transform, err = p.parseTransform(); err != nil {
			return t, err
		}
	}
	if p.accept("as") {
		if t.Var, err = p.ident(); err != nil {
			return t, err
		}
	}
	return t, nil
}

func (p *parser) parseTransform() (*transform, error) {
	if p.peek("(") {
		expr, err := p.balanced()
		if err != nil {
			return nil, err
		}
		return &transform{Kind: "evaluate", Args: []argument{{Literal: expr}}}, nil
	}
	if p.atString() || p.peekNumber() {
		a, err := p.parseArgument()
		if err != nil {
			return nil, err
		}
		return &transform{Kind: "value", Args: []argument{a}}, nil
	}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	if !p.peek("(") {
		return &transform{Kind: "value", Args: []argument{wordArgument(name)}}, nil
	}
	_ = p.expect("(")
	t := &transform{Kind: name}
	for !p.accept(")") {
		a, err := p.parseArgument()
		if err != nil {
			return nil, err
		}
		t.Args = append(t.Args, a)
		if !p.accept(",") && !p.peek(")") {
			return nil, p.errorf("%s: expected , or )", name)
		}
	}
	return t, nil
}

func (p *parser) peekNumber() bool {
	p.skip(nil)
	return p.pos < len(p.src) && (p.src[p.pos] == '-' || (p.src[p.pos] >= '0' && p.src[p.pos] <= '9'))
}

func (p *parser) parseArgument() (argument, error) {
	if p.atString() {
		s, err := p.quoted()
		return argument{Literal: s}, err
	}
	if p.peekNumber() {
		start := p.pos
		p.pos++
		for p.pos < len(p.src) && strings.IndexByte("0123456789.", p.src[p.pos]) >= 0 {
			p.pos++
		}
		return argument{Literal: json.Number(p.src[start:p.pos])}, nil
	}
	name, err := p.ident()
	if err != nil {
		return argument{}, err
	}
	return wordArgument(name), nil
}

// wordArgument is a variable, or the literal true or false.
func wordArgument(name string) argument {
	switch name {
	case "true":
		return argument{Literal: true}
	case "false":
		return argument{Literal: false}
	}
	return argument{Var: name}
}

func (p *parser) parseCall() (call, error) {
	var c call
	var err error
	if c.Group, err = p.ident(); err != nil {
		return c, err
	}
	if err := p.expect("("); err != nil {
		return c, err
	}
	for !p.accept(")") {
		a, err := p.parseArgument()
		if err != nil {
			return c, err
		}
		c.Args = append(c.Args, a)
		if !p.accept(",") && !p.peek(")") {
			return c, p.errorf("call %s: expected , or )", c.Group)
		}
	}
	return c, nil
}
