package oauth_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth/oauthtest"
)

// samlFederated is an exchange with one SAML identity provider,
// "campus": crewjam/saml's samlidp, which knows the exchange's service
// provider by its metadata and has the user alice.
type samlFederated struct {
	federated
	saml *oauthtest.SAMLIdP
}

const campusPassword = "alice-at-campus"

// startSAMLFederated starts them; the provider encrypts its assertions
// only when the test says so (encrypt), so that other tests can tamper
// with them.
func startSAMLFederated(t *testing.T, change func(p *domain.IdentityProvider), encrypt ...bool) *samlFederated {
	t.Helper()
	idp := oauthtest.StartSAML(t)
	ip := domain.IdentityProvider{ID: "campus", Kind: domain.IdentitySAML, Name: "Campus", MetadataURL: idp.URL + "/metadata",
		FirstSignIn: domain.FirstSignInCreate}
	if change != nil {
		change(&ip)
	}
	if err := ip.Normalize(); err != nil {
		t.Fatal(err)
	}
	env := handlerstest.StartWith(t, handlerstest.Options{Audit: true, IdentityProviders: []domain.IdentityProvider{ip}})
	if err := idp.RegisterServiceProvider("exchange", env.URL+"/o/saml/campus/metadata", len(encrypt) > 0 && encrypt[0]); err != nil {
		t.Fatal(err)
	}
	if err := idp.AddUser(oauthtest.SAMLUser{Name: "alice", Password: campusPassword, Email: "alice@campus.example", GivenName: "Alice", Surname: "Liddell"}); err != nil {
		t.Fatal(err)
	}
	return &samlFederated{federated: federated{env: env}, saml: idp}
}

// answer runs a sign-in up to the provider's answer: the login page's
// button, the provider's login form with alice's password (unless the
// browser is signed in there); it returns the answer's form (action and
// fields) without posting it.
func (f *samlFederated) answer(t *testing.T, b *handlerstest.Browser, next string) (string, url.Values) {
	t.Helper()
	_, page := b.Do("GET", f.env.URL+"/o/login/?next="+url.QueryEscape(next), nil)
	resp, page := b.SubmitForm(page, providerForm(t, page, "/o/login/campus/"), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `name="password"`) && !strings.Contains(page, "SAMLResponse") {
		t.Fatalf("the provider's login form: %d\n%s", resp.StatusCode, page)
	}
	if strings.Contains(page, `name="password"`) {
		resp, page = b.Submit(page, url.Values{"user": {"alice"}, "password": {campusPassword}})
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "SAMLResponse") {
		t.Fatalf("the provider's answer: %d\n%s", resp.StatusCode, page)
	}
	action, fields := handlerstest.Form(t, page)
	if !strings.HasSuffix(action, "/o/saml/campus/acs") {
		t.Fatalf("the answer goes to %s", action)
	}
	return action, fields
}

// editResponse changes the XML of an answer's SAMLResponse.
func editResponse(t *testing.T, fields url.Values, edit func(doc *etree.Document)) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(fields.Get("SAMLResponse"))
	if err != nil {
		t.Fatal(err)
	}
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(raw); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	out, err := doc.WriteToBytes()
	if err != nil {
		t.Fatal(err)
	}
	fields.Set("SAMLResponse", base64.StdEncoding.EncodeToString(out))
}

// setAttribute sets the first value of an attribute of every assertion
// of doc.
func setAttribute(doc *etree.Document, friendlyName, value string) {
	for _, a := range doc.FindElements("//Attribute[@FriendlyName='" + friendlyName + "']") {
		if v := a.FindElement("AttributeValue"); v != nil {
			v.SetText(value)
		}
	}
}

// TestSAMLSignIn: alice signs in through the campus IdP; a practitioner
// is created from her attributes, linked by (entity id,
// eduPersonPrincipalName); the service provider publishes its metadata,
// with the key the provider encrypts her assertion to.
func TestSAMLSignIn(t *testing.T) {
	f := startSAMLFederated(t, nil, true)
	resp, err := http.Get(f.env.URL + "/o/saml/campus/metadata")
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/samlmetadata+xml" {
		t.Fatalf("metadata: %v %v", resp, err)
	}
	resp.Body.Close()
	b := f.browser(t)
	action, fields := f.answer(t, b, "")
	if raw, _ := base64.StdEncoding.DecodeString(fields.Get("SAMLResponse")); !strings.Contains(string(raw), "EncryptedAssertion") {
		t.Errorf("the assertion is not encrypted:\n%s", raw)
	}
	resp, page := b.Do("POST", action, fields)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "You are signed in as alice@campus.example") {
		t.Fatalf("after the answer: %d\n%s", resp.StatusCode, page)
	}
	u, err := f.env.DB.UserByEmail(context.Background(), "alice@campus.example")
	if err != nil || u.FirstName != "Alice" || u.LastName != "Liddell" || u.Type != domain.UserPractitioner {
		t.Fatalf("account %+v %v", u, err)
	}
	links, _ := f.env.DB.IdentityLinksOfUser(context.Background(), u.ID)
	if len(links) != 1 || links[0].Issuer != f.saml.URL+"/metadata" || links[0].Subject != "alice@campus.example" || links[0].Provider != "campus" {
		t.Errorf("links %+v", links)
	}
	// The answer was good once.
	if resp, _ := b.Do("POST", action, fields); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the answer posted again: %d", resp.StatusCode)
	}
	if events := f.signInEvents(t); len(events) != 1 || outcomeOf(events[0]) != "success" {
		t.Errorf("events %v", events)
	}
}

// TestSAMLRefusals: answers the service provider must not believe sign
// no one in: tampered, unsigned, wrapped, for another audience or
// recipient, expired, for another request.
func TestSAMLRefusals(t *testing.T) {
	cases := []struct {
		name string
		idp  func(p *oauthtest.SAMLIdP)
		edit func(doc *etree.Document)
		// late moves the exchange's clock before the answer is posted.
		late time.Duration
	}{
		{name: "tampered assertion", edit: func(doc *etree.Document) {
			setAttribute(doc, "eduPersonPrincipalName", "chief@campus.example")
			setAttribute(doc, "mail", "chief@campus.example")
		}},
		{name: "unsigned", edit: func(doc *etree.Document) {
			for _, s := range doc.FindElements("//Signature") {
				s.Parent().RemoveChild(s)
			}
		}},
		{name: "signature wrapping", edit: func(doc *etree.Document) {
			// XSW: an unsigned, altered copy of the assertion beside the
			// signed original, which stays valid.
			signed := doc.FindElement("//Assertion")
			evil := signed.Copy()
			evil.CreateAttr("ID", "_evil")
			for _, s := range evil.FindElements("Signature") {
				evil.RemoveChild(s)
			}
			for _, a := range evil.FindElements(".//Attribute[@FriendlyName='eduPersonPrincipalName']") {
				a.FindElement("AttributeValue").SetText("chief@campus.example")
			}
			signed.Parent().InsertChildAt(signed.Index(), evil)
		}},
		{name: "wrong audience", idp: func(p *oauthtest.SAMLIdP) {
			p.Assertion = func(a *saml.Assertion) {
				a.Conditions.AudienceRestrictions = []saml.AudienceRestriction{{Audience: saml.Audience{Value: "https://other-sp.example/metadata"}}}
			}
		}},
		{name: "wrong recipient", idp: func(p *oauthtest.SAMLIdP) {
			p.Assertion = func(a *saml.Assertion) {
				a.Subject.SubjectConfirmations[0].SubjectConfirmationData.Recipient = "https://other-sp.example/acs"
			}
		}},
		{name: "not yet valid", idp: func(p *oauthtest.SAMLIdP) {
			p.Assertion = func(a *saml.Assertion) { a.Conditions.NotBefore = time.Now().Add(time.Hour) }
		}},
		// Later than the assertion's NotOnOrAfter and the clock skew
		// allowed, before the sign-in in progress expires.
		{name: "expired", late: 9 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startSAMLFederated(t, nil)
			if c.idp != nil {
				f.saml.Configure(c.idp)
			}
			b := f.browser(t)
			action, fields := f.answer(t, b, "")
			if c.edit != nil {
				editResponse(t, fields, c.edit)
			}
			f.env.Clock.Advance(c.late)
			resp, page := b.Do("POST", action, fields)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "did not verify") {
				t.Fatalf("want 401 'did not verify', got %d:\n%s", resp.StatusCode, page)
			}
			if who := f.signedInAs(t, b); who != "" {
				t.Fatalf("signed in as %s", who)
			}
			for _, email := range []string{"alice@campus.example", "chief@campus.example"} {
				if _, err := f.env.DB.UserByEmail(context.Background(), email); !domain.IsCode(err, domain.CodeNotFound) {
					t.Errorf("a refused answer created %s: %v", email, err)
				}
			}
			if events := f.signInEvents(t); len(events) != 1 || outcomeOf(events[0]) != "error" {
				t.Errorf("events %v", events)
			}
		})
	}
}

// TestSAMLAnswerForAnotherRequest: an answer is good only with the
// RelayState of the request it answers (InResponseTo), in the browser
// that sent that request.
func TestSAMLAnswerForAnotherRequest(t *testing.T) {
	f := startSAMLFederated(t, nil)
	b := f.browser(t)
	action, first := f.answer(t, b, "")
	_, second := f.answer(t, b, "")
	first.Set("RelayState", second.Get("RelayState"))
	if resp, page := b.Do("POST", action, first); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "did not verify") {
		t.Fatalf("an answer to another request: %d\n%s", resp.StatusCode, page)
	}
	// An answer carried to another browser is accepted for alice but
	// signs that browser in as no one.
	other := f.browser(t)
	_, third := f.answer(t, b, "")
	resp, page := other.Do("POST", action, third)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "another browser") {
		t.Fatalf("another browser: %d\n%s", resp.StatusCode, page)
	}
	if who := f.signedInAs(t, other); who != "" {
		t.Fatalf("signed in as %s", who)
	}
}

// TestSAMLReplayedAssertion: an assertion is accepted once, even when its
// first use was refused after it verified: the replay cache in the
// database remembers it for every instance.
func TestSAMLReplayedAssertion(t *testing.T) {
	f := startSAMLFederated(t, func(p *domain.IdentityProvider) { p.FirstSignIn = domain.FirstSignInInvited })
	b := f.browser(t)
	action, fields := f.answer(t, b, "")
	if resp, page := b.Do("POST", action, fields); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "invited") {
		t.Fatalf("uninvited: %d\n%s", resp.StatusCode, page)
	}
	super := f.env.Practitioner(t, "admin@campus.example", true)
	actor, _ := f.env.Service.Actor(context.Background(), super.ID)
	if _, err := f.env.Service.InviteToIdentityProvider(context.Background(), actor, "campus", "alice@campus.example"); err != nil {
		t.Fatal(err)
	}
	resp, page := b.Do("POST", action, fields)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "was used already") {
		t.Fatalf("the replayed assertion: %d\n%s", resp.StatusCode, page)
	}
	// A new answer signs her in.
	action, fields = f.answer(t, b, "")
	if _, page := b.Do("POST", action, fields); !strings.Contains(page, "You are signed in as alice@campus.example") {
		t.Fatalf("a fresh answer:\n%s", page)
	}
}

// TestSAMLAttributeMapping: a provider whose stable id is the persistent
// NameID, and whose attributes have other names.
func TestSAMLAttributeMapping(t *testing.T) {
	f := startSAMLFederated(t, func(p *domain.IdentityProvider) {
		p.Claims = domain.ClaimMap{Subject: "NameID", Email: "uid", GivenName: "cn"}
	})
	f.saml.Configure(func(p *oauthtest.SAMLIdP) {
		p.Assertion = func(a *saml.Assertion) {
			a.Subject.NameID = &saml.NameID{Format: string(saml.PersistentNameIDFormat), Value: "opaque-4711"}
		}
	})
	if err := f.saml.AddUser(oauthtest.SAMLUser{Name: "bob@campus.example", Password: campusPassword}); err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	_, page := b.Do("GET", f.env.URL+"/o/login/", nil)
	_, page = b.SubmitForm(page, providerForm(t, page, "/o/login/campus/"), nil)
	_, page = b.Submit(page, url.Values{"user": {"bob@campus.example"}, "password": {campusPassword}})
	action, fields := handlerstest.Form(t, page)
	if _, page := b.Do("POST", action, fields); !strings.Contains(page, "You are signed in as bob@campus.example") {
		t.Fatalf("sign-in:\n%s", page)
	}
	u, _ := f.env.DB.UserByEmail(context.Background(), "bob@campus.example")
	if links, _ := f.env.DB.IdentityLinksOfUser(context.Background(), u.ID); len(links) != 1 || links[0].Subject != "opaque-4711" {
		t.Errorf("links %+v", links)
	}
}

// TestSAMLProviderClaimingAnotherProvidersEntityID: a second SAML
// provider, configured by a superuser from metadata its own operator
// controls, declares the entity id of the first one and asserts the
// stable id of an account linked through the first: it does not open
// that account (identity provider mix-up), it only says which provider
// to use. The first still signs the account in.
func TestSAMLProviderClaimingAnotherProvidersEntityID(t *testing.T) {
	campus := oauthtest.StartSAML(t)
	rogue := oauthtest.StartSAML(t)
	rogue.Server.IDP.MetadataURL = campus.Server.IDP.MetadataURL // its entity id, and its assertions' Issuer
	var ips []domain.IdentityProvider
	for id, idp := range map[string]*oauthtest.SAMLIdP{"campus": campus, "rogue": rogue} {
		ip := domain.IdentityProvider{ID: id, Kind: domain.IdentitySAML, Name: id, MetadataURL: idp.URL + "/metadata", FirstSignIn: domain.FirstSignInCreate}
		if err := ip.Normalize(); err != nil {
			t.Fatal(err)
		}
		ips = append(ips, ip)
	}
	env := handlerstest.StartWith(t, handlerstest.Options{IdentityProviders: ips})
	signIn := func(id string, idp *oauthtest.SAMLIdP) string {
		if err := idp.RegisterServiceProvider("exchange", env.URL+"/o/saml/"+id+"/metadata", false); err != nil {
			t.Fatal(err)
		}
		if err := idp.AddUser(oauthtest.SAMLUser{Name: "alice", Password: campusPassword, Email: "alice@campus.example"}); err != nil {
			t.Fatal(err)
		}
		b := handlerstest.NewBrowser(t, nil)
		_, page := b.Do("GET", env.URL+"/o/login/", nil)
		_, page = b.SubmitForm(page, providerForm(t, page, "/o/login/"+id+"/"), nil)
		_, page = b.Submit(page, url.Values{"user": {"alice"}, "password": {campusPassword}})
		action, fields := handlerstest.Form(t, page)
		_, page = b.Do("POST", action, fields)
		return page
	}
	if page := signIn("campus", campus); !strings.Contains(page, "You are signed in as alice@campus.example") {
		t.Fatalf("through campus:\n%s", page)
	}
	if page := signIn("rogue", rogue); strings.Contains(page, "You are signed in") {
		t.Fatalf("a provider claiming campus's entity id opened alice's account:\n%s", page)
	}
}

// TestSAMLMetadataIsReadOncePerProvider: the service provider is built
// for each origin a request names (its Host), which anyone chooses; the
// identity provider's metadata is read once for the provider, not once
// per origin, and nothing is kept per origin: requests naming ever new
// hosts neither grow the server's memory nor make it fetch the
// provider's metadata again and again.
func TestSAMLMetadataIsReadOncePerProvider(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	idp, err := oauthtest.NewSAMLIdP("http://" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int32
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metadata" {
			fetches.Add(1)
		}
		idp.Server.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	ip := domain.IdentityProvider{ID: "campus", Kind: domain.IdentitySAML, Name: "Campus", MetadataURL: idp.URL + "/metadata"}
	if err := ip.Normalize(); err != nil {
		t.Fatal(err)
	}
	env := handlerstest.StartWith(t, handlerstest.Options{IdentityProviders: []domain.IdentityProvider{ip}})
	for i := range 20 {
		host := fmt.Sprintf("h%d.example", i)
		req, _ := http.NewRequest("GET", env.URL+"/o/saml/campus/metadata", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `entityID="http://`+host+`/o/saml/campus/metadata"`) {
			t.Fatalf("metadata for %s: %d\n%s", host, resp.StatusCode, body)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the provider's metadata was read %d times for 20 origins, want once", n)
	}
}
