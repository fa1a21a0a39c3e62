package console

import (
	"net/http"

	"exchange/domain"
)

// The acceptance of a console invitation. The link a practitioner hands
// the patient (or its QR code) opens this page with the single-use code;
// the patient chooses a password, the code is used, and a confirmation
// asks the patient to sign in, their email filled in, with that password
// (its form posts to the exchange's login page). The code never leaves the
// page's form: not logged, no referrer sent on.

type invitationPage struct {
	Code  string
	Email string
}

// acceptForm is the invitation's password form. What was typed into it is
// never shown again: it is a password.
var acceptForm = formSpec{name: "accept", fields: map[string]string{"password": "password", "confirm": "confirm"}}

// passwordSetPage confirms a chosen password and offers to sign in.
type passwordSetPage struct {
	Email string
	Next  string // where the sign-in goes: the console
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
	userID, err := c.accept(r)
	if domain.IsCode(err, domain.CodeInvalid) {
		// A refused password: the invitation still works, ask again.
		if page, perr := c.invitee(r, r.PostFormValue("code")); perr == nil {
			c.renderForm(w, r, nil, http.StatusOK, "invitation.html", "Welcome", "", page, acceptForm.refusal(r, err))
			return
		}
	}
	if err != nil {
		c.renderError(w, r, nil, err)
		return
	}
	page := passwordSetPage{Next: Prefix}
	if u, err := c.Service.UserByID(r.Context(), userID); err == nil {
		page.Email = u.Email // else the page asks for it
	}
	c.render(w, r, nil, http.StatusOK, "password-set.html", "Your password is set", "", page)
}

// accept sets the password the form chose with the invitation's code, and
// returns the invited user.
func (c *Console) accept(r *http.Request) (int64, error) {
	if !c.OAuth.CSRFValid(r) {
		return 0, domain.Errorf(domain.CodeForbidden, "this form has expired; open the invitation link again")
	}
	password := r.PostFormValue("password")
	if err := domain.CheckNewPassword(password); err != nil {
		return 0, err
	}
	if password != r.PostFormValue("confirm") {
		return 0, domain.FieldErrorf("confirm", "the two passwords differ")
	}
	code, err := c.OAuth.ConsoleInvitationCode(r.Context(), r.PostFormValue("code"))
	if err != nil {
		return 0, err
	}
	return code.UserID, c.Service.AcceptInvitation(r.Context(), code, password)
}
