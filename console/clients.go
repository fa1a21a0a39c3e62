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
	return c.renderClients(w, r, s, http.StatusOK, nil)
}

// renderClients renders the clients the user may see, with a secret just
// issued.
func (c *Console) renderClients(w http.ResponseWriter, r *http.Request, s *session, status int, secret *issuedSecret) error {
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
	c.render(w, r, s, status, "clients.html", "OAuth clients", "clients", page)
	return nil
}

// registerClient registers a client with the fields of the seed's
// registration (client type, grant type, redirect URIs, RS256) and shows
// its secret once.
func (c *Console) registerClient(w http.ResponseWriter, r *http.Request, s *session) error {
	if g := r.PostFormValue("grant"); g != "authorization_code" {
		return domain.FieldErrorf("grant", "only the authorization code grant (with PKCE) is offered")
	}
	client, secret, err := c.OAuth.RegisterClientAs(r.Context(), s.actor, oauth.ClientRegistration{
		Name: r.PostFormValue("name"), Type: domain.ClientType(r.PostFormValue("type")), Algorithm: r.PostFormValue("algorithm"),
		RedirectURIs: strings.Fields(r.PostFormValue("redirectUris")), SkipAuthorization: r.PostFormValue("trusted") == "1",
	})
	if err != nil {
		return err
	}
	return c.renderClients(w, r, s, http.StatusCreated, &issuedSecret{ClientID: client.ID, Name: client.Name, Secret: secret, New: true})
}

// registerBackendClient registers a SMART backend service: its public
// keys (a JWKS, or the URL it is published at) and whom it acts for, the
// user or an organization they manage. It has no secret to show.
func (c *Console) registerBackendClient(w http.ResponseWriter, r *http.Request, s *session) error {
	reg := oauth.ClientRegistration{Name: r.PostFormValue("name"), Type: domain.ClientBackend,
		JWKS: strings.TrimSpace(r.PostFormValue("jwks")), JWKSURL: strings.TrimSpace(r.PostFormValue("jwksUrl"))}
	switch actsFor := r.PostFormValue("actsFor"); {
	case actsFor == "me":
		reg.ActsForUserID = s.actor.User.ID
	case strings.HasPrefix(actsFor, "organization:"):
		id, ok := domain.ParseID(strings.TrimPrefix(actsFor, "organization:"))
		if !ok {
			return domain.FieldErrorf("actsFor", "choose yourself or an organization you manage")
		}
		reg.ActsForOrganizationID = id
	default:
		return domain.FieldErrorf("actsFor", "choose yourself or an organization you manage")
	}
	client, _, err := c.OAuth.RegisterClientAs(r.Context(), s.actor, reg)
	if err != nil {
		return err
	}
	return c.renderClients(w, r, s, http.StatusCreated, &issuedSecret{ClientID: client.ID, Name: client.Name, New: true})
}

func (c *Console) rotateClient(w http.ResponseWriter, r *http.Request, s *session) error {
	id := r.PathValue("id")
	secret, err := c.OAuth.RotateClientSecretAs(r.Context(), s.actor, id)
	if err != nil {
		return err
	}
	return c.renderClients(w, r, s, http.StatusOK, &issuedSecret{ClientID: id, Name: id, Secret: secret})
}
