package domain_test

import (
	"reflect"
	"strings"
	"testing"

	"exchange/domain"
)

func TestParseScope(t *testing.T) {
	all := domain.InteractionCreate | domain.InteractionRead | domain.InteractionUpdate | domain.InteractionDelete | domain.InteractionSearch
	rs := domain.InteractionRead | domain.InteractionSearch
	for _, tc := range []struct {
		scope string
		want  *domain.ResourceScope // nil: a named scope
	}{
		{"openid", nil},
		{"fhirUser", nil},
		{"launch/patient", nil},
		{"online_access", nil},
		{"exchange/admin.read", nil},
		{"exchange/admin.write", nil},
		{"patient/Observation.rs", &domain.ResourceScope{Patient: true, Type: "Observation", Interactions: rs}},
		{"user/*.cruds", &domain.ResourceScope{Type: "*", Interactions: all}},
		{"patient/Observation.c", &domain.ResourceScope{Patient: true, Type: "Observation", Interactions: domain.InteractionCreate}},
		{"user/Patient.rd", &domain.ResourceScope{Type: "Patient", Interactions: domain.InteractionRead | domain.InteractionDelete}},
		// SMART v1 spellings.
		{"patient/*.read", &domain.ResourceScope{Patient: true, Type: "*", Interactions: rs}},
		{"user/Observation.write", &domain.ResourceScope{Type: "Observation", Interactions: domain.InteractionCreate | domain.InteractionUpdate | domain.InteractionDelete}},
		{"patient/*.*", &domain.ResourceScope{Patient: true, Type: "*", Interactions: all}},
		// Granular constraints: parameters ANDed, comma-separated values ORed.
		{"patient/Observation.rs?category=http://terminology.hl7.org/CodeSystem/observation-category|laboratory",
			&domain.ResourceScope{Patient: true, Type: "Observation", Interactions: rs, Constraints: []domain.ScopeConstraint{
				{Param: "category", Values: []string{"http://terminology.hl7.org/CodeSystem/observation-category|laboratory"}}}}},
		{"user/Observation.rs?code=https://w3id.org/openmhealth|omh:heart-rate:2.0,omh:step-count:3.0&category=vital-signs",
			&domain.ResourceScope{Type: "Observation", Interactions: rs, Constraints: []domain.ScopeConstraint{
				{Param: "code", Values: []string{"https://w3id.org/openmhealth|omh:heart-rate:2.0", "omh:step-count:3.0"}},
				{Param: "category", Values: []string{"vital-signs"}}}}},
		{"user/Observation.r?code=http%3A%2F%2Floinc.org%7C8867-4", &domain.ResourceScope{Type: "Observation", Interactions: domain.InteractionRead,
			Constraints: []domain.ScopeConstraint{{Param: "code", Values: []string{"http://loinc.org|8867-4"}}}}},
		{"user/*.rs?code=|x,http://loinc.org|", &domain.ResourceScope{Type: "*", Interactions: rs,
			Constraints: []domain.ScopeConstraint{{Param: "code", Values: []string{"|x", "http://loinc.org|"}}}}},
		// Backend services' system/ scopes read and search only.
		{"system/*.rs", &domain.ResourceScope{System: true, Type: "*", Interactions: rs}},
		{"system/Observation.read", &domain.ResourceScope{System: true, Type: "Observation", Interactions: rs}},
		{"system/Patient.s?code=x", &domain.ResourceScope{System: true, Type: "Patient", Interactions: domain.InteractionSearch,
			Constraints: []domain.ScopeConstraint{{Param: "code", Values: []string{"x"}}}}},
	} {
		got, err := domain.ParseScope(tc.scope)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseScope(%q) = %+v, %v; want %+v", tc.scope, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"", "foo", "launch", "launch/encounter", "Openid", "openid ", "system/*.cruds", "system/Observation.c", "system/*.write",
		"system/*.*", "System/*.rs", "Patient/Observation.rs",
		"patient/Observation", "patient/Observation.", "patient/.rs", "patient/observation.rs", "patient/Obs-ervation.rs",
		"patient/Observation.sr", "patient/Observation.rr", "patient/Observation.x", "patient/Observation.reads",
		"patient/Observation.rs?", "patient/Observation.rs?status=final", "patient/Observation.rs?code",
		"patient/Observation.rs?code=", "patient/Observation.rs?code=a,", "patient/Observation.rs?code=a|b|c",
		"patient/Observation.rs?code=|", `patient/Observation.rs?code=a\|b`, "patient/Observation.rs?code=%zz",
		"patient/Observation.rs?code=a%20b", "patient/Observation.rs?code=a&", "user/*.rs?_include=Observation:patient",
	} {
		if got, err := domain.ParseScope(bad); !domain.IsCode(err, domain.CodeInvalid) {
			t.Errorf("ParseScope(%q) = %+v, %v; want CodeInvalid", bad, got, err)
		}
	}
}

func TestScopeAllowed(t *testing.T) {
	const lab = "category=http://terminology.hl7.org/CodeSystem/observation-category|laboratory"
	for _, tc := range []struct {
		allowed []string
		scope   string
		want    bool
	}{
		{[]string{"openid", "profile"}, "openid", true},
		{[]string{"openid"}, "profile", false},
		{domain.AllScopes, "patient/Observation.rs?" + lab, true},
		{domain.AllScopes, "user/Patient.r", true},
		{domain.AllScopes, "exchange/admin.write", true},
		{domain.AllScopes, "system/*.rs", false},
		{[]string{"user/*.cruds"}, "system/Observation.rs", false},
		{[]string{"system/*.rs"}, "system/Observation.rs?code=x", true},
		{[]string{"system/*.rs"}, "user/Observation.rs", false},
		{[]string{"patient/*.cruds"}, "patient/Observation.rs?" + lab, true},
		{[]string{"patient/*.cruds"}, "user/Observation.rs", false}, // another context
		{[]string{"patient/*.read"}, "patient/Observation.s", true},
		{[]string{"patient/Observation.rs"}, "patient/Observation.c", false},
		{[]string{"patient/Observation.rs"}, "patient/Condition.rs", false},
		{[]string{"user/Observation.rs?code=X"}, "user/Observation.rs", false}, // wider than registered
		{[]string{"user/Observation.rs?code=X"}, "user/Observation.r?code=X", true},
		{[]string{"user/Observation.rs?code=X"}, "user/Observation.r?code=X&" + lab, true},
		{[]string{"user/Observation.rs?code=X"}, "user/Observation.r?code=X,Y", false},
		{[]string{"user/Observation.rs?code=X,Y"}, "user/Observation.r?code=Y", true},
		{[]string{"foo"}, "foo", false}, // never outside the vocabulary
		{[]string{"patient/*.rs"}, "patient/*.rs", true},
	} {
		if got := domain.ScopeAllowed(tc.allowed, tc.scope); got != tc.want {
			t.Errorf("ScopeAllowed(%v, %q) = %t, want %t", tc.allowed, tc.scope, got, tc.want)
		}
	}
}

func TestAccessIsACeiling(t *testing.T) {
	for _, scopes := range [][]string{nil, {"openid", "email"}, {"openid", "profile", "email", "fhirUser", "offline_access", "online_access", "launch/patient"}} {
		if acc, err := domain.NewAccess(scopes, 0); acc != nil || err != nil {
			t.Errorf("NewAccess(%v) = %v, %v: scopes without resource or admin access keep full access", scopes, acc, err)
		}
	}
	if _, err := domain.NewAccess([]string{"openid", "patient/Foo.bar"}, 0); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("a scope outside the vocabulary: %v", err)
	}
	user := &domain.Actor{User: domain.User{ID: 7, Type: domain.UserPractitioner, IsActive: true}}
	full := user.WithAccess(nil)
	if !full.HasFullAccess() || full.AllowAdmin("DELETE") != nil || full.AllowFHIR(domain.InteractionCreate, "Condition") != nil {
		t.Error("a token without resource or admin scopes must keep the user's full access")
	}

	acc, err := domain.NewAccess([]string{"openid", "patient/Observation.rs", "exchange/admin.read"}, 0)
	if err != nil || acc == nil {
		t.Fatalf("NewAccess: %v %v", acc, err)
	}
	limited := user.WithAccess(acc)
	if limited.HasFullAccess() {
		t.Error("a token with resource scopes is limited")
	}
	for _, tc := range []struct {
		err     error
		missing string // "": allowed
	}{
		{limited.AllowAdmin("GET"), ""},
		{limited.AllowAdmin("HEAD"), ""},
		{limited.AllowAdmin("POST"), "exchange/admin.write"},
		{limited.AllowAdmin("DELETE"), "exchange/admin.write"},
		{limited.AllowFHIR(domain.InteractionRead, "Observation"), ""},
		{limited.AllowFHIR(domain.InteractionSearch, "Observation"), ""},
		{limited.AllowFHIR(domain.InteractionSearch, "Patient"), "patient/Patient.s or user/Patient.s"},
		{limited.AllowFHIR(domain.InteractionCreate, "Observation"), "patient/Observation.c or user/Observation.c"},
		{limited.AllowFHIR(domain.InteractionUpdate, "Observation"), "patient/Observation.u"},
		{limited.AllowFHIR(domain.InteractionDelete, "Condition"), "user/Condition.d"},
	} {
		switch {
		case tc.missing == "" && tc.err != nil:
			t.Errorf("refused: %v", tc.err)
		case tc.missing != "" && (!domain.IsCode(tc.err, domain.CodeForbidden) || !strings.Contains(tc.err.Error(), tc.missing)):
			t.Errorf("got %v, want CodeForbidden naming %s", tc.err, tc.missing)
		}
	}
	noAdmin := user.WithAccess(must(domain.NewAccess([]string{"user/*.rs"}, 0)))
	if err := noAdmin.AllowAdmin("GET"); !domain.IsCode(err, domain.CodeForbidden) || !strings.Contains(err.Error(), "exchange/admin.read") {
		t.Errorf("a SMART-limited token on the admin API: %v", err)
	}
	if err := noAdmin.AllowFHIR(domain.InteractionRead, "Condition"); err != nil {
		t.Errorf("user/*.rs reads every type: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
