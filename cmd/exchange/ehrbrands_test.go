package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEHRBrandsCommand: `exchange ehr-brands import FILE` imports a Brands
// Bundle whose references are urn:uuid fullUrls, and again changes
// nothing; `ehr-brands client` seals the secret EHR_CLIENT_SECRET gives,
// keeps it when none is given, and removes it with --public.
func TestEHRBrandsCommand(t *testing.T) {
	vars := programVars(t.TempDir())
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "brands.json")
	bundle := `{"resourceType": "Bundle", "type": "collection", "entry": [
		{"fullUrl": "urn:uuid:0c6b8f1e-1d2a-4f1b-9e51-000000000001", "resource": {"resourceType": "Organization", "name": "Zeta Health",
			"endpoint": [{"reference": "urn:uuid:0c6b8f1e-1d2a-4f1b-9e51-000000000002"}]}},
		{"fullUrl": "urn:uuid:0c6b8f1e-1d2a-4f1b-9e51-000000000002", "resource": {"resourceType": "Endpoint", "status": "active",
			"connectionType": {"code": "hl7-fhir-rest"}, "address": "https://fhir.zeta.example.org/R4"}},
		{"resource": {"resourceType": "Organization", "name": "Zeta Clinic Springfield",
			"partOf": {"reference": "urn:uuid:0c6b8f1e-1d2a-4f1b-9e51-000000000001"},
			"address": [{"city": "Springfield", "state": "IL", "postalCode": "62704"}]}}]}`
	if err := os.WriteFile(file, []byte(bundle), 0o600); err != nil {
		t.Fatal(err)
	}
	exchange := func(vars map[string]string, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := run(ctx, args, env(vars), nil, &out, io.Discard)
		return out.String(), err
	}
	for i, want := range []string{"1 in the Bundle (1 new, 0 changed), 1 facilities (1 new)", "1 in the Bundle (0 new, 0 changed), 1 facilities (0 new)"} {
		if out, err := exchange(vars, "ehr-brands", "import", file, "--vendor", "zeta"); err != nil || !strings.Contains(out, want) {
			t.Errorf("import %d: %v %q, want %q", i+1, err, out, want)
		}
	}
	withSecret := map[string]string{"EHR_CLIENT_SECRET": "an EHR client secret"}
	for k, v := range vars {
		withSecret[k] = v
	}
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{withSecret, nil, "confidential"},
		{vars, nil, "confidential"}, // kept
		{vars, []string{"--public"}, "public"},
	} {
		args := append([]string{"ehr-brands", "client", "--vendor", "zeta", "--client-id", "exchange-at-zeta"}, tc.args...)
		if out, err := exchange(tc.vars, args...); err != nil || !strings.Contains(out, "registered, "+tc.want) {
			t.Errorf("%v: %v %q, want %s", args, err, out, tc.want)
		}
	}
	if _, err := exchange(withSecret, "ehr-brands", "client", "--vendor", "zeta", "--client-id", "c", "--public"); !errors.As(err, new(usageError)) {
		t.Errorf("--public with a secret: %v, want a usage error", err)
	}
}
