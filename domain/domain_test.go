package domain_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

type fixture struct {
	db  *repo.DB
	svc *domain.Service
	now time.Time
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{db: repotest.NewDB(t), now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	f.svc = domain.NewService(domain.Config{Store: f.db, SourceBase: "https://exchange.example.org/fhir-source", Now: func() time.Time { return f.now }})
	return f
}

func fieldOf(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Field
	}
	return ""
}

func TestCreateUserValidation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		in    domain.NewUser
		field string
	}{
		{"no email", domain.NewUser{Type: domain.UserPatient}, "email"},
		{"bad email", domain.NewUser{Email: "not an email", Type: domain.UserPatient}, "email"},
		{"display name", domain.NewUser{Email: "Jo <jo@example.org>", Type: domain.UserPatient}, "email"},
		{"no type", domain.NewUser{Email: "jo@example.org"}, "userType"},
		{"patient superuser", domain.NewUser{Email: "jo@example.org", Type: domain.UserPatient, IsSuperuser: true}, "isSuperuser"},
		{"short password", domain.NewUser{Email: "jo@example.org", Type: domain.UserPatient, Password: "short"}, "password"},
	} {
		if _, err := f.svc.CreateUser(ctx, tc.in); !domain.IsCode(err, domain.CodeInvalid) || fieldOf(err) != tc.field {
			t.Errorf("%s: got %v (field %q), want invalid %s", tc.name, err, fieldOf(err), tc.field)
		}
	}
	u, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "  Jo@Example.ORG ", Type: domain.UserPractitioner, Password: "long enough", IsSuperuser: true})
	if err != nil || u.Email != "jo@example.org" || !u.IsStaff || !u.IsActive {
		t.Fatalf("CreateUser = %+v, %v", u, err)
	}
	if _, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "JO@example.org", Type: domain.UserPatient}); !domain.IsCode(err, domain.CodeDuplicate) || fieldOf(err) != "email" {
		t.Errorf("same email in other case: %v", err)
	}
	if n, err := f.svc.CountUsers(ctx); err != nil || n != 1 {
		t.Errorf("users = %d, %v, want 1", n, err)
	}
}

func TestAuthenticate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "jo@example.org", Type: domain.UserPractitioner, Password: "the password"}); err != nil {
		t.Fatal(err)
	}
	if u, err := f.svc.Authenticate(ctx, "JO@example.org ", "the password", "10.0.0.1"); err != nil || u.Email != "jo@example.org" {
		t.Fatalf("right password: %v", err)
	}
	_, wrong := f.svc.Authenticate(ctx, "jo@example.org", "wrong", "10.0.0.1")
	_, unknown := f.svc.Authenticate(ctx, "nobody@example.org", "wrong", "10.0.0.1")
	if !domain.IsCode(wrong, domain.CodeLogin) || !domain.IsCode(unknown, domain.CodeLogin) || wrong.Error() != unknown.Error() {
		t.Errorf("wrong password %v and unknown email %v must be refused alike", wrong, unknown)
	}
	// A password-less account never logs in, not even with an empty password.
	if _, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "nopw@example.org", Type: domain.UserPatient}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Authenticate(ctx, "nopw@example.org", "", "10.0.0.2"); !domain.IsCode(err, domain.CodeLogin) {
		t.Errorf("empty password on a password-less account: %v", err)
	}
}

// Guessing across many accounts from one address slows that address, not
// the accounts elsewhere, and not an account known at that address.
func TestLoginThrottlePerAddress(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "jo@example.org", Type: domain.UserPractitioner, Password: "the password"}); err != nil {
		t.Fatal(err)
	}
	stuff := func(addr string) {
		t.Helper()
		for i := range 20 {
			if _, err := f.svc.Authenticate(ctx, fmt.Sprintf("guess%d@example.org", i), "guess", addr); !domain.IsCode(err, domain.CodeLogin) {
				t.Fatalf("attempt %d from %s: %v", i+1, addr, err)
			}
		}
	}
	stuff("203.0.113.9")
	_, err := f.svc.Authenticate(ctx, "jo@example.org", "the password", "203.0.113.9")
	if !domain.IsCode(err, domain.CodeThrottled) || domain.RetryAfter(err) != time.Second {
		t.Fatalf("after 20 failures from the address: %v (retry after %v)", err, domain.RetryAfter(err))
	}
	if _, err := f.svc.Authenticate(ctx, "jo@example.org", "the password", "198.51.100.1"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// jo is known at 198.51.100.1 now: stuffing from there spares them.
	stuff("198.51.100.1")
	if _, err := f.svc.Authenticate(ctx, "jo@example.org", "the password", "198.51.100.1"); err != nil {
		t.Fatalf("a known account at a stuffed address: %v", err)
	}
	f.now = f.now.Add(time.Second)
	if _, err := f.svc.Authenticate(ctx, "jo@example.org", "the password", "203.0.113.9"); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
}

// TestLoginThrottleKeyedBySecret: the throttle names an account by an
// HMAC of its email under the service's ThrottleKey, never a plain hash a
// reader of the database could recompute from a guessed email; instances
// sharing the key count an account together, another key counts apart.
func TestLoginThrottleKeyedBySecret(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	instance := func(key string) *domain.Service {
		return domain.NewService(domain.Config{Store: db, ThrottleKey: []byte(key), Now: func() time.Time { return now }})
	}
	first, second, elsewhere := instance("the secret of this deployment"), instance("the secret of this deployment"), instance("another deployment's secret")
	const email, addr = "jo@example.org", "203.0.113.9"
	if _, err := first.CreateUser(ctx, domain.NewUser{Email: email, Type: domain.UserPractitioner, Password: "the password"}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := first.Authenticate(ctx, email, "wrong", addr); !domain.IsCode(err, domain.CodeLogin) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if _, err := second.Authenticate(ctx, email, "the password", addr); !domain.IsCode(err, domain.CodeThrottled) {
		t.Errorf("another instance with the same key after 5 failures: %v, want throttled", err)
	}
	if _, err := elsewhere.Authenticate(ctx, email, "wrong", addr); !domain.IsCode(err, domain.CodeLogin) {
		t.Errorf("an instance with another key: %v, want its own count (refused, not throttled)", err)
	}

	keyed := func(key string) string {
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write([]byte(email))
		return "account:" + hex.EncodeToString(mac.Sum(nil))
	}
	plain := sha256.Sum256([]byte(email))
	var docs []struct {
		ID       string `bson:"_id"`
		Failures int    `bson:"failures"`
	}
	cur, err := repotest.Collection(t, db, "login_throttle").Find(ctx, bson.M{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, d := range docs {
		if strings.Contains(d.ID, hex.EncodeToString(plain[:])) {
			t.Errorf("a throttle record holds the plain SHA-256 of the email: %s", d.ID)
		}
		counts[d.ID] = d.Failures
	}
	if counts[keyed("the secret of this deployment")] != 5 || counts[keyed("another deployment's secret")] != 1 {
		t.Errorf("the account's records by key: %v", counts)
	}
}

// organizationReads is the real store, counting the organizations it
// returns to the domain (n) and the reads that returned them (calls). A
// walk that would not end is cut at maxOrganizationReads calls.
type organizationReads struct {
	*repo.DB
	n, calls int
}

const maxOrganizationReads = 100

func (s *organizationReads) read(orgs []domain.Organization, err error) ([]domain.Organization, error) {
	s.n += len(orgs)
	if s.calls++; s.calls > maxOrganizationReads {
		return nil, errors.New("the organizations were read more than maxOrganizationReads times")
	}
	return orgs, err
}

func (s *organizationReads) AllOrganizations(ctx context.Context) ([]domain.Organization, error) {
	return s.read(s.DB.AllOrganizations(ctx))
}

func (s *organizationReads) OrganizationsPartOf(ctx context.Context, ids []int64) ([]domain.Organization, error) {
	return s.read(s.DB.OrganizationsPartOf(ctx, ids))
}

// TestActorReadsItsPartOfTheTree: a practitioner's actor reads the
// organizations below their memberships, not the whole tree, one read per
// level of it (not per organization), and gets the same inherited roles:
// down the tree, the nearest membership deciding. A cycle in stored data
// ends the walk.
func TestActorReadsItsPartOfTheTree(t *testing.T) {
	store := &organizationReads{DB: repotest.NewDB(t)}
	svc := domain.NewService(domain.Config{Store: store})
	ctx, sys := context.Background(), domain.SystemActor()
	org := func(name string, partOf int64) int64 {
		t.Helper()
		o, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: name, Type: "dept", PartOf: partOf})
		if err != nil {
			t.Fatal(err)
		}
		return o.ID
	}
	hospital := org("Hospital", 0)
	cardiology, radiology := org("Cardiology", hospital), org("Radiology", hospital)
	ward := org("Ward", cardiology)
	elsewhere := org("Elsewhere", 0)
	for i := range 20 {
		org(fmt.Sprintf("Team %d", i), elsewhere)
	}
	// A cycle the API would refuse, written to the database as stored data
	// might hold it: loop is part of its own part.
	loop := org("Loop", 0)
	loopPart := org("Part of the loop", loop)
	if _, err := repotest.Collection(t, store.DB, "organizations").UpdateByID(ctx, loop, bson.M{"$set": bson.M{"partOf": loopPart}}); err != nil {
		t.Fatal(err)
	}
	practitioner := func(email string, roles map[int64]domain.Role) int64 {
		t.Helper()
		u, err := svc.CreateUser(ctx, domain.NewUser{Email: email, Type: domain.UserPractitioner})
		if err != nil {
			t.Fatal(err)
		}
		for o, r := range roles {
			if err := svc.AddMember(ctx, sys, o, u.ID, r); err != nil {
				t.Fatal(err)
			}
		}
		return u.ID
	}
	for _, tc := range []struct {
		name  string
		user  int64
		roles map[int64]domain.Role // every organization's expected role
		reads int
		calls int // levels read: one per level below the memberships, the last one empty
	}{
		{"a manager of cardiology", practitioner("c@example.org", map[int64]domain.Role{cardiology: domain.RoleManager}),
			map[int64]domain.Role{cardiology: domain.RoleManager, ward: domain.RoleManager}, 1, 2},
		{"a viewer of the hospital, member of the ward", practitioner("h@example.org", map[int64]domain.Role{hospital: domain.RoleViewer, ward: domain.RoleMember}),
			map[int64]domain.Role{hospital: domain.RoleViewer, cardiology: domain.RoleViewer, radiology: domain.RoleViewer, ward: domain.RoleMember}, 3, 2},
		{"a member of nothing", practitioner("n@example.org", nil), map[int64]domain.Role{}, 0, 0},
		{"a member of the loop", practitioner("l@example.org", map[int64]domain.Role{loop: domain.RoleMember}),
			map[int64]domain.Role{loop: domain.RoleMember, loopPart: domain.RoleMember}, 2, 2},
	} {
		store.n, store.calls = 0, 0
		actor, err := svc.Actor(ctx, tc.user)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if store.n != tc.reads || store.calls != tc.calls {
			t.Errorf("%s: %d organizations read in %d reads, want %d in %d", tc.name, store.n, store.calls, tc.reads, tc.calls)
		}
		for _, o := range []int64{hospital, cardiology, radiology, ward, elsewhere, loop, loopPart} {
			role, ok := actor.RoleIn(o)
			if want, wantOK := tc.roles[o]; role != want || ok != wantOK {
				t.Errorf("%s in organization %d: %q %v, want %q %v", tc.name, o, role, ok, want, wantOK)
			}
		}
	}
}

func TestCreatePatientLeavesNothingBehindOnFailure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	mrn := domain.Identifier{System: "http://example.org/mrn", Value: "1"}
	in := domain.NewPatient{Email: "a@example.org", FamilyName: "A", GivenNames: []string{"Ann"}, BirthDate: "1990-01-01",
		Identifiers: []domain.Identifier{mrn}, OrganizationIDs: []int64{org.ID}}
	if _, err := f.svc.CreatePatient(ctx, sys, in); err != nil {
		t.Fatal(err)
	}
	clash := in
	clash.Email = "b@example.org"
	if _, err := f.svc.CreatePatient(ctx, sys, clash); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatalf("identifier clash: %v", err)
	}
	if _, err := f.svc.UserByEmail(ctx, "b@example.org"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the refused patient's user was kept: %v", err)
	}
	sameEmail := in
	sameEmail.Identifiers = []domain.Identifier{{System: "http://example.org/mrn", Value: "2"}}
	if _, err := f.svc.CreatePatient(ctx, sys, sameEmail); !domain.IsCode(err, domain.CodeDuplicate) || fieldOf(err) != "email" {
		t.Fatalf("email clash: %v", err)
	}
	// MRN 2 was never claimed: the email was checked first.
	fresh := in
	fresh.Email, fresh.Identifiers = "c@example.org", sameEmail.Identifiers
	if _, err := f.svc.CreatePatient(ctx, sys, fresh); err != nil {
		t.Fatalf("MRN 2 should be free: %v", err)
	}
}

func TestCreatePatientValidation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	ok := domain.NewPatient{Email: "a@example.org", FamilyName: "A", GivenNames: []string{"Ann"}, OrganizationIDs: []int64{org.ID}}
	for _, tc := range []struct {
		name  string
		edit  func(*domain.NewPatient)
		field string
	}{
		{"no family name", func(p *domain.NewPatient) { p.FamilyName = "" }, "nameFamily"},
		{"no given name", func(p *domain.NewPatient) { p.GivenNames = []string{" "} }, "nameGiven"},
		{"bad birth date", func(p *domain.NewPatient) { p.BirthDate = "1990-02-30" }, "birthDate"},
		{"future birth date", func(p *domain.NewPatient) { p.BirthDate = "2027-01-01" }, "birthDate"},
		{"relative identifier system", func(p *domain.NewPatient) { p.Identifiers = []domain.Identifier{{System: "mrn", Value: "1"}} }, "identifiers[0].system"},
		{"blank identifier value", func(p *domain.NewPatient) { p.Identifiers = []domain.Identifier{{System: "urn:x", Value: " "}} }, "identifiers[0].value"},
		{"repeated identifier", func(p *domain.NewPatient) {
			p.Identifiers = []domain.Identifier{{System: "urn:x", Value: "1"}, {System: "urn:x", Value: "1"}}
		}, "identifiers[1]"},
		{"no organization", func(p *domain.NewPatient) { p.OrganizationIDs = nil }, "organizationIds"},
		{"unknown organization", func(p *domain.NewPatient) { p.OrganizationIDs = []int64{99} }, "organizationIds"},
	} {
		in := ok
		tc.edit(&in)
		if _, err := f.svc.CreatePatient(ctx, sys, in); !domain.IsCode(err, domain.CodeInvalid) || fieldOf(err) != tc.field {
			t.Errorf("%s: got %v (field %q), want invalid %s", tc.name, err, fieldOf(err), tc.field)
		}
	}
	if n, err := f.svc.CountUsers(ctx); err != nil || n != 0 {
		t.Errorf("refused patients left %d users (%v)", n, err)
	}
}

// The permission model, decided on actors loaded from stored memberships.
func TestPermissions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	patient, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "p@example.org", FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	otherPatient, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "q@example.org", FamilyName: "Q", GivenNames: []string{"Quin"}, OrganizationIDs: []int64{other.ID}})
	if err != nil {
		t.Fatal(err)
	}
	actor := func(email string, superuser bool, orgID int64, role domain.Role) *domain.Actor {
		u, err := f.svc.CreateUser(ctx, domain.NewUser{Email: email, Type: domain.UserPractitioner, IsSuperuser: superuser})
		if err != nil {
			t.Fatal(err)
		}
		if orgID != 0 {
			if err := f.svc.AddMember(ctx, sys, orgID, u.ID, role); err != nil {
				t.Fatal(err)
			}
		}
		a, err := f.svc.Actor(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	patientActor, err := f.svc.Actor(ctx, patient.UserID)
	if err != nil || patientActor.Patient == nil {
		t.Fatalf("patient actor: %+v %v", patientActor, err)
	}
	for _, tc := range []struct {
		name                                     string
		actor                                    *domain.Actor
		read, write, readOther, administer, data bool
	}{
		{"superuser", actor("su@example.org", true, 0, ""), true, true, true, true, true},
		{"manager", actor("m@example.org", false, org.ID, domain.RoleManager), true, true, false, true, true},
		{"member", actor("me@example.org", false, org.ID, domain.RoleMember), true, true, false, false, true},
		{"viewer", actor("v@example.org", false, org.ID, domain.RoleViewer), true, false, false, false, false},
		{"no role", actor("n@example.org", false, org.ID, domain.RoleNone), true, false, false, false, false},
		{"other organization", actor("o@example.org", false, other.ID, domain.RoleManager), false, false, true, false, false},
		{"no membership", actor("x@example.org", false, 0, ""), false, false, false, false, false},
		{"the patient", patientActor, true, true, false, false, false},
	} {
		got := []bool{tc.actor.CanReadPatient(patient), tc.actor.CanWritePatientData(patient), tc.actor.CanReadPatient(otherPatient),
			tc.actor.CanAdministerOrganization(org.ID), tc.actor.CanManageDataIn(org.ID)}
		want := []bool{tc.read, tc.write, tc.readOther, tc.administer, tc.data}
		for i, name := range []string{"read patient", "write patient data", "read other patient", "administer", "manage data"} {
			if got[i] != want[i] {
				t.Errorf("%s: %s = %v, want %v", tc.name, name, got[i], want[i])
			}
		}
	}
	// A top-level organization needs a superuser; a sub-organization a manager.
	manager := actor("m2@example.org", false, org.ID, domain.RoleManager)
	if _, err := f.svc.CreateOrganization(ctx, manager, domain.NewOrganization{Name: "Top", Type: "prov"}); !domain.IsCode(err, domain.CodeForbidden) {
		t.Errorf("manager creating a top-level organization: %v", err)
	}
	if _, err := f.svc.CreateOrganization(ctx, manager, domain.NewOrganization{Name: "Dept", Type: "dept", PartOf: org.ID}); err != nil {
		t.Errorf("manager creating a sub-organization: %v", err)
	}
	if _, err := f.svc.CreateOrganization(ctx, manager, domain.NewOrganization{Name: "Dept", Type: "dept", PartOf: other.ID}); !domain.IsCode(err, domain.CodeForbidden) {
		t.Errorf("manager creating under another organization: %v", err)
	}
}

func TestRolesCarryDownTheOrganizationTree(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	newOrg := func(in domain.NewOrganization) *domain.Organization {
		o, err := f.svc.CreateOrganization(ctx, sys, in)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	hospital := newOrg(domain.NewOrganization{Name: "Hospital", Type: "prov"})
	dept := newOrg(domain.NewOrganization{Name: "Cardiology", Type: "dept", PartOf: hospital.ID})
	team := newOrg(domain.NewOrganization{Name: "HF team", Type: "team", PartOf: dept.ID})
	other := newOrg(domain.NewOrganization{Name: "Other", Type: "prov"})
	u, err := f.svc.CreateUser(ctx, domain.NewUser{Email: "m@example.org", Type: domain.UserPractitioner})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AddMember(ctx, sys, hospital.ID, u.ID, domain.RoleManager); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AddMember(ctx, sys, team.ID, u.ID, domain.RoleViewer); err != nil {
		t.Fatal(err)
	}
	a, err := f.svc.Actor(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		org  int64
		role domain.Role
		ok   bool
	}{{hospital.ID, domain.RoleManager, true}, {dept.ID, domain.RoleManager, true}, {team.ID, domain.RoleViewer, true}, {other.ID, domain.RoleNone, false}} {
		if r, ok := a.RoleIn(tc.org); r != tc.role || ok != tc.ok {
			t.Errorf("role in %d = %q %v, want %q %v", tc.org, r, ok, tc.role, tc.ok)
		}
	}
	if !a.CanAdministerOrganization(dept.ID) || a.CanManageDataIn(team.ID) {
		t.Error("the department is managed through the hospital; the team, a viewer's")
	}
}

// What the FHIR representation cannot carry is refused on input: FHIR's
// uri has no whitespace (Go's URL parser lets it through), and its code
// has no surrounding whitespace and only single spaces inside.
func TestFHIRPrimitives(t *testing.T) {
	for s, want := range map[string]bool{
		"urn:ietf:rfc:3986": true, "http://hospital.example.org/mrn": true, "https://w3id.org/openmhealth": true,
		"urn:a b": false, "http://example.org/a b": false, "http://example.org/a\u00a0b": false, "mrn": false, "": false,
	} {
		if got := domain.IsAbsoluteURI(s); got != want {
			t.Errorf("IsAbsoluteURI(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{
		"8867-4": true, "omh:heart-rate:2.0": true, "a b": true,
		"": false, " a": false, "a ": false, "a  b": false, "a\tb": false, "a\u00a0b": false, "a\ufeff": false,
	} {
		if got := domain.IsFHIRCode(s); got != want {
			t.Errorf("IsFHIRCode(%q) = %v, want %v", s, got, want)
		}
	}
	err := domain.ValidateIdentifiers("identifier", []domain.Identifier{{System: "urn:a b", Value: "x"}})
	if fieldOf(err) != "identifier[0].system" {
		t.Errorf("an identifier system with a space: %v", err)
	}
}
