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
	c.render(w, r, s, http.StatusOK, "patients.html", "Patients", "patients", page)
	return nil
}

func patientPath(id int64) string { return fmt.Sprintf("%spatients/%d/", Prefix, id) }

func (c *Console) createPatient(w http.ResponseWriter, r *http.Request, s *session) error {
	org, err := formID(r, "organization")
	if err != nil {
		return err
	}
	in := domain.NewPatient{Email: r.PostFormValue("email"), FamilyName: r.PostFormValue("family"),
		GivenNames: strings.Fields(r.PostFormValue("given")), BirthDate: r.PostFormValue("birthDate"),
		Phone: r.PostFormValue("phone"), OrganizationIDs: []int64{org}}
	if system, value := strings.TrimSpace(r.PostFormValue("identifierSystem")), strings.TrimSpace(r.PostFormValue("identifierValue")); system != "" || value != "" {
		in.Identifiers = []domain.Identifier{{System: system, Value: value}}
	}
	p, err := c.Service.CreatePatient(r.Context(), s.actor, in)
	if err != nil {
		return err
	}
	return seeOther(w, r, patientPath(p.ID), "created")
}

type patientPage struct {
	Patient       *domain.Patient
	Organizations []domain.Organization
	Consents      *domain.ConsentOverview
	Sources       []domain.FHIRSource
	SourcesTotal  int64
	Write         bool // may change the record
	Invite        bool // may issue, cancel and re-issue invitations
	Invitations   []oauth.Invitation
	Clients       map[string]string
	Now           time.Time
	// New is the invitation just issued: its link and QR code are shown
	// this once (only the code's signature is kept).
	New *newInvitation
}

type newInvitation struct {
	Link      string
	QR        template.HTML
	ExpiresAt time.Time
	Client    string
}

func (c *Console) patient(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	return c.renderPatient(w, r, s, id, http.StatusOK, nil)
}

// renderPatient renders a patient's page, with an invitation just issued.
func (c *Console) renderPatient(w http.ResponseWriter, r *http.Request, s *session, id int64, status int, fresh *newInvitation) error {
	ctx := r.Context()
	p, err := c.Service.PatientByID(ctx, s.actor, id)
	if err != nil {
		return err
	}
	page := patientPage{Patient: p, Write: s.actor.CanWritePatientData(p), Invite: s.actor.CanManagePatient(p), Now: c.Service.Now(), New: fresh}
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
	c.render(w, r, s, status, "patient.html", patientName(*p), "patients", page)
	return nil
}

func (c *Console) addIdentifier(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.changeIdentifiers(w, r, s, func(id domain.Identifier) domain.PatientPatch {
		return domain.PatientPatch{AddIdentifiers: []domain.Identifier{id}}
	})
}

func (c *Console) removeIdentifier(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.changeIdentifiers(w, r, s, func(id domain.Identifier) domain.PatientPatch {
		return domain.PatientPatch{RemoveIdentifiers: []domain.Identifier{id}}
	})
}

// changeIdentifiers adds or removes the identifier a form names, through
// the patient update (all its checks), which applies the change to the
// record it reads: an identifier added meanwhile by another request stays.
func (c *Console) changeIdentifiers(w http.ResponseWriter, r *http.Request, s *session, change func(domain.Identifier) domain.PatientPatch) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	patch := change(domain.Identifier{System: strings.TrimSpace(r.PostFormValue("system")), Value: strings.TrimSpace(r.PostFormValue("value"))})
	if _, err := c.Service.UpdatePatient(r.Context(), s.actor, id, patch); err != nil {
		return err
	}
	return seeOther(w, r, patientPath(id), "saved")
}

// invite issues an invitation: to the console (the patient sets a
// password), or for an app client. The answer is the patient's page with
// the link and its QR code, shown this once.
func (c *Console) invite(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	p, err := c.invitedPatient(r, s)
	if err != nil {
		return err
	}
	var code *oauth.PatientCode
	if client := strings.TrimSpace(r.PostFormValue("client")); r.PostFormValue("for") == "app" {
		if client == "" {
			return domain.FieldErrorf("client", "is required: the app's client id")
		}
		code, err = c.OAuth.IssuePatientCode(ctx, p.UserID, client)
		err = domain.AsFieldError(err, "client")
	} else {
		code, err = c.OAuth.IssueConsoleInvitation(ctx, p.UserID)
	}
	if err != nil {
		return err
	}
	return c.showInvitation(w, r, s, p, code)
}

// showInvitation renders the patient's page with a new invitation's link
// and QR code.
func (c *Console) showInvitation(w http.ResponseWriter, r *http.Request, s *session, p *domain.Patient, code *oauth.PatientCode) error {
	link := oauth.AbsoluteLink(code.Link, c.OAuth.Origin(r))
	qr, err := qrSVG(link)
	if err != nil {
		return err
	}
	return c.renderPatient(w, r, s, p.ID, http.StatusCreated, &newInvitation{Link: link, QR: qr, ExpiresAt: code.ExpiresAt})
}

func (c *Console) cancelInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	p, err := c.invitedPatient(r, s)
	if err != nil {
		return err
	}
	if err := c.OAuth.CancelInvitation(r.Context(), p.UserID, r.PathValue("invitation")); err != nil {
		return err
	}
	return seeOther(w, r, patientPath(p.ID), "cancelled")
}

func (c *Console) reissueInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	p, err := c.invitedPatient(r, s)
	if err != nil {
		return err
	}
	code, err := c.OAuth.ReissueInvitation(r.Context(), p.UserID, r.PathValue("invitation"))
	if err != nil {
		return err
	}
	return c.showInvitation(w, r, s, p, code)
}

// invitedPatient returns the path's patient if the user may invite them.
func (c *Console) invitedPatient(r *http.Request, s *session) (*domain.Patient, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return c.Service.PatientForInvitation(r.Context(), s.actor, id)
}
