package handlers

import (
	"testing"

	"exchange/fhirsearch"
)

// Every type the search configuration gives a native store is searched
// and read here: a type missing from the table would be refused.
func TestEveryNativeTypeIsServed(t *testing.T) {
	native := (&server{}).nativeTypes()
	catalog, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	configured := 0
	for _, r := range catalog.Resources() {
		if !r.Native() {
			continue
		}
		configured++
		if n, ok := native[r.Type]; !ok || n.search == nil || n.read == nil {
			t.Errorf("%s has a native store but no search or read here", r.Type)
		}
	}
	if configured != len(native) {
		t.Errorf("%d native types configured, %d served", configured, len(native))
	}
}
