package converter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Which target of a ConceptMap element translate() takes: an equivalent
// one, else the first usable one; never not-related-to; nothing for
// noMap; the first group's for a code in two groups.
func TestLoadConceptMaps(t *testing.T) {
	dir := t.TempDir()
	cm := `{"resourceType": "ConceptMap", "url": "http://example.org/cm", "group": [
		{"element": [
			{"code": "a", "target": [{"code": "wide", "relationship": "source-is-broader-than-target"}, {"code": "same", "relationship": "equivalent"}]},
			{"code": "b", "target": [{"code": "first", "relationship": "source-is-broader-than-target"}, {"code": "second", "relationship": "source-is-broader-than-target"}]},
			{"code": "c", "target": [{"code": "unrelated", "relationship": "not-related-to"}]},
			{"code": "d", "noMap": true},
			{"code": "e", "target": [{"code": "narrower", "relationship": "source-is-narrower-than-target"}]}]},
		{"element": [{"code": "a", "target": [{"code": "other-group", "relationship": "equivalent"}]}]}]}`
	if err := os.WriteFile(filepath.Join(dir, "ConceptMap-x.json"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	maps, err := loadConceptMaps(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := maps["http://example.org/cm"]
	for code, want := range map[string]string{"a": "same", "b": "first", "c": "c", "d": "d", "e": "narrower", "z": "z"} {
		got, tr := m.translate(code)
		if got != want || (tr != nil) != (want != code) {
			t.Errorf("%s: %v %v, want %s", code, got, tr, want)
		}
	}
	if v, tr := m.translate(true); v != true || tr != nil {
		t.Errorf("a boolean: %v %v", v, tr)
	}
	var none *conceptMap
	if v, tr := none.translate("a"); v != "a" || tr != nil {
		t.Errorf("no map: %v %v", v, tr)
	}
	// A file that is not a ConceptMap, and a folder with none, are refused by name.
	if err := os.WriteFile(filepath.Join(dir, "ConceptMap-bad.json"), []byte(`{"resourceType": "ValueSet"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConceptMaps(dir); err == nil || !strings.Contains(err.Error(), "ConceptMap-bad.json") {
		t.Errorf("not a ConceptMap: %v", err)
	}
	if _, err := loadConceptMaps(t.TempDir()); err == nil {
		t.Error("an empty folder was accepted")
	}
}
