package console

import (
	"net/http"
	"net/url"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// The acceptance of a console invitation. The link a practitioner hands
// the patient (or its QR code) opens this page with the single-use code;
// the patient chooses a password, the code is used, and the patient signs
// in on the exchange's login page with their email and that password. The
// code never leaves the page's form: not logged, no referrer sent on.

type invitationPage struct {
	Code  string
	Email string
	Error string // why the chosen password was refused
}

// invitationPage shows whose invitation a code is and asks for a password.
func (c *Console) invitationPage(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	page, err := c.invitee(r, code)
	if err != nil {
		c.renderError(w, r, nil, err)
		return
	}
	c.render(w, r, nil, http.StatusOK, "invitation.html", "Welcome", "", page)
}

// invitee returns the page of a code that works.
func (c *Console) invitee(r *http.Request, code string) (invitationPage, error) {
	userID, err := c.OAuth.ConsoleInvitationUser(r.Context(), code)
	if err != nil {
		return invitationPage{}, err
	}
	u, err := c.Service.UserByID(r.Context(), userID)
	if err != nil {
		return invitationPage{}, err
	}
	return invitationPage{Code: code, Email: u.Email}, nil
}

// acceptInvitation checks the password first (a refused password keeps
// the invitation), then uses the code once to set the password
// (domain.Service.AcceptInvitation, which a retry after a crash
// completes) and sends the patient to sign in.
func (c *Console) acceptInvitation(w http.ResponseWriter, r *http.Request) {
	err := c.accept(r)
	if domain.IsCode(err, domain.CodeInvalid) {
		// A refused password: the invitation still works, ask again.
		if page, perr := c.invitee(r, r.PostFormValue("code")); perr == nil {
			page.Error = domain.Sentence(domain.ErrorMessage(err))
			c.render(w, r, nil, httpstatus.Of(err), "invitation.html", "Welcome", "", page)
			return
		}
	}
	if err != nil {
		c.renderError(w, r, nil, err)
		return
	}
	http.Redirect(w, r, "/o/login/?next="+url.QueryEscape(Prefix), http.StatusSeeOther)
}

func (c *Console) accept(r *http.Request) error {
	if !c.OAuth.CSRFValid(r) {
		return domain.Errorf(domain.CodeForbidden, "this form has expired; open the invitation link again")
	}
	password := r.PostFormValue("password")
	if err := domain.CheckNewPassword(password); err != nil {
		return err
	}
	if password != r.PostFormValue("confirm") {
		return domain.FieldErrorf("confirm", "the two passwords differ")
	}
	code, err := c.OAuth.ConsoleInvitationCode(r.Context(), r.PostFormValue("code"))
	if err != nil {
		return err
	}
	return c.Service.AcceptInvitation(r.Context(), code, password)
}
