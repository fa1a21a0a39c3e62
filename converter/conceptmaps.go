package converter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// conceptMap is what translate() needs of an R4 -> R5 ConceptMap: for
// each R4 code it translates, its R5 code. It is built once, at Compile.
type conceptMap struct {
	url   string
	codes map[string]codeTarget
}

// codeTarget is the R5 code an R4 code translates to, and how the map
// relates them (equivalent, source-is-broader-than-target, ...).
type codeTarget struct {
	code, relationship string
}

// conceptMapFile is the JSON of an R5 ConceptMap, as much as is read.
type conceptMapFile struct {
	ResourceType string `json:"resourceType"`
	URL          string `json:"url"`
	Group        []struct {
		Element []struct {
			Code   string `json:"code"`
			Target []struct {
				Code         string `json:"code"`
				Relationship string `json:"relationship"`
			} `json:"target"`
		} `json:"element"`
	} `json:"group"`
}

// loadConceptMaps reads every ConceptMap-*.json of dir, by canonical URL.
//
// The R5 $translate operation counts a target as a translation unless its
// relationship is not-related-to; translate() with the 'code' output
// needs one code, so an `equivalent` target wins, else the first usable
// target in the map's order (Encounter `finished` is broader than both
// `completed` and `discharged`: the map lists `completed` first). An
// element with no usable target (noMap, or only not-related-to) has no
// translation: its code passes through, and R5 validation decides. When
// a code appears in several groups (source code systems), the first
// group's translation holds: the maps' code() input carries no system.
func loadConceptMaps(dir string) (map[string]*conceptMap, error) {
	files, err := filepath.Glob(filepath.Join(dir, "ConceptMap-*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("%s: no ConceptMap-*.json files (run scripts/setup)", dir)
	}
	out := make(map[string]*conceptMap, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var cm conceptMapFile
		if err := json.Unmarshal(data, &cm); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if cm.ResourceType != "ConceptMap" || cm.URL == "" {
			return nil, fmt.Errorf("%s: not a ConceptMap with a url", f)
		}
		m := &conceptMap{url: cm.URL, codes: map[string]codeTarget{}}
		for _, g := range cm.Group {
			for _, el := range g.Element {
				if _, seen := m.codes[el.Code]; seen {
					continue
				}
				var pick *codeTarget
				for _, t := range el.Target {
					if t.Relationship == "not-related-to" || t.Code == "" {
						continue
					}
					if pick == nil || (t.Relationship == "equivalent" && pick.relationship != "equivalent") {
						pick = &codeTarget{code: t.Code, relationship: t.Relationship}
					}
				}
				if pick != nil {
					m.codes[el.Code] = *pick
				}
			}
		}
		out[cm.URL] = m
	}
	return out, nil
}

// translate returns the R5 code of an R4 code, and the translation when
// the code changed. A nil map, a code the map does not translate, and a
// value that is not a code pass through.
func (m *conceptMap) translate(v any) (any, *translation) {
	code, ok := v.(string)
	if m == nil || !ok {
		return v, nil
	}
	t, ok := m.codes[code]
	if !ok || t.code == code {
		return v, nil
	}
	return t.code, &translation{from: code, to: t.code, conceptMap: m.url}
}
