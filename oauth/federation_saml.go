package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/xml"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"time"

	"github.com/crewjam/saml"
	"github.com/crewjam/saml/samlsp"
	"github.com/jonboulle/clockwork"
	dsig "github.com/russellhaering/goxmldsig"

	"exchange/domain"
)

// The SAML 2.0 service provider, on crewjam/saml: SP-initiated sign-in
// (an AuthnRequest by the HTTP-Redirect binding), the answer posted to the
// assertion consumer service (HTTP-POST binding). crewjam/saml checks the
// answer: the Response or its Assertion signed by a certificate of the
// provider's metadata (an unsigned or wrapped one is refused), the
// Audience (our entity id), Recipient and Destination (our ACS URL),
// NotBefore and NotOnOrAfter, the issue instant, and InResponseTo against
// the id of the AuthnRequest this sign-in sent; its replay cache, kept in
// the database (UseAssertion) so that every instance shares it, accepts
// each assertion id once. IdP-initiated sign-ins are refused: an answer
// nobody asked for binds to no browser.
//
// The answer comes back by a cross-site POST, which carries no SameSite
// cookie; so the ACS accepts it for its user, and sends the browser on
// to /o/saml/{provider}/finish, a same-site GET that carries the cookie
// binding the sign-in to the browser, where the session starts.
//
// Each provider's service provider is known by its metadata at
// /o/saml/{provider}/metadata: entity id that URL, ACS
// /o/saml/{provider}/acs. Its key is the exchange's signing key, with a
// certificate every instance derives alike.

// samlMetadata is an identity provider's metadata as last read, kept per
// provider.
type samlMetadata struct {
	config  domain.IdentityProvider // what it was read for
	idp     *saml.EntityDescriptor
	fetched time.Time
}

// samlMetadataLifetime is how long the metadata read from a provider's
// URL is used before it is read again.
const samlMetadataLifetime = time.Hour

// serviceProvider returns the SAML service provider for the provider and
// the request's origin, built for each request: the origin is the
// request's (its Host, which anyone chooses), so nothing is kept per
// origin. The provider's metadata is read the first time, after its
// configuration changed, and every samlMetadataLifetime: once for the
// provider, whatever the origins requests name.
func (p *Provider) serviceProvider(r *http.Request, ip *domain.IdentityProvider) (*saml.ServiceProvider, error) {
	f := p.federation
	idp, err := f.samlMetadata(r.Context(), ip)
	if err != nil {
		return nil, err
	}
	cert, err := f.samlCertificate()
	if err != nil {
		return nil, err
	}
	base := p.proxies.RequestOrigin(r) + "/o/saml/" + ip.ID
	metadataURL, _ := url.Parse(base + "/metadata")
	acsURL, _ := url.Parse(base + "/acs")
	nameID := saml.UnspecifiedNameIDFormat
	if ip.Claims.Subject == samlNameID {
		nameID = saml.PersistentNameIDFormat
	}
	return &saml.ServiceProvider{
		EntityID: metadataURL.String(), Key: f.samlKey, Certificate: cert,
		MetadataURL: *metadataURL, AcsURL: *acsURL, IDPMetadata: idp,
		AuthnNameIDFormat:                nameID,
		AssertionConsumerServiceBindings: []string{saml.HTTPPostBinding},
		ReplayCache:                      assertionCache{store: p.store, issuer: idp.EntityID, now: f.now},
		Clock:                            dsig.NewFakeClock(serverClock{Clock: clockwork.NewRealClock(), now: f.now}),
		HTTPClient:                       f.client,
		RejectSHA1Signatures:             true,
		RequireSignedResponseForCBC:      true,
	}, nil
}

// samlMetadata returns the provider's metadata, reading it when it is
// not known, its configuration changed or it is older than
// samlMetadataLifetime.
func (f *federation) samlMetadata(ctx context.Context, ip *domain.IdentityProvider) (*saml.EntityDescriptor, error) {
	f.mu.Lock()
	m := f.saml[ip.ID]
	f.mu.Unlock()
	if m != nil && sameConfig(&m.config, ip) && f.now().Sub(m.fetched) < samlMetadataLifetime {
		return m.idp, nil
	}
	var idp *saml.EntityDescriptor
	var err error
	if ip.MetadataXML != "" {
		idp, err = samlsp.ParseMetadata([]byte(ip.MetadataXML))
	} else {
		u, _ := url.Parse(ip.MetadataURL)
		idp, err = samlsp.FetchMetadata(ctx, f.client, *u)
	}
	if err != nil {
		return nil, unavailable(fmt.Sprintf("the SAML metadata of %s could not be read", ip.Name), err)
	}
	f.mu.Lock()
	f.saml[ip.ID] = &samlMetadata{config: *ip, idp: idp, fetched: f.now()}
	f.mu.Unlock()
	return idp, nil
}

// samlCertificate is the self-signed certificate of the service
// provider's key: the same bytes on every instance with the same key (a
// fixed serial and validity, and RSA PKCS #1 v1.5 signatures are
// deterministic), so that the metadata an identity provider registered
// holds for all of them.
func (f *federation) samlCertificate() (*x509.Certificate, error) {
	f.samlCertOnce.Do(func() { f.samlCert, f.samlCertErr = f.newSAMLCertificate() })
	return f.samlCert, f.samlCertErr
}

func (f *federation) newSAMLCertificate() (*x509.Certificate, error) {
	sum := sha256.Sum256(f.samlKey.N.Bytes())
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetBytes(sum[:16]),
		Subject:      pkix.Name{CommonName: "Clinical data exchange SAML service provider"},
		NotBefore:    time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, &f.samlKey.PublicKey, f.samlKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// serverClock is the provider's clock as crewjam/saml reads time.
type serverClock struct {
	clockwork.Clock
	now func() time.Time
}

func (c serverClock) Now() time.Time                  { return c.now() }
func (c serverClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }
func (c serverClock) Until(t time.Time) time.Duration { return t.Sub(c.now()) }

// assertionCache is crewjam/saml's replay cache, in the database: an
// assertion id of the provider is accepted once, on any instance.
type assertionCache struct {
	store  Store
	issuer string
	now    func() time.Time
}

// Consume implements saml.AssertionReplayCache. crewjam/saml passes no
// context: the write gets its own, bounded.
func (c assertionCache) Consume(id string, expiresAt time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.store.UseAssertion(ctx, c.issuer+"\n"+id, expiresAt, c.now())
	if domain.IsCode(err, domain.CodeDuplicate) {
		return saml.ErrAssertionReplayed
	}
	return err
}

// samlNameID in a provider's claim map takes the stable user id from the
// persistent NameID of the assertion's subject.
const samlNameID = "NameID"

// startSAML returns where to send the browser: the provider's single
// sign-on service, with an AuthnRequest whose id the sign-in in progress
// keeps, and the state as RelayState.
func (p *Provider) startSAML(r *http.Request, ip *domain.IdentityProvider, state string, pending *domain.PendingSignIn) (string, error) {
	sp, err := p.serviceProvider(r, ip)
	if err != nil {
		return "", err
	}
	sso := sp.GetSSOBindingLocation(saml.HTTPRedirectBinding)
	if sso == "" {
		return "", domain.Errorf(domain.CodeUnavailable, "%s offers no single sign-on service with the HTTP-Redirect binding", ip.Name)
	}
	req, err := sp.MakeAuthenticationRequest(sso, saml.HTTPRedirectBinding, saml.HTTPPostBinding)
	if err != nil {
		return "", err
	}
	to, err := req.Redirect(state, sp)
	if err != nil {
		return "", err
	}
	pending.RequestID = req.ID
	return to.String(), nil
}

// samlProvider returns the SAML identity provider of a request's path.
func (p *Provider) samlProvider(r *http.Request) (*domain.IdentityProvider, error) {
	ip, err := p.users.IdentityProviderByID(r.Context(), r.PathValue("provider"))
	if err == nil && ip.Kind != domain.IdentitySAML {
		err = domain.Errorf(domain.CodeNotFound, "not a SAML identity provider")
	}
	return ip, err
}

// samlMetadata serves GET /o/saml/{provider}/metadata: the service
// provider's metadata, to register at the identity provider.
func (p *Provider) samlMetadata(w http.ResponseWriter, r *http.Request) {
	ip, err := p.samlProvider(r)
	var sp *saml.ServiceProvider
	if err == nil {
		sp, err = p.serviceProvider(r, ip)
	}
	if err != nil {
		p.federatedError(w, r, "", err)
		return
	}
	body, err := xml.MarshalIndent(sp.Metadata(), "", "  ")
	if err != nil {
		p.federatedError(w, r, "", err)
		return
	}
	w.Header().Set("Content-Type", "application/samlmetadata+xml")
	w.Header().Set("Vary", VaryForwarded)
	_, _ = w.Write(append([]byte(xml.Header), body...))
}

// samlACS serves POST /o/saml/{provider}/acs: the provider's answer,
// checked and accepted for its user, then the browser sent on to finish.
func (p *Provider) samlACS(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := r.ParseForm(); err != nil {
		p.federatedError(w, r, "", domain.Errorf(domain.CodeLogin, "the identity provider's answer is not a form"))
		return
	}
	state := r.PostForm.Get("RelayState")
	pending, err := p.store.PendingSignIn(ctx, sessionID(state), p.now())
	if err != nil || pending.Provider != r.PathValue("provider") || pending.UserID != 0 {
		if err != nil && !domain.IsCode(err, domain.CodeNotFound) {
			p.federatedError(w, r, "", err)
			return
		}
		p.federatedError(w, r, "", domain.Errorf(domain.CodeLogin, "this answer belongs to no sign-in started here, or to one that has expired or was already used: please start again"))
		return
	}
	ip, err := p.samlProvider(r)
	if err != nil {
		p.federatedError(w, r, pending.Next, err)
		return
	}
	authTime := p.now().UTC()
	id, err := p.samlIdentity(r, ip, pending)
	u, err := p.federatedUser(ctx, ip, id, err)
	if err == nil {
		err = p.store.AcceptPendingSignIn(ctx, pending.ID, u.ID, authTime, p.now())
		if domain.IsCode(err, domain.CodeNotFound) {
			err = domain.Errorf(domain.CodeLogin, "this sign-in has expired or was already used: please start again")
		}
	}
	if err != nil {
		p.federatedError(w, r, pending.Next, err)
		return
	}
	http.Redirect(w, r, "/o/saml/"+ip.ID+"/finish?state="+url.QueryEscape(state), http.StatusSeeOther)
}

// samlFinish serves GET /o/saml/{provider}/finish: the browser that
// started the sign-in signs in as the user its answer was accepted for.
func (p *Provider) samlFinish(w http.ResponseWriter, r *http.Request) {
	pending, err := p.takePending(r, r.PathValue("provider"), r.URL.Query().Get("state"), true)
	if err != nil {
		p.federatedError(w, r, "", err)
		return
	}
	p.finishFederated(w, r, pending.UserID, pending.AuthTime, pending.Next)
}

// samlIdentity checks the provider's answer (crewjam/saml, see above)
// and returns the identity it asserts.
func (p *Provider) samlIdentity(r *http.Request, ip *domain.IdentityProvider, pending *domain.PendingSignIn) (domain.FederatedIdentity, error) {
	sp, err := p.serviceProvider(r, ip)
	if err != nil {
		return domain.FederatedIdentity{}, err
	}
	assertion, err := sp.ParseResponse(r, []string{pending.RequestID})
	if err != nil {
		reason := err.Error()
		var invalid *saml.InvalidResponseError
		if errors.As(err, &invalid) && invalid.PrivateErr != nil {
			reason = invalid.PrivateErr.Error()
		}
		p.log.Info("a SAML answer was refused", "provider", ip.ID, "reason", truncatedText(reason, 300))
		if errors.Is(err, saml.ErrAssertionReplayed) {
			return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "this answer of %s was used already", ip.Name)
		}
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the answer of %s did not verify", ip.Name)
	}
	return samlAttributes(ip.Claims, assertion), nil
}

// The attributes an identity's parts are read from by default, by name
// or friendly name: eduPerson's and the LDAP schemas' OIDs, and their
// usual names.
var (
	samlSubjectNames = []string{"urn:oid:1.3.6.1.4.1.5923.1.1.1.6", "eduPersonPrincipalName"}
	samlEmailNames   = []string{"urn:oid:0.9.2342.19200300.100.1.3", "mail", "email", "emailAddress"}
	samlGivenNames   = []string{"urn:oid:2.5.4.42", "givenName"}
	samlFamilyNames  = []string{"urn:oid:2.5.4.4", "sn", "surname"}
)

// samlAttributes reads an identity out of an assertion, by the provider's
// claim map: the stable user id from eduPersonPrincipalName, else the
// persistent NameID (or only the one the map names); the email (counted
// verified: the institution's directory asserts its own addresses), the
// given name and sn.
func samlAttributes(m domain.ClaimMap, a *saml.Assertion) domain.FederatedIdentity {
	names := func(configured string, defaults []string) []string {
		if configured != "" {
			return []string{configured}
		}
		return defaults
	}
	id := domain.FederatedIdentity{
		Email:      samlAttribute(a, names(m.Email, samlEmailNames)),
		GivenName:  samlAttribute(a, names(m.GivenName, samlGivenNames)),
		FamilyName: samlAttribute(a, names(m.FamilyName, samlFamilyNames)),
	}
	id.EmailVerified = id.Email != ""
	if a.Issuer.Value != "" {
		id.Issuer = a.Issuer.Value
	}
	if m.Subject != samlNameID {
		id.Subject = samlAttribute(a, names(m.Subject, samlSubjectNames))
	}
	if id.Subject == "" && (m.Subject == "" || m.Subject == samlNameID) && a.Subject != nil && a.Subject.NameID != nil &&
		a.Subject.NameID.Format == string(saml.PersistentNameIDFormat) {
		id.Subject = a.Subject.NameID.Value
	}
	return id
}

// samlAttribute returns the first value of the first of the attributes
// an assertion has.
func samlAttribute(a *saml.Assertion, names []string) string {
	for _, name := range names {
		for _, st := range a.AttributeStatements {
			for _, attr := range st.Attributes {
				if (attr.Name == name || attr.FriendlyName == name) && len(attr.Values) > 0 {
					return attr.Values[0].Value
				}
			}
		}
	}
	return ""
}

var _ saml.AssertionReplayCache = assertionCache{}
