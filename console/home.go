package console

import (
	"context"
	"net/http"

	"exchange/domain"
	"exchange/oauth"
)

// homeLimit is how many entries of each list the home page shows; each
// list links to its own paged page.
const homeLimit = 10

type homePage struct {
	Organizations []orgNode
	// OrganizationsTotal is set when the home page shows only some of them.
	OrganizationsTotal int64
	Studies            []domain.StudyView
	StudiesTotal       int64
	Todos              *domain.Todos
	Invitations        []pendingInvitation
	// A patient's home.
	Consents *domain.ConsentOverview
	Mine     []oauth.Invitation
	Clients  map[string]string // client names by id
	// Capacity is set when the store is past its comfortable size.
	Capacity *domain.StoreCapacity
}

// pendingInvitation is an invitation not redeemed yet, with its patient.
type pendingInvitation struct {
	oauth.Invitation
	Patient domain.Patient
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	if s.actor.User.Type == domain.UserPatient {
		return c.patientHome(w, r, s)
	}
	var page homePage
	if c.Capacity != nil {
		page.Capacity = c.Capacity()
	}
	orgs, err := c.Service.ListOrganizations(ctx, s.actor, nil, domain.Page{Number: 1, Size: homeLimit})
	if err != nil {
		return err
	}
	page.Organizations = tree(s.actor, orgs.Items)
	if orgs.Total > int64(len(orgs.Items)) {
		page.OrganizationsTotal = orgs.Total
	}
	studies, err := c.Service.ListStudies(ctx, s.actor, 0, domain.Page{Number: 1, Size: homeLimit})
	if err != nil {
		return err
	}
	page.Studies, page.StudiesTotal = studies.Items, studies.Total
	if page.Todos, err = c.Service.Todos(ctx, s.actor); err != nil {
		return err
	}
	if page.Invitations, err = c.pendingInvitations(ctx, s.actor); err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "home.html", "Home", "home", page)
	return nil
}

// maxInvitationPatients bounds the patients whose invitations the home
// page looks at (the first by id), like domain.MaxTodoStudies.
const maxInvitationPatients = 500

// pendingInvitations returns the invitations not redeemed yet of the
// patients the user may invite.
func (c *Console) pendingInvitations(ctx context.Context, a *domain.Actor) ([]pendingInvitation, error) {
	patients, err := c.Service.ListPatients(ctx, a, domain.PatientFilter{}, domain.Page{Number: 1, Size: maxInvitationPatients})
	if err != nil {
		return nil, err
	}
	byUser := map[int64]domain.Patient{}
	var users []int64
	for _, p := range patients.Items {
		if a.CanManagePatient(&p) {
			byUser[p.UserID] = p
			users = append(users, p.UserID)
		}
	}
	invitations, err := c.OAuth.Invitations(ctx, users)
	if err != nil {
		return nil, err
	}
	now := c.Service.Now()
	var out []pendingInvitation
	for _, i := range invitations {
		if i.Pending(now) {
			out = append(out, pendingInvitation{Invitation: i, Patient: byUser[i.UserID]})
		}
	}
	return out, nil
}

// patientHome is a patient's own page: their studies with the consent
// requests to answer, and their invitations.
func (c *Console) patientHome(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderPatientHome(w, r, s, nil)
}

// renderPatientHome renders a patient's own page, with an answer that was
// refused.
func (c *Console) renderPatientHome(w http.ResponseWriter, r *http.Request, s *session, form *formState) error {
	ctx := r.Context()
	var page homePage
	if s.actor.Patient != nil {
		var err error
		if page.Consents, err = c.Service.PatientConsents(ctx, s.actor, s.actor.Patient.ID); err != nil {
			return err
		}
		if page.Mine, err = c.OAuth.Invitations(ctx, []int64{s.actor.User.ID}); err != nil {
			return err
		}
		if page.Clients, err = c.clientNames(ctx, page.Mine); err != nil {
			return err
		}
	}
	c.renderForm(w, r, s, http.StatusOK, "patient-home.html", "My studies", "home", page, form)
	return nil
}

// consentForm is a patient's answer to one data type of one study.
var consentForm = formSpec{name: "consent", fields: map[string]string{"answer": "answer"}}

// clientNames returns the names of the clients invitations are for.
func (c *Console) clientNames(ctx context.Context, invitations []oauth.Invitation) (map[string]string, error) {
	out := map[string]string{}
	for _, i := range invitations {
		if _, ok := out[i.ClientID]; ok {
			continue
		}
		name, err := c.OAuth.ClientName(ctx, i.ClientID)
		if err != nil {
			return nil, err
		}
		out[i.ClientID] = name
	}
	return out, nil
}

// answerConsent records a patient's answer to one scope of a study: the
// first answer, or a change of it (change later). A refused answer shows
// the patient's page with the reason beside the question.
func (c *Console) answerConsent(w http.ResponseWriter, r *http.Request, s *session) error {
	err := c.consent(r, s)
	if err != nil && s.actor.Patient != nil {
		return consentForm.refused(r, err, func(form *formState) error { return c.renderPatientHome(w, r, s, form) })
	}
	if err != nil {
		return err
	}
	return seeOther(w, r, Prefix, "answered")
}

// consent records the answer the form gives.
func (c *Console) consent(r *http.Request, s *session) error {
	ctx := r.Context()
	patientID, err := formID(r, "patient")
	if err != nil {
		return err
	}
	studyID, err := formID(r, "study")
	if err != nil {
		return err
	}
	var consented bool
	switch r.PostFormValue("answer") {
	case "share":
		consented = true
	case "decline":
	default:
		return domain.FieldErrorf("answer", "choose to share or not to share")
	}
	in := []domain.StudyScopeConsents{{StudyID: studyID, Scopes: []domain.ScopeConsent{{
		System: r.PostFormValue("system"), Code: r.PostFormValue("code"), Consented: &consented}}}}
	if r.PostFormValue("change") == "1" {
		return c.Service.UpdateConsents(ctx, s.actor, patientID, in)
	}
	return c.Service.AnswerConsents(ctx, s.actor, patientID, in)
}
