package oauth

import (
	"github.com/ory/fosite"
	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
)

// metrics are the authorization server's series: what the token endpoint
// issued and refused, and how password sign-ins ended. A nil *metrics
// counts nothing.
type metrics struct {
	issued  *prometheus.CounterVec
	refused *prometheus.CounterVec
	logins  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	ns := "exchange"
	m := &metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "oauth_tokens_issued_total",
			Help: "Token endpoint answers that issued tokens, by grant: authorization_code (a sign-in's tokens), refresh_token (a refresh) or token_exchange (an EHR's ID token exchanged)."}, []string{"grant"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "oauth_token_refusals_total",
			Help: "Token endpoint requests refused, by OAuth error (invalid_grant, invalid_client, ...)."}, []string{"error"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "logins_total",
			Help: "Sign-ins, by password or through an identity provider, by outcome: success, failure (wrong credentials, or refused), throttled, error."}, []string{"outcome"}),
	}
	reg.MustRegister(m.issued, m.refused, m.logins)
	return m
}

// tokenIssued counts a token response of the request's grant.
func (m *metrics) tokenIssued(ar fosite.AccessRequester) {
	if m == nil {
		return
	}
	grant := "other"
	for _, g := range []string{"authorization_code", "refresh_token"} {
		if ar.GetGrantTypes().ExactOne(g) {
			grant = g
		}
	}
	m.tokenIssuedFor(grant)
}

// tokenIssuedFor counts a token response of a grant, by name.
func (m *metrics) tokenIssuedFor(grant string) {
	if m == nil {
		return
	}
	m.issued.WithLabelValues(grant).Inc()
}

// tokenErrors bound the error label to RFC 6749's and fosite's names.
var tokenErrors = map[string]bool{
	"invalid_request": true, "invalid_client": true, "invalid_grant": true, "unauthorized_client": true,
	"unsupported_grant_type": true, "invalid_scope": true, "access_denied": true, "server_error": true,
	"request_unauthorized": true, "token_inactive": true, "request_forbidden": true,
	"invalid_target": true, "temporarily_unavailable": true,
}

// tokenRefused counts a refused token request by its OAuth error.
func (m *metrics) tokenRefused(err error) {
	if m == nil {
		return
	}
	m.tokenRefusedWith(fosite.ErrorToRFC6749Error(err).ErrorField)
}

// tokenRefusedWith counts a refused token request by its OAuth error's
// name.
func (m *metrics) tokenRefusedWith(name string) {
	if m == nil {
		return
	}
	if !tokenErrors[name] {
		name = "other"
	}
	m.refused.WithLabelValues(name).Inc()
}

// login counts a password sign-in by how it ended.
func (m *metrics) login(err error) {
	if m == nil {
		return
	}
	outcome := "success"
	switch domain.ErrorCode(err) {
	case "":
	case domain.CodeLogin:
		outcome = "failure"
	case domain.CodeThrottled:
		outcome = "throttled"
	default:
		outcome = "error"
	}
	m.logins.WithLabelValues(outcome).Inc()
}
