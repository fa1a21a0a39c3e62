package main

import (
	"context"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"exchange/domain"
	"exchange/oauth"
)

// The demo data: an organization tree, practitioners in every role, patients
// with identifiers, studies requesting the common Open mHealth types,
// consents in every state, data sources, FHIR sources and OAuth clients.
// Every demo login shares one password.
const (
	demoPassword       = "exchange-demo-password"
	demoSuperuserEmail = "admin@example.org"
	demoClientID       = "exchange-local"
	mrnSystem          = "http://hospital.example.org/mrn"
)

type seedOrganization struct {
	name, parent string
	kind         domain.OrganizationType
}

var seedOrganizations = []seedOrganization{
	{"Cascadia Health Research Network", "", "prov"},
	{"Northwest University Hospital", "Cascadia Health Research Network", "prov"},
	{"Cardiology Department", "Northwest University Hospital", "dept"},
	{"Heart Failure Remote Monitoring Team", "Cardiology Department", "team"},
	{"Sleep Medicine Clinic", "Northwest University Hospital", "dept"},
	{"Coastal Community Clinic", "Cascadia Health Research Network", "prov"},
	{"Independent Wellness Lab", "", "other"},
}

type seedPractitioner struct {
	email, first, last string
	organization       string // empty: none
	role               domain.Role
	superuser          bool
	description        string
}

var seedPractitioners = []seedPractitioner{
	{demoSuperuserEmail, "Ada", "Admin", "", "", true, "superuser"},
	{"manager@example.org", "Maria", "Manager", "Cardiology Department", domain.RoleManager, false, "manager, Cardiology"},
	{"member@example.org", "Martin", "Member", "Cardiology Department", domain.RoleMember, false, "member, Cardiology"},
	{"viewer@example.org", "Vera", "Viewer", "Cardiology Department", domain.RoleViewer, false, "viewer, Cardiology"},
	{"norole@example.org", "Nils", "Norole", "Cardiology Department", domain.RoleNone, false, "member without a role, Cardiology"},
	{"sleep@example.org", "Sofia", "Sleep", "Sleep Medicine Clinic", domain.RoleManager, false, "manager, Sleep Medicine"},
	{"outsider@example.org", "Otto", "Outsider", "Independent Wellness Lab", domain.RoleManager, false, "manager, Independent Wellness Lab"},
}

// The scope codes the demo studies request.
var seedScopes = []struct{ system, code, text string }{
	{domain.SystemOpenMHealth, "omh:blood-glucose:4.0", "Blood glucose"},
	{domain.SystemOpenMHealth, "omh:blood-pressure:4.0", "Blood pressure"},
	{domain.SystemOpenMHealth, "omh:body-temperature:4.0", "Body temperature"},
	{domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate"},
	{domain.SystemOpenMHealth, "omh:oxygen-saturation:2.0", "Oxygen saturation"},
	{domain.SystemOpenMHealth, "omh:respiratory-rate:2.0", "Respiratory rate"},
	{domain.SystemOpenMHealth, "omh:body-weight:3.0", "Body weight"},
	{domain.SystemOpenMHealth, "omh:step-count:3.0", "Step count"},
	{domain.SystemOpenMHealth, "omh:physical-activity:1.2", "Physical activity"},
	{domain.SystemOpenMHealth, "omh:sleep-duration:2.0", "Sleep duration"},
	{domain.SystemIEEE1752, "ieee:sleep-stage-summary:1.0", "Sleep stage summary"},
}

var seedDataSources = []struct {
	name   string
	kind   domain.DataSourceType
	scopes []string
}{
	{"Home Blood Pressure Cuff", domain.DataSourceMedicalDevice, []string{"omh:blood-pressure:4.0", "omh:heart-rate:2.0"}},
	{"Connected Glucometer", domain.DataSourceMedicalDevice, []string{"omh:blood-glucose:4.0"}},
	{"Pulse Oximeter", domain.DataSourceMedicalDevice, []string{"omh:oxygen-saturation:2.0", "omh:heart-rate:2.0"}},
	{"Smart Scale", domain.DataSourcePersonalDevice, []string{"omh:body-weight:3.0"}},
	{"Fitness Tracker", domain.DataSourcePersonalDevice, []string{"omh:heart-rate:2.0", "omh:step-count:3.0", "omh:physical-activity:1.2", "omh:sleep-duration:2.0", "ieee:sleep-stage-summary:1.0", "omh:respiratory-rate:2.0"}},
	{"Exchange Companion App", domain.DataSourcePatientApp, []string{"omh:body-temperature:4.0", "omh:blood-glucose:4.0", "omh:body-weight:3.0"}},
}

type seedStudy struct {
	name, organization, description string
	scopes, dataSources             []string
}

var seedStudies = []seedStudy{
	{"Heart Failure Home Monitoring", "Cardiology Department", "Daily vital signs of heart failure patients after discharge.",
		[]string{"omh:blood-pressure:4.0", "omh:heart-rate:2.0", "omh:body-weight:3.0", "omh:oxygen-saturation:2.0", "omh:body-temperature:4.0", "omh:respiratory-rate:2.0", "omh:step-count:3.0"},
		[]string{"Home Blood Pressure Cuff", "Smart Scale", "Pulse Oximeter", "Fitness Tracker"}},
	{"Diabetes and Activity", "Cardiology Department", "How daily activity relates to glucose control.",
		[]string{"omh:blood-glucose:4.0", "omh:step-count:3.0", "omh:physical-activity:1.2"},
		[]string{"Connected Glucometer", "Fitness Tracker", "Exchange Companion App"}},
	{"Sleep Quality Study", "Sleep Medicine Clinic", "Sleep duration and stages measured at home.",
		[]string{"omh:sleep-duration:2.0", "ieee:sleep-stage-summary:1.0", "omh:heart-rate:2.0"},
		[]string{"Fitness Tracker"}},
	{"Wellness Baseline", "Independent Wellness Lab", "A baseline of everyday activity and weight.",
		[]string{"omh:heart-rate:2.0", "omh:step-count:3.0", "omh:body-weight:3.0"},
		[]string{"Fitness Tracker", "Smart Scale"}},
}

type seedPatient struct {
	email, family, given, birthDate, phone string
	identifier                             domain.Identifier
	organizations                          []string
	// consents per study: scope code -> answer; scopes not listed stay pending.
	consents map[string]map[string]bool
}

var seedPatients = []seedPatient{
	{"alice@example.org", "Nguyen", "Alice", "1984-03-12", "+1-206-555-0101", domain.Identifier{System: mrnSystem, Value: "MRN-1001"},
		[]string{"Cardiology Department"}, map[string]map[string]bool{
			"Heart Failure Home Monitoring": {"omh:blood-pressure:4.0": true, "omh:heart-rate:2.0": true, "omh:body-weight:3.0": true, "omh:oxygen-saturation:2.0": true, "omh:body-temperature:4.0": false},
			"Diabetes and Activity":         {"omh:blood-glucose:4.0": true, "omh:step-count:3.0": false},
		}},
	{"bob@example.org", "Okafor", "Robert", "1972-11-05", "+1-206-555-0102", domain.Identifier{System: mrnSystem, Value: "MRN-1002"},
		[]string{"Cardiology Department", "Sleep Medicine Clinic"}, map[string]map[string]bool{
			"Heart Failure Home Monitoring": {"omh:blood-pressure:4.0": true, "omh:heart-rate:2.0": true, "omh:body-weight:3.0": true, "omh:oxygen-saturation:2.0": true, "omh:body-temperature:4.0": true, "omh:respiratory-rate:2.0": true, "omh:step-count:3.0": true},
			"Sleep Quality Study":           {"omh:sleep-duration:2.0": true, "ieee:sleep-stage-summary:1.0": true, "omh:heart-rate:2.0": false},
		}},
	{"carol@example.org", "Jensen", "Carol", "1990-06-30", "", domain.Identifier{System: mrnSystem, Value: "MRN-1003"},
		[]string{"Sleep Medicine Clinic"}, map[string]map[string]bool{"Sleep Quality Study": {}}},
	{"dan@example.org", "Flores", "Daniel", "1965-01-20", "+1-503-555-0104", domain.Identifier{System: "http://wellness.example.org/member", Value: "WL-2001"},
		[]string{"Independent Wellness Lab"}, map[string]map[string]bool{
			"Wellness Baseline": {"omh:heart-rate:2.0": true, "omh:step-count:3.0": true, "omh:body-weight:3.0": true},
		}},
}

var seedFHIRSources = []struct{ patient, label, dataSource string }{
	{"alice@example.org", "Northwest University Hospital EHR", ""},
	{"bob@example.org", "Exchange Companion App", "Exchange Companion App"},
}

func seedCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	fs := newFlags("seed", io)
	flush := fs.Bool("flush", false, "delete all data first (every collection of the database)")
	observations := fs.Bool("observations", false, "also load a month of demo observations up to today")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	if *flush {
		if err := a.db.Drop(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		if _, err := a.db.Migrate(ctx); err != nil {
			return err
		}
		fmt.Fprintf(io.out, "Flushed database %q.\n", s.MongoDatabase)
	}
	if err := seed(ctx, a.service, a.oauth, s); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	printDemoLogins(io, s)
	if *observations {
		added, err := seedObservations(ctx, a.service, time.Now())
		if err != nil {
			return fmt.Errorf("seed observations: %w", err)
		}
		fmt.Fprintf(io.out, "Demo observations: %d added (the %d days up to today).\n", added, demoObservationDays)
	}
	return nil
}

// seed loads the demo data. It is idempotent: everything is found by its
// natural key (email, name, coding) before it is created, so a second run,
// or a run after an interrupted one, completes the data without duplicates.
func seed(ctx context.Context, svc *domain.Service, op *oauth.Provider, s *settings) error {
	sys := domain.SystemActor()
	orgs := map[string]*domain.Organization{}
	for _, o := range seedOrganizations {
		parent := int64(0)
		if o.parent != "" {
			parent = orgs[o.parent].ID
		}
		org, err := svc.OrganizationByName(ctx, o.name, parent)
		if domain.IsCode(err, domain.CodeNotFound) {
			org, err = svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: o.name, Type: o.kind, PartOf: parent})
		}
		if err != nil {
			return fmt.Errorf("organization %q: %w", o.name, err)
		}
		orgs[o.name] = org
	}
	for _, p := range seedPractitioners {
		u, err := svc.UserByEmail(ctx, p.email)
		if domain.IsCode(err, domain.CodeNotFound) {
			u, err = svc.CreateUser(ctx, domain.NewUser{Email: p.email, Password: demoPassword, FirstName: p.first, LastName: p.last,
				Type: domain.UserPractitioner, IsSuperuser: p.superuser})
		}
		if err != nil {
			return fmt.Errorf("practitioner %s: %w", p.email, err)
		}
		if p.organization != "" {
			if err := ignoreDuplicate(svc.AddMember(ctx, sys, orgs[p.organization].ID, u.ID, p.role)); err != nil {
				return fmt.Errorf("membership of %s: %w", p.email, err)
			}
		}
	}
	scopes := map[string]*domain.ScopeCode{}
	for _, sc := range seedScopes {
		c, err := svc.EnsureScopeCode(ctx, sc.system, sc.code, sc.text)
		if err != nil {
			return fmt.Errorf("scope code %s: %w", sc.code, err)
		}
		scopes[sc.code] = c
	}
	sources := map[string]*domain.DataSource{}
	for _, d := range seedDataSources {
		ds, err := svc.DataSourceByName(ctx, d.name)
		if domain.IsCode(err, domain.CodeNotFound) {
			var ids []int64
			for _, code := range d.scopes {
				ids = append(ids, scopes[code].ID)
			}
			var v *domain.DataSourceView
			if v, err = svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: d.name, Type: d.kind, SupportedScopeCodeIDs: ids}); err == nil {
				ds = &v.DataSource
			}
		}
		if err != nil {
			return fmt.Errorf("data source %q: %w", d.name, err)
		}
		sources[d.name] = ds
	}
	studies := map[string]*domain.Study{}
	for _, st := range seedStudies {
		org := orgs[st.organization]
		study, err := svc.StudyByName(ctx, org.ID, st.name)
		if domain.IsCode(err, domain.CodeNotFound) {
			study, err = svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: st.name, Description: st.description})
		}
		if err != nil {
			return fmt.Errorf("study %q: %w", st.name, err)
		}
		for _, code := range st.scopes {
			if err := ignoreDuplicate(svc.RequestScope(ctx, sys, study, scopes[code].ID)); err != nil {
				return fmt.Errorf("study %q scope %s: %w", st.name, code, err)
			}
		}
		for _, name := range st.dataSources {
			if _, err := svc.AddStudyDataSource(ctx, sys, study.ID, sources[name].ID); ignoreDuplicate(err) != nil {
				return fmt.Errorf("study %q data source %q: %w", st.name, name, err)
			}
		}
		studies[st.name] = study
	}
	patients := map[string]*domain.Patient{}
	for _, sp := range seedPatients {
		p, err := seedPatientRecord(ctx, svc, sys, sp, orgs)
		if err != nil {
			return fmt.Errorf("patient %s: %w", sp.email, err)
		}
		patients[sp.email] = p
		for studyName, answers := range sp.consents {
			study := studies[studyName]
			if err := ignoreDuplicate(svc.Enroll(ctx, sys, study, p)); err != nil {
				return fmt.Errorf("enroll %s in %q: %w", sp.email, studyName, err)
			}
			for code, consented := range answers {
				answer := []domain.StudyScopeConsents{{StudyID: study.ID, Scopes: []domain.ScopeConsent{{System: scopes[code].System, Code: code, Consented: &consented}}}}
				if err := ignoreDuplicate(svc.AnswerConsents(ctx, sys, p.ID, answer)); err != nil {
					return fmt.Errorf("consent of %s to %s: %w", sp.email, code, err)
				}
			}
		}
	}
	for _, f := range seedFHIRSources {
		p := patients[f.patient]
		if _, err := svc.FHIRSourceByLabel(ctx, p.ID, f.label); !domain.IsCode(err, domain.CodeNotFound) {
			if err != nil {
				return err
			}
			continue
		}
		var dsID int64
		if f.dataSource != "" {
			dsID = sources[f.dataSource].ID
		}
		if _, err := svc.CreateFHIRSource(ctx, sys, p.ID, dsID, f.label); err != nil {
			return fmt.Errorf("FHIR source %q: %w", f.label, err)
		}
	}
	return seedClients(ctx, op, s)
}

func seedPatientRecord(ctx context.Context, svc *domain.Service, sys *domain.Actor, sp seedPatient, orgs map[string]*domain.Organization) (*domain.Patient, error) {
	if u, err := svc.UserByEmail(ctx, sp.email); err == nil {
		return svc.PatientByUserID(ctx, u.ID)
	} else if !domain.IsCode(err, domain.CodeNotFound) {
		return nil, err
	}
	var orgIDs []int64
	for _, name := range sp.organizations {
		orgIDs = append(orgIDs, orgs[name].ID)
	}
	return svc.CreatePatient(ctx, sys, domain.NewPatient{Email: sp.email, Password: demoPassword, FamilyName: sp.family,
		GivenNames: []string{sp.given}, BirthDate: sp.birthDate, Phone: sp.phone,
		Identifiers: []domain.Identifier{sp.identifier}, OrganizationIDs: orgIDs})
}

// seedClients registers the local test client and, when its settings are
// present, the MCP gateway's confidential client (trusted: no consent page),
// registered for oauth.GatewayScopes only: seeding again repairs a
// registration that allows more, and the tokens granted under it stop
// working.
func seedClients(ctx context.Context, op *oauth.Provider, s *settings) error {
	if _, err := op.SaveClient(ctx, oauth.ClientRegistration{
		ID: demoClientID, Name: "Exchange local test client", Type: domain.ClientPublic,
		RedirectURIs: []string{"http://localhost:3000/callback", "http://127.0.0.1:3000/callback"},
	}); err != nil {
		return fmt.Errorf("client %s: %w", demoClientID, err)
	}
	if s.MCPClientID == "" {
		return nil
	}
	if _, err := op.SaveClient(ctx, oauth.ClientRegistration{
		ID: s.MCPClientID, Secret: s.MCPClientSecret, Name: "MCP gateway", Type: domain.ClientConfidential,
		RedirectURIs: []string{s.MCPRedirectURI}, SkipAuthorization: true, Scopes: oauth.GatewayScopes,
	}); err != nil {
		return fmt.Errorf("MCP gateway client %s: %w", s.MCPClientID, err)
	}
	return nil
}

func ignoreDuplicate(err error) error {
	if domain.IsCode(err, domain.CodeDuplicate) {
		return nil
	}
	return err
}

func printDemoLogins(io stdio, s *settings) {
	fmt.Fprintf(io.out, "Demo data loaded. Every demo login uses the password %q.\n", demoPassword)
	w := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  email\trole")
	for _, p := range seedPractitioners {
		fmt.Fprintf(w, "  %s\t%s\n", p.email, p.description)
	}
	for _, p := range seedPatients {
		fmt.Fprintf(w, "  %s\tpatient %s %s\n", p.email, p.given, p.family)
	}
	w.Flush()
	fmt.Fprintf(io.out, "OAuth client for local testing: %s (public, PKCE; redirect http://localhost:3000/callback)\n", demoClientID)
	if s.MCPClientID != "" {
		fmt.Fprintf(io.out, "MCP gateway client: %s (confidential; redirect %s)\n", s.MCPClientID, s.MCPRedirectURI)
	}
}
