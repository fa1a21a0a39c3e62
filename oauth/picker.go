package oauth

import (
	"net/http"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"exchange/domain"
)

// pickerSize is how many patients the picker lists at once; a longer
// list asks for a narrower name.
const pickerSize = 20

// launchPatient settles the patient context of a grant that holds
// launch/patient: a patient user's own record; for a practitioner, the
// patient they choose on the picker page among those they may read (the
// domain's ListPatients and PatientByID decide). Until a valid choice is
// posted it shows the picker (or, with prompt=none, answers
// interaction_required) and reports false.
func (p *Provider) launchPatient(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, actor *domain.Actor,
	client string, granted fosite.Arguments, prompt []string) (int64, bool) {
	if !granted.Has(domain.ScopeLaunchPatient) {
		return 0, true
	}
	if actor.Patient != nil {
		return actor.Patient.ID, true
	}
	ctx := r.Context()
	page := pickerPage{Client: client, User: actor.User.Email, Scopes: granted, Action: r.URL.RequestURI()}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		page.Name = strings.TrimSpace(r.PostFormValue("patient_name"))
		if chosen := r.PostFormValue("launch_patient"); chosen != "" {
			if id, ok := domain.ParseID(chosen); ok { // anything else is no patient: bad input, not a fault
				_, err := p.users.PatientByID(ctx, actor, id)
				if err == nil {
					return id, true
				}
				if domain.ErrorCode(err) == domain.CodeInternal {
					p.log.Error("reading the chosen patient failed", "error", err)
				}
			}
			// The same answer whether the patient exists or not.
			page.Error = "You may not open that record. Choose one of the patients listed."
			status = http.StatusForbidden
		}
	}
	if slices.Contains(prompt, "none") {
		p.writeAuthorizeError(w, r, ar, fosite.ErrInteractionRequired.WithHint("The user must choose a patient."))
		return 0, false
	}
	list, err := p.users.ListPatients(ctx, actor, domain.PatientFilter{Name: page.Name}, domain.Page{Number: 1, Size: pickerSize})
	if err != nil {
		p.log.Error("listing patients for the picker failed", "error", err)
		p.renderMessage(w, r, http.StatusInternalServerError, "Something went wrong", "The patients could not be listed. Try again later.")
		return 0, false
	}
	for _, pt := range list.Items {
		name := strings.TrimSpace(strings.Join(pt.GivenNames, " ") + " " + pt.FamilyName)
		page.Patients = append(page.Patients, pickedPatient{ID: pt.ID, Name: name, BirthDate: pt.BirthDate})
	}
	page.More = list.Total > int64(len(list.Items))
	p.renderPicker(w, r, status, page)
	return 0, false
}
