package oauth

import "net/http"

// SessionUser returns the user of the request's valid login session: the
// signed-in user of the exchange's own pages (the web console), who acts
// with their full permission model, not with a token's scopes. An expired
// or forged session, or a user who is gone or inactive, is no session.
func (p *Provider) SessionUser(r *http.Request) (userID int64, ok bool) {
	sess, ok := p.session(r)
	if !ok {
		return 0, false
	}
	u, err := p.users.UserByID(r.Context(), sess.UserID)
	if err != nil || !u.IsActive {
		return 0, false
	}
	return u.ID, true
}
