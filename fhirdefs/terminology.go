package fhirdefs

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Terminology answers whether a code belongs to a value set, from the
// expansions of a FHIR expansions package.
type Terminology struct {
	dir string

	mu   sync.RWMutex          // every coded element of every validation reads sets
	sets map[string]*expansion // by canonical URL; nil: not enumerable here
}

// expansion is the set of codes of a value set: system|code and code.
type expansion struct {
	codes map[string]bool
}

// OpenTerminology opens an expansions package directory.
func OpenTerminology(dir string) (*Terminology, error) {
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		return nil, err
	}
	return &Terminology{dir: dir, sets: map[string]*expansion{}}, nil
}

// Contains reports whether the value set has the code (system may be
// empty, then any system matches). known is false when the package does
// not enumerate the value set (too large, grammar-based, or absent): the
// binding cannot be checked.
func (t *Terminology) Contains(valueSet, system, code string) (contains, known bool) {
	if t == nil {
		return false, false
	}
	e := t.expansion(valueSet)
	if e == nil {
		return false, false
	}
	if system == "" {
		return e.codes["|"+code] || e.codes[code], true
	}
	return e.codes[system+"|"+code], true
}

func (t *Terminology) expansion(url string) *expansion {
	t.mu.RLock()
	e, ok := t.sets[url]
	t.mu.RUnlock()
	if ok {
		return e
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.sets[url]; ok { // loaded while this one waited
		return e
	}
	e, _ = t.load(url)
	t.sets[url] = e
	return e
}

type valueSetFile struct {
	URL       string `json:"url"`
	Expansion *struct {
		Extension []struct {
			URL string `json:"url"`
		} `json:"extension"`
		Contains []containsItem `json:"contains"`
	} `json:"expansion"`
}

type containsItem struct {
	System   string         `json:"system"`
	Code     string         `json:"code"`
	Contains []containsItem `json:"contains"`
}

// load reads ValueSet-<id>.json, named after the canonical's last segment.
func (t *Terminology) load(url string) (*expansion, error) {
	id := url[strings.LastIndexByte(url, '/')+1:]
	if id == "" || strings.ContainsAny(id, `\.`+string(filepath.Separator)) {
		return nil, errors.New("not a value set id")
	}
	data, err := os.ReadFile(filepath.Join(t.dir, "ValueSet-"+id+".json"))
	if err != nil {
		return nil, err
	}
	var f valueSetFile
	if err := json.Unmarshal(data, &f); err != nil || f.URL != url || f.Expansion == nil || len(f.Expansion.Contains) == 0 {
		return nil, errors.New("no usable expansion")
	}
	for _, ext := range f.Expansion.Extension {
		if strings.HasSuffix(ext.URL, "valueset-toocostly") || strings.HasSuffix(ext.URL, "valueset-unclosed") {
			return nil, errors.New("expansion incomplete")
		}
	}
	e := &expansion{codes: map[string]bool{}}
	var add func(items []containsItem)
	add = func(items []containsItem) {
		for _, c := range items {
			if c.Code != "" {
				e.codes[c.System+"|"+c.Code] = true
				e.codes[c.Code] = true
			}
			add(c.Contains)
		}
	}
	add(f.Expansion.Contains)
	return e, nil
}
