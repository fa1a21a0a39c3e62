package handlers_test

import (
	"testing"

	"exchange/handlers/handlerstest"
)

// The FHIR discovery documents and list links take X-Forwarded-Proto and
// -Host from a trusted proxy only (TRUSTED_PROXIES): from anyone else they
// would let a client put its own host into URLs that others are given.
func TestForwardedOriginOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	forwarded := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "attacker.example"}
	for _, c := range []struct {
		trusted, want string
	}{
		{"", ""},
		{"10.0.0.0/8", ""},
		{"127.0.0.1", "https://attacker.example"},
	} {
		env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: c.trusted})
		want := c.want
		if want == "" {
			want = env.URL
		}
		_, smart := handlerstest.SendTo(t, "GET", env.URL+"/FHIR/R5/.well-known/smart-configuration", "", nil, forwarded)
		if smart["token_endpoint"] != want+"/o/token/" {
			t.Errorf("TRUSTED_PROXIES=%q: token_endpoint %v, want %s/o/token/", c.trusted, smart["token_endpoint"], want)
		}
		_, metadata := handlerstest.SendTo(t, "GET", env.URL+"/FHIR/R5/metadata", "", nil, forwarded)
		if impl, _ := metadata["implementation"].(map[string]any); impl["url"] != want+"/FHIR/R5" {
			t.Errorf("TRUSTED_PROXIES=%q: implementation %v, want url %s/FHIR/R5", c.trusted, metadata["implementation"], want)
		}
	}
}
