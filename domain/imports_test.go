package domain_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// packageImports returns, for each non-test file of the package in the
// current directory, the paths it imports.
func packageImports(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	imports := map[string][]string{}
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
			imports[file] = append(imports[file], path)
		}
	}
	return imports
}

// TestDomainKnowsNothingOfTransportOrStorage holds the package doc's
// promise: no file of package domain imports HTTP, Fiber, fosite or
// MongoDB; the transports map its error codes (handlers/httpstatus) and
// package repo implements its Store.
func TestDomainKnowsNothingOfTransportOrStorage(t *testing.T) {
	for file, paths := range packageImports(t) {
		for _, path := range paths {
			for _, banned := range []string{"net/http", "github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/ory/fosite", "go.mongodb.org/"} {
				if path == banned || strings.HasSuffix(banned, "/") && strings.HasPrefix(path, banned) || strings.HasPrefix(path, banned+"/") {
					t.Errorf("%s imports %s", file, path)
				}
			}
		}
	}
}

// TestDomainImportsOnlyLeaves keeps the layering docs/architecture.md
// describes: of this module, the domain imports only the leaves it builds on,
// never the layers that call it (handlers, repo, oauth, console, ...).
func TestDomainImportsOnlyLeaves(t *testing.T) {
	allowed := []string{"exchange/fhirdefs", "exchange/internal/plainjson", "exchange/omh"}
	for file, paths := range packageImports(t) {
		for _, path := range paths {
			if strings.HasPrefix(path, "exchange/") && !slices.Contains(allowed, path) {
				t.Errorf("%s imports %s; docs/architecture.md says the domain imports only %v", file, path, allowed)
			}
		}
	}
}
