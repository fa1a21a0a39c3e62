package oauthtest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/crewjam/saml"
	"github.com/crewjam/saml/logger"
	"github.com/crewjam/saml/samlidp"
)

// SAMLIdP is crewjam/saml's samlidp: a SAML 2.0 identity provider with
// users and service providers registered through its admin endpoints.
// Tests may change each assertion before it is signed (Assertion).
type SAMLIdP struct {
	URL    string // its base: metadata at URL/metadata
	Server *samlidp.Server

	mu sync.Mutex
	// Assertion, when set, changes each assertion before the provider
	// signs it (another audience, another lifetime).
	Assertion func(a *saml.Assertion)
}

// NewSAMLIdP builds the provider served at base, with a new key.
func NewSAMLIdP(base string) (*SAMLIdP, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test SAML IdP"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	srv, err := samlidp.New(samlidp.Options{URL: *u, Key: key, Certificate: cert, Store: &samlidp.MemoryStore{},
		Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		return nil, err
	}
	idp := &SAMLIdP{URL: base, Server: srv}
	srv.IDP.AssertionMaker = assertionHook{idp}
	return idp, nil
}

var _ logger.Interface = (*log.Logger)(nil)

// StartSAML runs a provider on a loopback port until the test ends.
func StartSAML(t testing.TB) *SAMLIdP {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	idp, err := NewSAMLIdP("http://" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = idp.Server
	srv.Start()
	t.Cleanup(srv.Close)
	return idp
}

// Configure applies a change to the provider's hooks under its lock.
func (p *SAMLIdP) Configure(change func(p *SAMLIdP)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(p)
}

// assertionHook makes samlidp's assertions, then lets the test change
// them.
type assertionHook struct{ idp *SAMLIdP }

func (h assertionHook) MakeAssertion(req *saml.IdpAuthnRequest, session *saml.Session) error {
	if err := (saml.DefaultAssertionMaker{}).MakeAssertion(req, session); err != nil {
		return err
	}
	h.idp.mu.Lock()
	change := h.idp.Assertion
	h.idp.mu.Unlock()
	if change != nil && req.Assertion != nil {
		change(req.Assertion)
	}
	return nil
}

// SAMLUser is a user of the provider.
type SAMLUser struct {
	Name      string `json:"name"`
	Password  string `json:"password"`
	Email     string `json:"email,omitempty"`
	GivenName string `json:"given_name,omitempty"`
	Surname   string `json:"surname,omitempty"`
}

// AddUser creates a user through the admin endpoint.
func (p *SAMLIdP) AddUser(u SAMLUser) error {
	body, _ := json.Marshal(u)
	return p.put("/users/"+u.Name, body)
}

// RegisterServiceProvider registers a service provider by its metadata,
// read from metadataURL. Unless encrypt, its encryption key is left out:
// the provider then sends its assertions in the clear (what tests that
// tamper with them need).
func (p *SAMLIdP) RegisterServiceProvider(id, metadataURL string, encrypt bool) error {
	resp, err := http.Get(metadataURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	metadata, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("service provider metadata: %d %v", resp.StatusCode, err)
	}
	if !encrypt {
		metadata = encryptionKey.ReplaceAll(metadata, nil)
	}
	return p.put("/services/"+id, metadata)
}

// encryptionKey is the encryption KeyDescriptor of a service provider's
// metadata.
var encryptionKey = regexp.MustCompile(`(?s)<(\w+:)?KeyDescriptor use="encryption">.*?</(\w+:)?KeyDescriptor>`)

func (p *SAMLIdP) put(path string, body []byte) error {
	req, err := http.NewRequest(http.MethodPut, p.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT %s: %d", path, resp.StatusCode)
	}
	return nil
}
