package console

import (
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"exchange/domain"
	"exchange/oauth"
)

type patientsPage struct {
	Query         string
	Patients      []domain.Patient
	Pager         pager
	Organizations []domain.Organization // where the user may create one
}

func (c *Console) patients(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderPatients(w, r, s, nil)
}

// renderPatients renders the list of patients and the form that creates
// one, refused or afresh.
func (c *Console) renderPatients(w http.ResponseWriter, r *http.Request, s *session, form *formState) error {
	ctx := r.Context()
	p := listPage(r)
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	l, err := c.Service.ListPatients(ctx, s.actor, domain.PatientFilter{Name: q}, p)
	if err != nil {
		return err
	}
	if err := domain.CheckPage(p, l.Total); err != nil {
		return err
	}
	page := patientsPage{Query: q, Patients: l.Items, Pager: pagerOf(r, p, l.Total)}
	if page.Organizations, err = c.dataOrganizations(ctx, s.actor); err != nil {
		return err
	}
	c.renderForm(w, r, s, http.StatusOK, "patients.html", "Patients", "patients", page, form)
	return nil
}

func patientPath(id int64) string { return fmt.Sprintf("%spatients/%d/", Prefix, id) }

// newPatientForm is the form that creates a patient; a taken identifier
// is about its value.
var newPatientForm = formSpec{name: "new-patient", fields: map[string]string{
	"email": "email", "nameFamily": "family", "nameGiven": "given", "birthDate": "birthDate", "phone": "phone",
	"identifiers": "identifierValue", "identifiers.system": "identifierSystem", "identifiers.value": "identifierValue",
	"organizationIds": "organization", "organization": "organization"},
	unnamed: map[domain.Code]string{domain.CodeDuplicate: "identifierValue"}}

func (c *Console) createPatient(w http.ResponseWriter, r *http.Request, s *session) error {
	p, err := c.newPatient(r, s)
	if err != nil {
		return newPatientForm.refused(r, err, func(form *formState) error { return c.renderPatients(w, r, s, form) })
	}
	return seeOther(w, r, patientPath(p.ID), "created")
}

// newPatient creates the patient the form describes.
func (c *Console) newPatient(r *http.Request, s *session) (*domain.Patient, error) {
	org, err := formID(r, "organization")
	if err != nil {
		return nil, err
	}
	in := domain.NewPatient{Email: r.PostFormValue("email"), FamilyName: r.PostFormValue("family"),
		GivenNames: strings.Fields(r.PostFormValue("given")), BirthDate: r.PostFormValue("birthDate"),
		Phone: r.PostFormValue("phone"), OrganizationIDs: []int64{org}}
	if system, value := strings.TrimSpace(r.PostFormValue("identifierSystem")), strings.TrimSpace(r.PostFormValue("identifierValue")); system != "" || value != "" {
		in.Identifiers = []domain.Identifier{{System: system, Value: value}}
	}
	return c.Service.CreatePatient(r.Context(), s.actor, in)
}

type patientPage struct {
	Patient       *domain.Patient
	Organizations []domain.Organization
	Consents      *domain.ConsentOverview
	Sources       []domain.FHIRSource
	SourcesTotal  int64
	Write         bool // may change the record
	Invite        bool // may issue, cancel and re-issue invitations
	HasLogin      bool // the patient has a login: an invitation needs a replacement
	ReplaceLogin  bool // may replace the patient's login (a manager)
	Emailed       bool // invitations go to the patient by email (a delivery channel)
	Invitations   []oauth.Invitation
	Clients       map[string]string
	Now           time.Time
	// New is the invitation just issued: its link and QR code are shown
	// this once (only the code's signature is kept).
	New *newInvitation
}

type newInvitation struct {
	Link          string // to hand over; empty when it was emailed
	QR            template.HTML
	SentTo        string // the masked address it was emailed to
	ExpiresAt     time.Time
	LoginReplaced bool
}

func (c *Console) patient(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	return c.renderPatient(w, r, s, id, http.StatusOK, nil, nil)
}

// renderPatient renders a patient's page, with an invitation just issued
// or a form that was refused.
func (c *Console) renderPatient(w http.ResponseWriter, r *http.Request, s *session, id int64, status int, fresh *newInvitation, form *formState) error {
	ctx := r.Context()
	p, err := c.Service.PatientByID(ctx, s.actor, id)
	if err != nil {
		return err
	}
	page := patientPage{Patient: p, Write: s.actor.CanWritePatientData(p), Invite: s.actor.CanManagePatient(p),
		ReplaceLogin: s.actor.CanReplaceLogin(p), Emailed: c.Service.HasDeliveryChannel(), Now: c.Service.Now(), New: fresh}
	if page.Invite {
		u, err := c.Service.UserByID(ctx, p.UserID)
		if err != nil {
			return err
		}
		page.HasLogin = u.HasLogin()
	}
	orgs, err := c.readableOrganizations(ctx, s.actor)
	if err != nil {
		return err
	}
	for _, o := range orgs {
		if slices.Contains(p.OrganizationIDs, o.ID) {
			page.Organizations = append(page.Organizations, o)
		}
	}
	if page.Consents, err = c.Service.PatientConsents(ctx, s.actor, id); err != nil {
		return err
	}
	sources, err := c.Service.FHIRSourcesOfPatient(ctx, s.actor, id, domain.Page{Number: 1, Size: homeLimit})
	if err != nil {
		return err
	}
	page.Sources, page.SourcesTotal = sources.Items, sources.Total
	if page.Invitations, err = c.OAuth.Invitations(ctx, []int64{p.UserID}); err != nil {
		return err
	}
	if page.Clients, err = c.clientNames(ctx, page.Invitations); err != nil {
		return err
	}
	c.renderForm(w, r, s, status, "patient.html", patientName(*p), "patients", page, form)
	return nil
}

func (c *Console) addIdentifier(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.changeIdentifiers(w, r, s, identifierForm, func(id domain.Identifier) domain.PatientPatch {
		return domain.PatientPatch{AddIdentifiers: []domain.Identifier{id}}
	})
}

func (c *Console) removeIdentifier(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.changeIdentifiers(w, r, s, removeIdentifierForm, func(id domain.Identifier) domain.PatientPatch {
		return domain.PatientPatch{RemoveIdentifiers: []domain.Identifier{id}}
	})
}

// changeIdentifiers adds or removes the identifier a form names, through
// the patient update (all its checks), which applies the change to the
// record it reads: an identifier added meanwhile by another request stays.
func (c *Console) changeIdentifiers(w http.ResponseWriter, r *http.Request, s *session, spec formSpec, change func(domain.Identifier) domain.PatientPatch) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	patch := change(domain.Identifier{System: strings.TrimSpace(r.PostFormValue("system")), Value: strings.TrimSpace(r.PostFormValue("value"))})
	if _, err := c.Service.UpdatePatient(r.Context(), s.actor, id, patch); err != nil {
		return spec.refused(r, err, func(form *formState) error {
			return c.renderPatient(w, r, s, id, http.StatusOK, nil, form)
		})
	}
	return seeOther(w, r, patientPath(id), "saved")
}

// identifierForm adds an identifier to a patient; a taken identifier is
// about its value. A removal's refusal shows above the list.
var (
	removeIdentifierForm = formSpec{name: "remove-identifier"}
	identifierForm       = formSpec{name: "identifier", fields: map[string]string{
		"addIdentifiers": "value", "addIdentifiers.system": "system", "addIdentifiers.value": "value",
		"identifiers": "value", "identifiers.system": "system", "identifiers.value": "value"},
		unnamed: map[domain.Code]string{domain.CodeDuplicate: "value"}}
)

// invitationForm invites a patient.
var invitationForm = formSpec{name: "invitation", fields: map[string]string{"client": "client", "clientId": "client"}}

// invite issues an invitation (oauth.Provider.Invite): to the console
// (the patient chooses a password), or for an app client; for a patient
// with a login, only as a manager's replacement of it. The answer is the
// patient's page with the link and its QR code, shown this once, or the
// address it was emailed to.
func (c *Console) invite(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	req := oauth.InvitationRequest{PatientID: id, ClientID: oauth.ConsoleClientID, ReplaceLogin: r.PostFormValue("replaceLogin") == "yes",
		Origin: c.OAuth.Origin(r)}
	var sent *oauth.SentInvitation
	if r.PostFormValue("for") == "app" {
		req.ClientID = strings.TrimSpace(r.PostFormValue("client"))
	}
	if req.ClientID == "" {
		err = domain.FieldErrorf("client", "is required: the app's client id")
	} else {
		sent, err = c.OAuth.Invite(r.Context(), s.actor, req)
	}
	if err != nil {
		return invitationForm.refused(r, err, func(form *formState) error {
			return c.renderPatient(w, r, s, id, http.StatusOK, nil, form)
		})
	}
	return c.showInvitation(w, r, s, sent)
}

// showInvitation renders the patient's page with a new invitation: its
// link and QR code, or where it was emailed.
func (c *Console) showInvitation(w http.ResponseWriter, r *http.Request, s *session, sent *oauth.SentInvitation) error {
	fresh := &newInvitation{SentTo: sent.SentTo, ExpiresAt: sent.ExpiresAt, LoginReplaced: sent.LoginReplaced}
	if sent.Link != "" {
		qr, err := qrSVG(sent.Link)
		if err != nil {
			return err
		}
		fresh.Link, fresh.QR = sent.Link, qr
	}
	return c.renderPatient(w, r, s, sent.PatientID, http.StatusCreated, fresh, nil)
}

func (c *Console) cancelInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := c.OAuth.CancelPatientInvitation(r.Context(), s.actor, id, r.PathValue("invitation")); err != nil {
		return err
	}
	return seeOther(w, r, patientPath(id), "cancelled")
}

func (c *Console) reissueInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	sent, err := c.OAuth.Reinvite(r.Context(), s.actor, id, r.PathValue("invitation"), c.OAuth.Origin(r))
	if err != nil {
		return err
	}
	return c.showInvitation(w, r, s, sent)
}
