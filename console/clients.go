package console

import (
	"net/http"
	"strings"

	"exchange/domain"
	"exchange/oauth"
)

type clientsPage struct {
	Clients  []domain.OAuthClient
	Pager    pager
	Gateway  string // the MCP gateway's client id, "" when not configured
	Console  string // the console's own client id
	Secret   *issuedSecret
	Trusted  bool // the user may register trusted clients
	Rotating map[string]bool
}

// issuedSecret is a client secret shown once, after it was generated.
type issuedSecret struct {
	ClientID, Name, Secret string
	New                    bool // registered now (else rotated)
}

func (c *Console) clients(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderClients(w, r, s, http.StatusOK, nil, nil)
}

// renderClients renders the clients the user may see, with a secret just
// issued or a form that was refused.
func (c *Console) renderClients(w http.ResponseWriter, r *http.Request, s *session, status int, secret *issuedSecret, form *formState) error {
	all, err := c.OAuth.ClientsOf(r.Context(), s.actor)
	if err != nil {
		return err
	}
	p := listPage(r)
	if err := domain.CheckPage(p, int64(len(all))); err != nil {
		return err
	}
	start := min(int(p.Offset()), len(all))
	page := clientsPage{Clients: all[start:min(start+p.Size, len(all))], Pager: pagerOf(r, p, int64(len(all))),
		Gateway: c.GatewayClientID, Console: oauth.ConsoleClientID, Secret: secret, Trusted: s.actor.IsSuperuser()}
	c.renderForm(w, r, s, status, "clients.html", "OAuth clients", "clients", page, form)
	return nil
}

// The forms of the clients page: registering one, and rotating a secret.
var (
	newClientForm = formSpec{name: "new-client", fields: map[string]string{
		"name": "name", "clientType": "type", "grant": "grant", "redirectUris": "redirectUris", "algorithm": "algorithm"}}
	rotateClientForm = formSpec{name: "rotate-client"}
)

// registerClient registers a client with the fields of the seed's
// registration (client type, grant type, redirect URIs, RS256) and shows
// its secret once.
func (c *Console) registerClient(w http.ResponseWriter, r *http.Request, s *session) error {
	client, secret, err := c.newClient(r, s)
	if err != nil {
		return newClientForm.refused(r, err, func(form *formState) error { return c.renderClients(w, r, s, http.StatusOK, nil, form) })
	}
	return c.renderClients(w, r, s, http.StatusCreated, &issuedSecret{ClientID: client.ID, Name: client.Name, Secret: secret, New: true}, nil)
}

// newClient registers the client the form describes.
func (c *Console) newClient(r *http.Request, s *session) (*domain.OAuthClient, string, error) {
	if g := r.PostFormValue("grant"); g != "authorization_code" {
		return nil, "", domain.FieldErrorf("grant", "only the authorization code grant (with PKCE) is offered")
	}
	return c.OAuth.RegisterClientAs(r.Context(), s.actor, oauth.ClientRegistration{
		Name: r.PostFormValue("name"), Type: domain.ClientType(r.PostFormValue("type")), Algorithm: r.PostFormValue("algorithm"),
		RedirectURIs: strings.Fields(r.PostFormValue("redirectUris")), SkipAuthorization: r.PostFormValue("trusted") == "1",
	})
}

func (c *Console) rotateClient(w http.ResponseWriter, r *http.Request, s *session) error {
	id := r.PathValue("id")
	secret, err := c.OAuth.RotateClientSecretAs(r.Context(), s.actor, id)
	if err != nil {
		return rotateClientForm.refused(r, err, func(form *formState) error { return c.renderClients(w, r, s, http.StatusOK, nil, form) })
	}
	return c.renderClients(w, r, s, http.StatusOK, &issuedSecret{ClientID: id, Name: id, Secret: secret}, nil)
}
