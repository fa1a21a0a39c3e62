package converter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseOfficialMaps parses every official map and checks the census
// of the map set: 170 files, 632 groups, 4,868 rules.
func TestParseOfficialMaps(t *testing.T) {
	dir := os.Getenv("FHIR_XVER_PACKAGE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "standards", "fhir", "xver-r4-r5", "maps")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.fml"))
	groups, rules := 0, 0
	var count func([]*rule)
	count = func(rs []*rule) {
		for _, r := range rs {
			rules++
			count(r.Then)
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := parseFML(filepath.Base(f), string(data))
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.HasPrefix(m.URL, "http://hl7.org/fhir/uv/xver/StructureMap/") {
			t.Errorf("%s: url %q", f, m.URL)
		}
		groups += len(m.Groups)
		for _, g := range m.Groups {
			count(g.Rules)
		}
	}
	if len(files) != 170 || groups != 632 || rules != 4868 {
		t.Errorf("%d files, %d groups, %d rules; want 170, 632, 4868 (run scripts/setup first)", len(files), groups, rules)
	}
}

func TestParseRuleForms(t *testing.T) {
	m, err := parseFML("x.fml", "/// url = \"http://example.org/x\"\r\n"+
		"uses \"http://hl7.org/fhir/4.0/StructureDefinition/Condition\" alias CR4 as source\r\n"+
		"group G(source src : CR4, target tgt) extends Base <<type+>> {\r\n"+
		"  src.onset : dateTime -> tgt.onset \"onsetDateTime\";\r\n"+
		"  src.a as s where (s.system = sysUrl) -> tgt.b = create('Coding') as t, t.code = 'x', t.flag = true then G2(s, t) \"named\";\r\n"+
		"  src.c as v -> tgt.d = translate(v, 'http://cm', 'code'); // comment\r\n"+
		"  src.e as s then { s.f -> tgt.g; } \"nested\";\r\n"+
		"  src -> tgt.h = (%s.substring(0, 1));\r\n"+
		"}\r\n")
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[0]
	if m.URL != "http://example.org/x" || g.Name != "G" || g.Extends != "Base" || g.Default != "type+" || len(g.Params) != 2 || g.Params[0].Type != "CR4" {
		t.Fatalf("group %+v", g)
	}
	r := g.Rules
	if len(r) != 5 || r[0].Name != "onsetDateTime" || r[0].Sources[0].Type != "dateTime" {
		t.Fatalf("rules %+v", r)
	}
	if r[1].Name != "named" || r[1].Sources[0].Where != "s.system = sysUrl" || len(r[1].Targets) != 3 ||
		r[1].Targets[0].Transform.Kind != "create" || r[1].Targets[2].Transform.Args[0].Literal != true || r[1].Calls[0].Group != "G2" {
		t.Errorf("rule 2 %+v", r[1])
	}
	if r[2].Name != "c" || r[2].Targets[0].Transform.Kind != "translate" || len(r[2].Targets[0].Transform.Args) != 3 {
		t.Errorf("rule 3 %+v", r[2])
	}
	if r[3].Name != "nested" || len(r[3].Targets) != 0 || len(r[3].Then) != 1 || r[3].Then[0].Targets[0].Element != "g" {
		t.Errorf("rule 4 %+v", r[3])
	}
	if r[4].Targets[0].Transform.Kind != "evaluate" {
		t.Errorf("rule 5 %+v", r[4])
	}
	// A string literal in a condition may hold parentheses and an escaped
	// quote; the text after it is still read as the rest of the rule.
	m, err = parseFML("q.fml", "group Q(source src, target tgt) {\n"+
		"  src.a as s where (s.text = 'it\\'s (odd') -> tgt.b = s \"quoted\";\n"+
		"  src.c -> tgt.d;\n}\n")
	if err != nil || len(m.Groups[0].Rules) != 2 || m.Groups[0].Rules[0].Sources[0].Where != `s.text = 'it\'s (odd'` || m.Groups[0].Rules[0].Name != "quoted" {
		t.Errorf("a quoted condition: %+v %v", m, err)
	}
	for _, bad := range []string{"group {", "group G(source src) { src.a -> tgt.b }", "group G(middle src) {}", "uses 'x' as", "group G(source s) { s.a -> t.b = 'open; }"} {
		if _, err := parseFML("bad.fml", bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestConditions(t *testing.T) {
	for text, ok := range map[string]bool{
		"s = 'choice'": true, "s.system = sysUrl": true, "s.type != 'CatalogEntry'": true, "s = 8": true,
		"src.system.exists()": false, "coding.exists(code = 'X' and system = 'y')": false, "a = 'b' and c = 'd'": false,
	} {
		if _, got := parseCondition(text); got != ok {
			t.Errorf("%q: supported %v, want %v", text, got, ok)
		}
	}
}
