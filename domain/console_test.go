package domain_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/repo"
	"exchange/repo/repotest"
)

// world is a small organization with a study, two enrolled patients and
// practitioners in three roles, for the use cases the console reads.
type world struct {
	f                         *fixture
	org, other                *domain.Organization
	study                     *domain.Study
	hr, steps                 *domain.ScopeCode
	device                    *domain.DataSourceView
	patient, second           *domain.Patient
	manager, viewer, outsider *domain.Actor
	patientActor              *domain.Actor
}

func newWorld(t *testing.T) *world {
	t.Helper()
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	w := &world{f: f}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	w.org, err = f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	must(err)
	w.other, err = f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	must(err)
	w.hr, err = f.svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate")
	must(err)
	w.steps, err = f.svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:step-count:3.0", "Step count")
	must(err)
	w.device, err = f.svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Tracker", Type: domain.DataSourcePersonalDevice})
	must(err)
	w.study, err = f.svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: w.org.ID, Name: "Study"})
	must(err)
	for _, c := range []*domain.ScopeCode{w.hr, w.steps} {
		_, err = f.svc.AddScopeRequest(ctx, sys, w.study.ID, domain.ScopeRef{ID: c.ID})
		must(err)
	}
	_, err = f.svc.AddStudyDataSource(ctx, sys, w.study.ID, w.device.ID)
	must(err)
	for i, email := range []string{"p@example.org", "q@example.org"} {
		p, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: email, FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{w.org.ID}})
		must(err)
		must(f.svc.EnrollPatients(ctx, sys, w.study.ID, []int64{p.ID}))
		if i == 0 {
			w.patient = p
		} else {
			w.second = p
		}
	}
	actor := func(email string, orgID int64, role domain.Role) *domain.Actor {
		u, err := f.svc.CreateUser(ctx, domain.NewUser{Email: email, Type: domain.UserPractitioner})
		must(err)
		must(f.svc.AddMember(ctx, sys, orgID, u.ID, role))
		a, err := f.svc.Actor(ctx, u.ID)
		must(err)
		return a
	}
	w.manager = actor("m@example.org", w.org.ID, domain.RoleManager)
	w.viewer = actor("v@example.org", w.org.ID, domain.RoleViewer)
	w.outsider = actor("o@example.org", w.other.ID, domain.RoleManager)
	w.patientActor, err = f.svc.Actor(ctx, w.patient.UserID)
	must(err)
	return w
}

func answer(t *testing.T, w *world, actor *domain.Actor, p *domain.Patient, code *domain.ScopeCode, consented bool) {
	t.Helper()
	err := w.f.svc.AnswerConsents(context.Background(), actor, p.ID, []domain.StudyScopeConsents{{StudyID: w.study.ID,
		Scopes: []domain.ScopeConsent{{System: code.System, Code: code.Code, Consented: &consented}}}})
	if err != nil {
		t.Fatal(err)
	}
}

// upload stores an observation of the code for the patient through the use
// case (the patient must have consented to share the code).
func upload(t *testing.T, w *world, p *domain.Patient, code, body string, n int) {
	t.Helper()
	if err := tryUpload(w, p, code, body, n); err != nil {
		t.Fatalf("upload %s: %v", code, err)
	}
}

// tryUpload is upload that returns the observation's error.
func tryUpload(w *world, p *domain.Patient, code, body string, n int) error {
	name := map[string]string{"omh:heart-rate:2.0": "heart-rate", "omh:step-count:3.0": "step-count"}[code]
	version := code[len(code)-3:]
	dp := fmt.Sprintf(`{"header": {"id": "%s-%d", "creation_date_time": "2025-03-01T00:00:00Z", "schema_id": {"namespace": "omh", "name": "%s", "version": "%s"}}, "body": %s}`,
		name, n, name, version, body)
	res := w.f.svc.CreateObservations(context.Background(), domain.SystemActor(), []domain.NewObservation{{
		Subject: fmt.Sprintf("Patient/%d", p.ID), Device: fmt.Sprintf("Device/%d", w.device.ID), Status: "final",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: code}},
		Identifiers: []domain.Identifier{{System: "urn:test", Value: fmt.Sprintf("%s-%d-%d", code, p.ID, n)}},
		ContentType: "application/json", Data: []byte(dp)}})
	return res[0].Err
}

// TestObservationsByCode: a patient's data grouped by code, in the patient
// view (every code) and in a study view (only what was consented to the
// study, as the FHIR study search), within what the actor may read.
func TestObservationsByCode(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	answer(t, w, w.patientActor, w.patient, w.hr, true)
	answer(t, w, w.patientActor, w.patient, w.steps, true)
	for i, day := range []string{"01", "02", "03"} {
		upload(t, w, w.patient, "omh:heart-rate:2.0", `{"heart_rate": {"value": 7`+fmt.Sprint(i)+`, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2025-03-`+day+`T08:00:00Z"}}`, i)
	}
	upload(t, w, w.patient, "omh:step-count:3.0", `{"step_count": {"value": 1200, "unit": "steps"}, "effective_time_frame": {"time_interval": {"start_date_time": "2025-03-02T06:00:00Z", "end_date_time": "2025-03-02T07:00:00Z"}}}`, 9)
	// Withdrawing step count from the study keeps the data, out of the study view.
	no := false
	if err := w.f.svc.UpdateConsents(ctx, w.patientActor, w.patient.ID, []domain.StudyScopeConsents{{StudyID: w.study.ID,
		Scopes: []domain.ScopeConsent{{System: w.steps.System, Code: w.steps.Code, Consented: &no}}}}); err != nil {
		t.Fatal(err)
	}
	catalog, err := fhirsearch.NewCatalog(nil) // the configured types, Observation among them
	if err != nil {
		t.Fatal(err)
	}
	tr := fhirsearch.NewTranslator(catalog, []byte("key"), "https://exchange.example.org/fhir-source", nil)
	search := func(actor *domain.Actor, params string) ([]domain.CodeObservations, error) {
		q, err := url.ParseQuery(params)
		if err != nil {
			t.Fatal(err)
		}
		query, err := tr.Parse("Observation", q, true)
		if err != nil {
			t.Fatal(err)
		}
		return w.f.svc.ObservationsByCode(ctx, actor, query)
	}
	codes := func(groups []domain.CodeObservations) (out []string) {
		for _, g := range groups {
			out = append(out, fmt.Sprintf("%s:%d", g.Code, len(g.Observations)))
		}
		return out
	}
	pid := fmt.Sprint(w.patient.ID)
	for _, tc := range []struct {
		name   string
		actor  *domain.Actor
		params string
		want   []string
	}{
		{"patient view", w.manager, "patient=" + pid, []string{"omh:heart-rate:2.0:3", "omh:step-count:3.0:1"}},
		{"the patient", w.patientActor, "patient=" + pid, []string{"omh:heart-rate:2.0:3", "omh:step-count:3.0:1"}},
		{"a viewer", w.viewer, "patient=" + pid, []string{"omh:heart-rate:2.0:3", "omh:step-count:3.0:1"}},
		{"study view", w.manager, "patient=" + pid + "&patient._has:Group:member:_id=" + fmt.Sprint(w.study.ID), []string{"omh:heart-rate:2.0:3"}},
		{"date range", w.manager, "patient=" + pid + "&date=ge2025-03-02&date=lt2025-03-03", []string{"omh:heart-rate:2.0:1", "omh:step-count:3.0:1"}},
		{"page size per code", w.manager, "patient=" + pid + "&_count=2&_sort=-date", []string{"omh:heart-rate:2.0:2", "omh:step-count:3.0:1"}},
		{"another patient without data", w.manager, "patient=" + fmt.Sprint(w.second.ID), nil},
		// A patient the actor may not read has no data for them, exactly
		// as one that does not exist: no refusal tells which ids exist.
		{"another organization", w.outsider, "patient=" + pid, nil},
		{"another patient's data", mustActor(t, w, w.second), "patient=" + pid, nil},
		{"a patient that does not exist", w.outsider, "patient=999999", nil},
	} {
		got, err := search(tc.actor, tc.params)
		if err != nil || !slices.Equal(codes(got), tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, codes(got), err, tc.want)
		}
		if tc.name == "page size per code" && (!got[0].More || got[1].More || got[0].Observations[0].Effective.DateTime != "2025-03-03T08:00:00Z") {
			t.Errorf("%s: the newest first and More on the cut list: %+v", tc.name, got)
		}
	}
	for _, tc := range []struct {
		name   string
		actor  *domain.Actor
		params string
		code   domain.Code
	}{
		{"no patient", w.manager, "date=ge2025-01-01", domain.CodeInvalid},
		{"two patients", w.manager, "patient=" + pid + "," + fmt.Sprint(w.second.ID), domain.CodeInvalid},
	} {
		if _, err := search(tc.actor, tc.params); !domain.IsCode(err, tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
}

func mustActor(t *testing.T, w *world, p *domain.Patient) *domain.Actor {
	t.Helper()
	a, err := w.f.svc.Actor(context.Background(), p.UserID)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStudyEnrollmentAndTodos: each enrolled patient's state per requested
// scope, and the to-dos that follow from them (pending answers, data
// sources without data), for the practitioner and the patient.
func TestStudyEnrollmentAndTodos(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	answer(t, w, w.patientActor, w.patient, w.hr, true)
	answer(t, w, w.patientActor, w.patient, w.steps, false)
	got, err := w.f.svc.StudyEnrollment(ctx, w.viewer, w.study.ID, domain.Page{Number: 1, Size: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Scopes) != 2 || got.Scopes[0].ID != w.hr.ID || got.Patients.Total != 2 {
		t.Fatalf("enrollment: %+v", got)
	}
	states := map[int64][]domain.ConsentState{}
	for _, p := range got.Patients.Items {
		states[p.Patient.ID] = p.States
	}
	if want := []domain.ConsentState{domain.ConsentGiven, domain.ConsentRefused}; !slices.Equal(states[w.patient.ID], want) {
		t.Errorf("answered patient: %v, want %v", states[w.patient.ID], want)
	}
	if want := []domain.ConsentState{domain.ConsentPending, domain.ConsentPending}; !slices.Equal(states[w.second.ID], want) {
		t.Errorf("pending patient: %v, want %v", states[w.second.ID], want)
	}
	if _, err := w.f.svc.StudyEnrollment(ctx, w.outsider, w.study.ID, domain.Page{Number: 1, Size: 10}); !domain.IsCode(err, domain.CodeForbidden) {
		t.Errorf("outsider: %v", err)
	}

	todos, err := w.f.svc.Todos(ctx, w.manager)
	if err != nil {
		t.Fatal(err)
	}
	if len(todos.PendingConsents) != 1 || todos.PendingConsents[0].Patient.ID != w.second.ID || len(todos.PendingConsents[0].Pending) != 2 {
		t.Errorf("pending consents: %+v", todos.PendingConsents)
	}
	if len(todos.IdleDataSources) != 1 || todos.IdleDataSources[0].DataSource.ID != w.device.ID {
		t.Errorf("idle data sources: %+v", todos.IdleDataSources)
	}
	upload(t, w, w.patient, "omh:heart-rate:2.0", `{"heart_rate": {"value": 70, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2025-03-01T08:00:00Z"}}`, 1)
	if todos, _ = w.f.svc.Todos(ctx, w.manager); len(todos.IdleDataSources) != 0 {
		t.Errorf("a data source with data is idle: %+v", todos.IdleDataSources)
	}
	if todos, _ = w.f.svc.Todos(ctx, w.outsider); len(todos.PendingConsents)+len(todos.IdleDataSources) != 0 {
		t.Errorf("another organization's to-dos: %+v", todos)
	}
	second := mustActor(t, w, w.second)
	if todos, _ = w.f.svc.Todos(ctx, second); len(todos.PendingConsents) != 1 || todos.PendingConsents[0].Study.ID != w.study.ID {
		t.Errorf("the patient's own to-dos: %+v", todos)
	}
	if todos, _ = w.f.svc.Todos(ctx, w.patientActor); len(todos.PendingConsents) != 0 {
		t.Errorf("a patient who answered everything: %+v", todos)
	}
}

// TestAddMemberByEmail: only an administrator may add, by exact email; the
// lookup comes after the permission check.
func TestAddMemberByEmail(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.f.svc.CreateUser(ctx, domain.NewUser{Email: "new@example.org", Type: domain.UserPractitioner}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.f.svc.AddMemberByEmail(ctx, w.viewer, w.org.ID, "nobody@example.org", domain.RoleMember); !domain.IsCode(err, domain.CodeForbidden) {
		t.Errorf("a viewer probing an email: %v, want forbidden", err)
	}
	for _, email := range []string{"new@example", "nobody@example.org", "p@example.org"} {
		if _, err := w.f.svc.AddMemberByEmail(ctx, w.manager, w.org.ID, email, domain.RoleMember); !domain.IsCode(err, domain.CodeInvalid) || fieldOf(err) != "email" {
			t.Errorf("%s: %v, want invalid email", email, err)
		}
	}
	u, err := w.f.svc.AddMemberByEmail(ctx, w.manager, w.org.ID, " NEW@example.org", domain.RoleViewer)
	if err != nil || u.Email != "new@example.org" {
		t.Fatalf("add: %v, %v", u, err)
	}
	if m, err := w.f.svc.Membership(ctx, w.org.ID, u.ID); err != nil || m.Role != domain.RoleViewer {
		t.Errorf("membership: %+v, %v", m, err)
	}
	if _, err := w.f.svc.AddMemberByEmail(ctx, w.manager, w.org.ID, "new@example.org", domain.RoleViewer); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Errorf("again: %v", err)
	}
}

// TestAcceptInvitation: a short password is refused before anything
// changes; only patients get one this way; the code is used once.
func TestAcceptInvitation(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := domain.CheckNewPassword("short"); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("short password: %v", err)
	}
	if err := w.f.svc.AcceptInvitation(ctx, w.invitation(t, "m", w.manager.User.ID), "long enough password"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a practitioner: %v", err)
	}
	code := w.invitation(t, "p", w.patient.UserID)
	if err := w.f.svc.AcceptInvitation(ctx, code, "short"); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("a short password: %v", err)
	}
	if err := w.f.svc.AcceptInvitation(ctx, code, "long enough password"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.f.svc.Authenticate(ctx, "p@example.org", "long enough password", "10.0.0.1"); err != nil {
		t.Errorf("sign in with the new password: %v", err)
	}
	for _, password := range []string{"another long password", "long enough password"} {
		if err := w.f.svc.AcceptInvitation(ctx, code, password); !domain.IsCode(err, domain.CodeNotFound) {
			t.Errorf("the used code again, with %q: %v", password, err)
		}
	}
	// The patient has a login now: another code of theirs, issued before
	// or after, never writes over their password.
	if err := w.f.svc.AcceptInvitation(ctx, w.invitation(t, "p2", w.patient.UserID), "a takeover password"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an invitation of a patient with a login: %v", err)
	}
	if _, err := w.f.svc.Authenticate(ctx, "p@example.org", "long enough password", "10.0.0.1"); err != nil {
		t.Errorf("the password after a takeover attempt: %v", err)
	}
}

// TestAcceptInvitationOnce: redemptions of one code with different
// passwords sent at once: exactly one succeeds, and its password is the
// one that works.
func TestAcceptInvitationOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for round := range 3 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			// The last round's password is a login: only a replacement
			// makes way for a new invitation.
			if _, err := w.f.svc.ReplaceLogin(ctx, domain.SystemActor(), w.patient); err != nil {
				t.Fatal(err)
			}
			signature := fmt.Sprintf("round-%d", round)
			code := w.invitation(t, signature, w.patient.UserID)
			passwords := []string{signature + " first password", signature + " second password", signature + " third password"}
			won := repotest.OneWins(t, len(passwords), func(i int) error {
				return w.f.svc.AcceptInvitation(ctx, &domain.InvitationCode{Signature: code.Signature, UserID: code.UserID}, passwords[i])
			}, domain.CodeNotFound)
			for i, password := range passwords {
				_, err := w.f.svc.Authenticate(ctx, "p@example.org", password, fmt.Sprintf("10.0.%d.%d", round, i))
				if (err == nil) != (i == won) {
					t.Errorf("round %d: sign in with password %d (%d won): %v", round, i, won, err)
				}
			}
		})
	}
}

// invitation stores an active invitation code of the user, as package
// oauth issues it, and returns it authenticated.
func (w *world) invitation(t *testing.T, signature string, userID int64) *domain.InvitationCode {
	t.Helper()
	err := w.f.db.CreateOAuthToken(context.Background(), &domain.OAuthToken{Kind: domain.TokenAuthorizeCode, Signature: signature,
		RequestID: "request-" + signature, ClientID: "exchange-console", UserID: userID, Active: true, Invitation: true,
		IssuedAt: w.f.now, ExpiresAt: w.f.now.Add(time.Hour), Request: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	return &domain.InvitationCode{Signature: signature, UserID: userID}
}

// TestAcceptInvitationConverges: a redemption cut short by a crash after
// any of its writes (the record of the redemption, the code claimed, the
// code marked used, the password set) is completed by its retry, the same code with the same
// password, or by the repair; the code is never used twice, and another
// password sent with it changes nothing. (The crash suite's
// console-invitation path kills the real service at each write.)
func TestAcceptInvitationConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("a convergence after every cut: not in the short tier")
	}
	ctx := context.Background()
	const chosen, other = "the password chosen", "another password"
	for _, cut := range []string{"recorded", "code claimed", "code used", "password set"} {
		for _, by := range []string{"retry", "repair"} {
			t.Run(cut+", "+by, func(t *testing.T) {
				w := newWorld(t)
				code := w.invitation(t, "p", w.patient.UserID)
				w.cutRedemption(t, code, chosen, cut)
				// The state a crash leaves: the code refuses another password.
				code.Used = cut != "recorded" && cut != "code claimed"
				if cut != "recorded" {
					if err := w.f.svc.AcceptInvitation(ctx, code, other); !domain.IsCode(err, domain.CodeNotFound) {
						t.Errorf("another password with the code in redemption: %v", err)
					}
				}
				switch by {
				case "retry":
					if err := w.f.svc.AcceptInvitation(ctx, code, chosen); err != nil {
						t.Fatalf("the retry: %v", err)
					}
				case "repair":
					if rep, err := w.f.db.Repair(ctx, repo.RepairOptions{Exclusive: true}); err != nil || rep.Repaired["invitation.redeem"] != 1 {
						t.Fatalf("repair: %+v, %v", rep, err)
					}
				}
				if _, err := w.f.svc.Authenticate(ctx, "p@example.org", chosen, "10.0.0.1"); err != nil {
					t.Errorf("sign in with the password chosen: %v", err)
				}
				code.Used = true
				for _, password := range []string{other, chosen} {
					if err := w.f.svc.AcceptInvitation(ctx, code, password); !domain.IsCode(err, domain.CodeNotFound) {
						t.Errorf("the code once done, with %q: %v", password, err)
					}
				}
				if _, err := w.f.svc.Authenticate(ctx, "p@example.org", other, "10.0.0.2"); !domain.IsCode(err, domain.CodeLogin) {
					t.Errorf("sign in with the other password: %v", err)
				}
				if n, err := repotest.Collection(t, w.f.db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
					t.Errorf("%d write intents left (%v)", n, err)
				}
			})
		}
	}
}

// cutRedemption leaves what a redemption of the code choosing password
// leaves when its process dies after the write cut names: the first
// writes of repo's RedeemInvitation, made as it makes them, by a process
// whose lease is gone.
func (w *world) cutRedemption(t *testing.T, code *domain.InvitationCode, password, cut string) {
	t.Helper()
	ctx := context.Background()
	hash, err := domain.HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	intent, at := bson.NewObjectID(), w.f.now.Add(time.Minute)
	tokenID := "authorize_code:" + code.Signature
	steps := []func() error{
		func() error {
			_, err := repotest.Collection(t, w.f.db, "write_intents").InsertOne(ctx, bson.M{"_id": intent, "kind": "invitation.redeem",
				"instance": "dead", "startedAt": at, "keys": bson.A{}, "userId": code.UserID, "tokenId": tokenID, "passwordHash": hash, "changedAt": at})
			return err
		},
		func() error {
			_, err := repotest.Collection(t, w.f.db, "invitation_redemptions").InsertOne(ctx, bson.M{"_id": tokenID, "intentId": intent,
				"expiresAt": w.f.now.Add(time.Hour)})
			return err
		},
		func() error {
			_, err := repotest.Collection(t, w.f.db, "oauth_tokens").UpdateOne(ctx, bson.M{"_id": tokenID}, bson.M{"$set": bson.M{"active": false}})
			return err
		},
		func() error {
			_, err := repotest.Collection(t, w.f.db, "users").UpdateOne(ctx, bson.M{"_id": code.UserID},
				bson.M{"$set": bson.M{"passwordHash": hash, "credentialsChangedAt": at}})
			return err
		},
	}
	n := map[string]int{"recorded": 1, "code claimed": 2, "code used": 3, "password set": 4}[cut]
	for _, step := range steps[:n] {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}
