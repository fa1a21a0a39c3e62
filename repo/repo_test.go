package repo_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

func TestMigrateCreatesIndexesIdempotently(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	if n, err := db.Migrate(ctx); err != nil || n != 0 {
		t.Fatalf("second Migrate created %d indexes, err %v; want 0, nil", n, err)
	}
	for col, want := range map[string][]string{
		"users":               {"email_unique"},
		"patients":            {"user_unique", "organizations"},
		"patient_identifiers": {"system_value_unique", "patient"},
		"consents":            {"patient_study_scope_unique", "study"},
		"oauth_tokens":        {"request_kind", "expiresAt"},
	} {
		names, err := db.IndexNames(ctx, col)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Errorf("%s: index %s missing from %v", col, w, names)
			}
		}
	}
}

func TestUserEmailIsUnique(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	u := &domain.User{Email: "a@example.org", Type: domain.UserPractitioner, IsActive: true}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if u.ID != 1 {
		t.Errorf("first user id = %d, want 1", u.ID)
	}
	err := db.CreateUser(ctx, &domain.User{Email: "a@example.org", Type: domain.UserPatient})
	if !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatalf("duplicate email: got %v, want CodeDuplicate", err)
	}
	if n, _ := db.CountUsers(ctx); n != 1 {
		t.Errorf("users = %d after refused duplicate, want 1", n)
	}
	got, err := db.UserByEmail(ctx, "a@example.org")
	if err != nil || got.ID != u.ID {
		t.Fatalf("UserByEmail = %v, %v", got, err)
	}
	if _, err := db.UserByID(ctx, 99); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("UserByID(99): got %v, want CodeNotFound", err)
	}
}

// newPatient is a patient and its login, for CreatePatient.
func newPatient(email, family string, ids ...domain.Identifier) (*domain.User, *domain.Patient) {
	return &domain.User{Email: email, Type: domain.UserPatient, IsActive: true},
		&domain.Patient{FamilyName: family, Identifiers: ids, OrganizationIDs: []int64{1}}
}

func TestPatientIdentifiersAreUniqueAcrossPatients(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	create := func(email, family string, ids ...domain.Identifier) error {
		u, p := newPatient(email, family, ids...)
		return db.CreatePatient(ctx, u, p)
	}
	mrn := domain.Identifier{System: "urn:example:mrn", Value: "123"}
	if err := create("one@example.org", "One", mrn); err != nil {
		t.Fatal(err)
	}
	// The second patient's first identifier is free, its second is taken:
	// the free one must not stay claimed, nor its login stay.
	free := domain.Identifier{System: "urn:example:mrn", Value: "456"}
	if err := create("two@example.org", "Two", free, mrn); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatalf("taken identifier: got %v, want CodeDuplicate", err)
	}
	if _, err := db.UserByEmail(ctx, "two@example.org"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the refused patient's login was stored: %v", err)
	}
	if err := create("three@example.org", "Three", free); err != nil {
		t.Fatalf("identifier released by the refused patient: %v", err)
	}
	// A taken email is refused before any identifier is claimed.
	other := domain.Identifier{System: "urn:example:mrn", Value: "789"}
	err := create("one@example.org", "Again", other)
	if !domain.IsCode(err, domain.CodeDuplicate) || err.(*domain.Error).Field != "email" {
		t.Fatalf("taken email: got %v, want CodeDuplicate on email", err)
	}
	if err := create("five@example.org", "Five", other); err != nil {
		t.Fatalf("identifier of the refused patient should be free: %v", err)
	}
	u, _ := db.UserByEmail(ctx, "one@example.org")
	got, err := db.PatientByUserID(ctx, u.ID)
	if err != nil || len(got.Identifiers) != 1 || got.Identifiers[0] != mrn {
		t.Fatalf("PatientByUserID = %+v, %v", got, err)
	}
}

func TestCompoundUniqueKeys(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	for name, create := range map[string]func() error{
		"membership": func() error {
			return db.CreateMembership(ctx, &domain.Membership{OrganizationID: 1, UserID: 2, Role: domain.RoleViewer})
		},
		"scope request": func() error { return db.CreateScopeRequest(ctx, domain.ScopeRequest{StudyID: 1, ScopeCodeID: 2}) },
		"study source": func() error {
			return db.CreateStudyDataSource(ctx, domain.StudyDataSource{StudyID: 1, DataSourceID: 2})
		},
		"scope code": func() error {
			return db.CreateScopeCode(ctx, &domain.ScopeCode{System: "https://w3id.org/openmhealth", Code: "omh:heart-rate:2.0"})
		},
	} {
		if err := create(); err != nil {
			t.Fatalf("%s: first create: %v", name, err)
		}
		if err := create(); !domain.IsCode(err, domain.CodeDuplicate) {
			t.Errorf("%s: second create: got %v, want CodeDuplicate", name, err)
		}
	}
	// A membership without a role is stored as null and read back as RoleNone.
	ms, err := db.MembershipsOfUsers(ctx, []int64{2})
	if err != nil || len(ms) != 1 || ms[0].Role != domain.RoleViewer {
		t.Fatalf("MembershipsOfUsers = %+v, %v", ms, err)
	}
	if err := db.CreateMembership(ctx, &domain.Membership{OrganizationID: 7, UserID: 2}); err != nil {
		t.Fatal(err)
	}
	ms, _ = db.MembershipsOfUsers(ctx, []int64{2})
	if len(ms) != 2 || ms[1].Role != domain.RoleNone {
		t.Errorf("role-less membership = %+v", ms)
	}
}

func TestIDsAreSequentialPerCollection(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	var ids []int64
	for i := 0; i < 3; i++ {
		o := &domain.Organization{Name: "Org", Type: "prov"}
		if err := db.CreateOrganization(ctx, o); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	s := &domain.Study{OrganizationID: 1, Name: "S"}
	if err := db.CreateStudy(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []int64{1, 2, 3}) || s.ID != 1 {
		t.Errorf("organization ids %v, study id %d", ids, s.ID)
	}
}

func TestSweepRemovesOnlyExpired(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Now().UTC()
	for sig, exp := range map[string]time.Time{"old": now.Add(-time.Minute), "fresh": now.Add(time.Hour)} {
		if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: domain.TokenAccess, Signature: sig, RequestID: "r", Active: true, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.RecordLoginFailure(ctx, "account:x", now.Add(-time.Hour), now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	for id, exp := range map[string]time.Time{"ended": now.Add(-time.Second), "live": now.Add(time.Minute)} {
		if err := db.CreateLoginSession(ctx, &domain.LoginSession{ID: id, UserID: 1, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.Sweep(ctx, now)
	if err != nil || n != 3 {
		t.Fatalf("Sweep = %d, %v; want 3", n, err)
	}
	if _, err := db.LoginSession(ctx, "live"); err != nil {
		t.Errorf("live session swept: %v", err)
	}
	if _, err := db.OAuthToken(ctx, domain.TokenAccess, "fresh"); err != nil {
		t.Errorf("fresh token swept: %v", err)
	}
	if _, err := db.OAuthToken(ctx, domain.TokenAccess, "old"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("old token kept: %v", err)
	}
}

// Failures count on while the record lives and start again once it is
// forgotten; a known login is known until it expires.
func TestLoginThrottleCounts(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		at := t0.Add(time.Duration(i) * time.Minute)
		if err := db.RecordLoginFailure(ctx, "account:a", at, at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, last, err := db.LoginFailures(ctx, "account:a", t0.Add(time.Hour)); err != nil || n != 3 || !last.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("failures = %d (last %v), %v; want 3 at %v", n, last, err, t0.Add(2*time.Minute))
	}
	later := t0.Add(2*time.Minute + time.Hour)
	if n, _, _ := db.LoginFailures(ctx, "account:a", later); n != 0 {
		t.Errorf("failures once forgotten = %d, want 0", n)
	}
	if err := db.RecordLoginFailure(ctx, "account:a", later, later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := db.LoginFailures(ctx, "account:a", later); n != 1 {
		t.Errorf("a failure after the count was forgotten: %d, want 1", n)
	}
	if err := db.ForgetLoginFailures(ctx, "account:a"); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := db.LoginFailures(ctx, "account:a", later); n != 0 {
		t.Errorf("failures after ForgetLoginFailures = %d", n)
	}

	if err := db.RememberLogin(ctx, "known:a", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if known, err := db.KnownLogin(ctx, "known:a", t0); err != nil || !known {
		t.Errorf("KnownLogin before expiry = %v, %v", known, err)
	}
	if known, _ := db.KnownLogin(ctx, "known:a", t0.Add(time.Hour)); known {
		t.Error("KnownLogin after expiry = true")
	}
}

// A user's sessions and tokens end together, and a touch never moves a
// session back or revives an ended one.
func TestCredentialsOfUser(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for id, user := range map[string]int64{"s1": 7, "s2": 7, "other": 8} {
		if err := db.CreateLoginSession(ctx, &domain.LoginSession{ID: id, UserID: user, AuthTime: now, LastUsed: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.TouchLoginSession(ctx, "s1", now.Add(-time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if s, err := db.LoginSession(ctx, "s1"); err != nil || !s.LastUsed.Equal(now) || !s.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("a touch moved the session back: %+v, %v", s, err)
	}
	for kind, user := range map[domain.OAuthTokenKind]int64{domain.TokenAccess: 7, domain.TokenRefresh: 7, domain.TokenAuthorizeCode: 8} {
		if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: kind, Signature: "sig", RequestID: "r", UserID: user, Active: true, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DeleteLoginSessionsOfUser(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := db.DeactivateOAuthTokensOfUser(ctx, 7); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if _, err := db.LoginSession(ctx, id); !domain.IsCode(err, domain.CodeNotFound) {
			t.Errorf("session %s of the user: %v", id, err)
		}
	}
	if err := db.TouchLoginSession(ctx, "s1", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LoginSession(ctx, "s1"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a touch revived an ended session: %v", err)
	}
	if _, err := db.LoginSession(ctx, "other"); err != nil {
		t.Errorf("another user's session: %v", err)
	}
	for kind, active := range map[domain.OAuthTokenKind]bool{domain.TokenAccess: false, domain.TokenRefresh: false, domain.TokenAuthorizeCode: true} {
		if tok, err := db.OAuthToken(ctx, kind, "sig"); err != nil || tok.Active != active {
			t.Errorf("%s: %+v, %v; want active %v", kind, tok, err, active)
		}
	}
}

func TestTokenDeactivationByRequest(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	for _, sig := range []string{"a", "b"} {
		if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: domain.TokenRefresh, Signature: sig, RequestID: "grant", Active: true, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: domain.TokenRefresh, Signature: "a", RequestID: "x", ExpiresAt: exp}); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Errorf("same kind and signature twice: %v", err)
	}
	if err := db.DeactivateOAuthTokensOfRequest(ctx, domain.TokenRefresh, "grant"); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []string{"a", "b"} {
		tok, err := db.OAuthToken(ctx, domain.TokenRefresh, sig)
		if err != nil || tok.Active {
			t.Errorf("token %s after deactivation: %+v, %v", sig, tok, err)
		}
	}
	if err := db.DeactivateOAuthToken(ctx, domain.TokenRefresh, "missing"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("deactivating a missing token: %v", err)
	}
}

// The documents are what docs/document-model.md promises analysts.
func TestPatientDocumentShape(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	u := &domain.User{Email: "jane@example.org", Type: domain.UserPatient}
	p := &domain.Patient{FamilyName: "Doe", GivenNames: []string{"Jane"}, BirthDate: "1990-02-03",
		Telecom: []domain.ContactPoint{{System: "email", Value: "jane@example.org"}}, OrganizationIDs: []int64{2}}
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Fatal(err)
	}
	raw, err := repo.RawDocument(ctx, db, "patients", p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := bson.M{"_id": p.ID, "userId": u.ID, "birthDate": "1990-02-03"}
	for k, v := range want {
		if raw[k] != v {
			t.Errorf("patients.%s = %#v, want %#v", k, raw[k], v)
		}
	}
	if name, ok := raw["name"].(bson.D); !ok || len(name) == 0 || name[0] != (bson.E{Key: "family", Value: "Doe"}) {
		t.Errorf("patients.name = %#v", raw["name"])
	}
}

// The batch reads behind a page of practitioners: memberships of several
// users by user then organization, organizations by id without the
// missing ones.
func TestBatchReadsOfMembershipsAndOrganizations(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	var orgs []int64
	for _, name := range []string{"A", "B"} {
		o := &domain.Organization{Name: name, Type: "prov"}
		if err := db.CreateOrganization(ctx, o); err != nil {
			t.Fatal(err)
		}
		orgs = append(orgs, o.ID)
	}
	for _, m := range []domain.Membership{{OrganizationID: orgs[1], UserID: 3}, {OrganizationID: orgs[0], UserID: 3}, {OrganizationID: orgs[0], UserID: 2}, {OrganizationID: orgs[0], UserID: 9}} {
		if err := db.CreateMembership(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := db.MembershipsOfUsers(ctx, []int64{3, 2})
	var got [][2]int64
	for _, m := range ms {
		got = append(got, [2]int64{m.UserID, m.OrganizationID})
	}
	if want := [][2]int64{{2, orgs[0]}, {3, orgs[0]}, {3, orgs[1]}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("MembershipsOfUsers = %v, %v; want %v", got, err, want)
	}
	found, err := db.OrganizationsByIDs(ctx, []int64{orgs[1], 999, orgs[0]})
	if err != nil || len(found) != 2 || found[0].ID != orgs[0] || found[1].Name != "B" {
		t.Errorf("OrganizationsByIDs = %+v, %v", found, err)
	}
}

// TestConcurrentCreatesOfOneIdentifier: creates of patients with the same
// identifier sent at once, through two instances: exactly one is stored;
// each other one is refused (CodeDuplicate, or CodeConflict while the
// winner's create runs) and leaves nothing: no login, no claim, no intent.
func TestConcurrentCreatesOfOneIdentifier(t *testing.T) {
	db := repotest.NewDB(t)
	dbs := []*repo.DB{db, repotest.OtherInstance(t, db)}
	ctx := context.Background()
	mrn := domain.Identifier{System: "urn:example:mrn", Value: "race"}
	repotest.OneWins(t, 6, func(i int) error {
		u, p := newPatient(fmt.Sprintf("p%d@example.org", i), "P", mrn)
		return dbs[i%2].CreatePatient(ctx, u, p)
	}, domain.CodeDuplicate, domain.CodeConflict)
	for col, want := range map[string]int64{"users": 1, "patients": 1, "patient_identifiers": 1, "write_intents": 0} {
		if got, err := repotest.Collection(t, db, col).CountDocuments(ctx, bson.M{}); err != nil || got != want {
			t.Errorf("%s: %d documents (%v), want %d", col, got, err, want)
		}
	}
	var claim struct {
		PatientID int64 `bson:"patientId"`
	}
	if err := repotest.Collection(t, db, "patient_identifiers").FindOne(ctx, bson.M{}).Decode(&claim); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PatientByID(ctx, claim.PatientID); err != nil {
		t.Errorf("the claim's owner %d is not the stored patient: %v", claim.PatientID, err)
	}
}

// TestMarkRedeemedInvitations: a patient without a password whose app
// holds a live refresh token (an invitation redeemed before redemptions
// were recorded) is marked as having a login, once; a patient without
// one, or whose token ended, is not, nor is a practitioner, nor a patient
// whose redemption is in progress (its code still active or pending: a
// crash cut it short, and its retry must still find the code standing).
func TestMarkRedeemedInvitations(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Now().UTC()
	user := func(email string, typ domain.UserType, password string) *domain.User {
		u := &domain.User{Email: email, Type: typ, PasswordHash: password, IsActive: true}
		if err := db.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	refresh := func(u *domain.User, active bool, expires time.Time) {
		if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: domain.TokenRefresh, Signature: fmt.Sprint("sig-", u.ID, active, expires.Unix()),
			RequestID: fmt.Sprint("req-", u.ID), ClientID: "app", UserID: u.ID, Active: active, IssuedAt: now, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	code := func(u *domain.User, active, pending bool) {
		if err := db.CreateOAuthToken(ctx, &domain.OAuthToken{Kind: domain.TokenAuthorizeCode, Signature: fmt.Sprint("code-", u.ID),
			RequestID: fmt.Sprint("req-", u.ID), ClientID: "app", UserID: u.ID, Active: active, Pending: pending, IssuedAt: now,
			ExpiresAt: now.Add(time.Hour), Invitation: true}); err != nil {
			t.Fatal(err)
		}
	}
	app := user("app@example.org", domain.UserPatient, "")
	code(app, false, false) // redeemed, answered
	refresh(app, true, now.Add(time.Hour))
	inFlight := user("in-flight@example.org", domain.UserPatient, "")
	code(inFlight, false, true) // redeemed, not answered yet
	refresh(inFlight, true, now.Add(time.Hour))
	cutShort := user("cut-short@example.org", domain.UserPatient, "")
	code(cutShort, true, false) // tokens stored, the code not retired yet
	refresh(cutShort, true, now.Add(time.Hour))
	refresh(app, false, now.Add(time.Hour)) // a rotated one beside it
	never := user("never@example.org", domain.UserPatient, "")
	ended := user("ended@example.org", domain.UserPatient, "")
	refresh(ended, true, now.Add(-time.Minute))
	revoked := user("revoked@example.org", domain.UserPatient, "")
	refresh(revoked, false, now.Add(time.Hour))
	doc := user("doc@example.org", domain.UserPractitioner, "")
	refresh(doc, true, now.Add(time.Hour))
	if n, err := db.MarkRedeemedInvitations(ctx, now); err != nil || n != 1 {
		t.Fatalf("marked %d (%v), want 1", n, err)
	}
	for _, c := range []struct {
		u    *domain.User
		want bool
	}{{app, true}, {inFlight, false}, {cutShort, false}, {never, false}, {ended, false}, {revoked, false}, {doc, false}} {
		u, err := db.UserByID(ctx, c.u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if u.HasLogin() != c.want {
			t.Errorf("%s: has a login %v, want %v", u.Email, u.HasLogin(), c.want)
		}
		if u.LastUpdated != c.u.LastUpdated {
			t.Errorf("%s: a new version %v, was %v", u.Email, u.LastUpdated, c.u.LastUpdated)
		}
	}
	if n, err := db.MarkRedeemedInvitations(ctx, now.Add(time.Second)); err != nil || n != 0 {
		t.Errorf("marked %d again (%v), want 0", n, err)
	}
}
