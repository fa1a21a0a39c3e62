package smartclient_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"exchange/domain"
	"exchange/smartclient"
	"exchange/smartclient/ehrtest"
)

func fast() *smartclient.Client {
	c := smartclient.New()
	c.Backoff = func(int) time.Duration { return time.Millisecond }
	return c
}

// TestGetRetriesTransientFailures: a lost connection, 429 and 5xx are
// tried again (Retries times), a refusal is not; an answer over the bound
// is refused, not read whole.
func TestGetRetriesTransientFailures(t *testing.T) {
	var calls atomic.Int32
	status := map[string][]int{"/flaky": {503, 429, 200}, "/gone": {404}, "/down": {500, 500, 500, 500, 500}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1)) - 1
		seq := status[r.URL.Path]
		if r.URL.Path == "/big" {
			_, _ = w.Write([]byte(strings.Repeat("x", 2048)))
			return
		}
		w.WriteHeader(seq[min(n, len(seq)-1)])
		_, _ = w.Write([]byte(`{"resourceType": "OperationOutcome", "issue": [{"code": "x", "diagnostics": "said so"}]}`))
	}))
	defer srv.Close()
	c := fast()
	token := &domain.EHRToken{AccessToken: "at", Expiry: time.Now().Add(time.Hour)}
	s := c.Open(context.Background(), domain.EHRClientConfig{TokenURL: srv.URL + "/token"}, token, nil)
	get := func(path string) error {
		calls.Store(0)
		_, err := s.Get(context.Background(), srv.URL+path, 1024)
		return err
	}
	if err := get("/flaky"); err != nil || calls.Load() != 3 {
		t.Errorf("flaky: %v after %d calls", err, calls.Load())
	}
	var e *domain.EHRError
	if err := get("/gone"); !errors.As(err, &e) || e.Status != 404 || e.Message != "said so" || calls.Load() != 1 {
		t.Errorf("gone: %v after %d calls", err, calls.Load())
	}
	if err := get("/down"); !errors.As(err, &e) || e.Status != 500 || calls.Load() != 4 {
		t.Errorf("down: %v after %d calls", err, calls.Load())
	}
	if err := get("/big"); domain.ErrorCode(err) != domain.CodeTooLong {
		t.Errorf("big: %v", err)
	}
}

// TestIDTokenChecked: an id_token is checked against the EHR's key set; one
// signed by another key refuses the exchange of the code.
func TestIDTokenChecked(t *testing.T) {
	dir := ehrtest.OneRecord(t)
	ehr := ehrtest.Start(t, dir)
	ehr.RedirectURI = "https://exchange.example.org/cb"
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	wrongKeys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys": [{"kty": "RSA", "kid": "test-ehr-key", "n": "` + base64.RawURLEncoding.EncodeToString(other.N.Bytes()) +
			`", "e": "` + base64.RawURLEncoding.EncodeToString(big.NewInt(int64(other.E)).Bytes()) + `"}]}`))
	}))
	defer wrongKeys.Close()
	c := fast()
	conf, err := c.Discover(context.Background(), ehr.Base)
	if err != nil {
		t.Fatal(err)
	}
	for _, jwks := range []string{conf.JWKSURI, wrongKeys.URL} {
		e := domain.EHRClientConfig{Issuer: ehr.Base, ClientID: ehr.ClientID, AuthorizeURL: conf.AuthorizationEndpoint, TokenURL: conf.TokenEndpoint,
			JWKSURI: jwks, RedirectURI: ehr.RedirectURI, Scopes: []string{"openid", "fhirUser", "launch/patient"}}
		ehr.SignIn(ehrtest.OneRecordPatient)
		verifier := strings.Repeat("v", 43)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
			Get(c.AuthorizeURL(e, strings.Repeat("s", 43), verifier))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, _ := url.Parse(resp.Header.Get("Location"))
		tok, err := c.Exchange(context.Background(), e, back.Query().Get("code"), verifier)
		switch {
		case jwks == conf.JWKSURI && (err != nil || tok.Patient != ehrtest.OneRecordPatient || !strings.HasSuffix(tok.FHIRUser, "/Patient/"+ehrtest.OneRecordPatient)):
			t.Errorf("the EHR's own keys: %+v %v", tok, err)
		case jwks != conf.JWKSURI && (err == nil || !strings.Contains(err.Error(), "id_token")):
			t.Errorf("another key set: %+v %v", tok, err)
		}
	}
}
