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
	// Managed are the organizations the user manages: what a backend
	// client the user registers may act for, besides the user.
	Managed []domain.Organization
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
	orgs, err := c.readableOrganizations(r.Context(), s.actor)
	if err != nil {
		return err
	}
	for _, o := range orgs {
		if s.actor.CanAdministerOrganization(o.ID) {
			page.Managed = append(page.Managed, o)
		}
	}
	c.renderForm(w, r, s, status, "clients.html", "OAuth clients", "clients", page, form)
	return nil
}

// The forms of the clients page: registering one, and rotating a secret.
var (
	newClientForm = formSpec{name: "new-client", fields: map[string]string{
		"name": "name", "clientType": "type", "grant": "grant", "redirectUris": "redirectUris", "algorithm": "algorithm"}}
	rotateClientForm = formSpec{name: "rotate-client"}
	newBackendForm   = formSpec{name: "new-backend", fields: map[string]string{
		"name": "name", "jwks": "jwks", "jwksUrl": "jwksUrl", "actsFor": "actsFor", "actsForUserId": "actsFor", "actsForOrganizationId": "actsFor"}}
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

// registerBackendClient registers a SMART backend service: its public
// keys (a JWKS, or the URL it is published at) and whom it acts for, the
// user or an organization they manage. It has no secret to show.
func (c *Console) registerBackendClient(w http.ResponseWriter, r *http.Request, s *session) error {
	client, err := c.newBackendClient(r, s)
	if err != nil {
		return newBackendForm.refused(r, err, func(form *formState) error { return c.renderClients(w, r, s, http.StatusOK, nil, form) })
	}
	return c.renderClients(w, r, s, http.StatusCreated, &issuedSecret{ClientID: client.ID, Name: client.Name, New: true}, nil)
}

// newBackendClient registers the backend client the form describes.
func (c *Console) newBackendClient(r *http.Request, s *session) (*domain.OAuthClient, error) {
	reg := oauth.ClientRegistration{Name: r.PostFormValue("name"), Type: domain.ClientBackend,
		JWKS: strings.TrimSpace(r.PostFormValue("jwks")), JWKSURL: strings.TrimSpace(r.PostFormValue("jwksUrl"))}
	switch actsFor := r.PostFormValue("actsFor"); {
	case actsFor == "me":
		reg.ActsForUserID = s.actor.User.ID
	case strings.HasPrefix(actsFor, "organization:"):
		id, ok := domain.ParseID(strings.TrimPrefix(actsFor, "organization:"))
		if !ok {
			return nil, domain.FieldErrorf("actsFor", "choose yourself or an organization you manage")
		}
		reg.ActsForOrganizationID = id
	default:
		return nil, domain.FieldErrorf("actsFor", "choose yourself or an organization you manage")
	}
	client, _, err := c.OAuth.RegisterClientAs(r.Context(), s.actor, reg)
	return client, err
}

func (c *Console) rotateClient(w http.ResponseWriter, r *http.Request, s *session) error {
	id := r.PathValue("id")
	secret, err := c.OAuth.RotateClientSecretAs(r.Context(), s.actor, id)
	if err != nil {
		return rotateClientForm.refused(r, err, func(form *formState) error { return c.renderClients(w, r, s, http.StatusOK, nil, form) })
	}
	return c.renderClients(w, r, s, http.StatusOK, &issuedSecret{ClientID: id, Name: id, Secret: secret}, nil)
}
