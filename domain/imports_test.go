package domain_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDomainKnowsNothingOfTransportOrStorage holds the package doc's
// promise: no file of package domain imports HTTP, Fiber, fosite or
// MongoDB; the transports map its error codes (handlers/httpstatus) and
// package repo implements its Store.
func TestDomainKnowsNothingOfTransportOrStorage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, banned := range []string{"net/http", "github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/ory/fosite", "go.mongodb.org/"} {
				if path == banned || strings.HasSuffix(banned, "/") && strings.HasPrefix(path, banned) || strings.HasPrefix(path, banned+"/") {
					t.Errorf("%s imports %s", file, path)
				}
			}
		}
	}
}
