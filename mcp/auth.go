package mcp

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

type tokenKey struct{}

// WithToken returns a context whose tool calls act as the holder of the
// service access token: the stdio server's context, and what the /mcp
// middleware sets per request.
func WithToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

func tokenFrom(ctx context.Context) string {
	t, _ := ctx.Value(tokenKey{}).(string)
	return t
}

// validationTTL is how long a validated token is trusted without asking
// the service again: revoking a token takes effect within it.
const validationTTL = 30 * time.Second

// maxCachedTokens bounds the validation cache.
const maxCachedTokens = 10000

// validator checks bearer tokens with the service: introspection (when
// the gateway has its client secret) for active, client_id and aud, then
// userinfo, which the token must be good for. Successes are cached for
// validationTTL (less when the token expires sooner); failures never are.
type validator struct {
	svc             *service
	requireAudience bool
	now             func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]time.Time // SHA-256 of a valid token: until when it is trusted
}

// errNotForGateway: introspection could not confirm the token was issued
// to the gateway's client, or is another client's mcp grant (mcpGrant),
// and MCP_REQUIRE_AUDIENCE demands it.
var errNotForGateway = &serviceError{kind: failRejected, op: "introspection", detail: "the token was not issued for this gateway, nor granted the scope mcp alone with read scopes"}

// errInactive: introspection says the token is not active.
var errInactive = &serviceError{kind: failRejected, op: "introspection", detail: "the token is expired, revoked or unknown"}

// validate returns nil when the service accepts the token, or the
// *serviceError of the check that failed.
func (v *validator) validate(ctx context.Context, token string) error {
	key := sha256.Sum256([]byte(token))
	now := v.now()
	v.mu.Lock()
	until, ok := v.cache[key]
	v.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	expires := now.Add(validationTTL)
	if v.svc.clientSecret != "" {
		in, err := v.svc.introspect(ctx, token)
		if err != nil {
			return err
		}
		if !in.Active {
			return errInactive
		}
		forGateway := in.ClientID == v.svc.clientID || slices.Contains(in.Audience, v.svc.clientID) || mcpGrant(in.Scope)
		if v.requireAudience && !forGateway {
			return errNotForGateway
		}
		if in.Expires > 0 && time.Unix(in.Expires, 0).Before(expires) {
			expires = time.Unix(in.Expires, 0)
		}
	}
	if err := v.svc.userinfo(ctx, token); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= maxCachedTokens {
		for k, until := range v.cache {
			if !now.Before(until) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCachedTokens {
			clear(v.cache)
		}
	}
	v.cache[key] = expires
	return nil
}

// mcpScope is the scope the exchange grants to the clients a user trusts
// with the gateway (a JupyterHub, a notebook server): their tokens are
// accepted as the gateway's own.
const mcpScope = "mcp"

// mcpGrant reports whether a token's scopes (space-separated) are an mcp
// grant within the gateway's read-only limits: mcp, and nothing beyond
// what the gateway asks the service for itself (serviceScopes), so that
// a token of another client that could write is not taken for one of the
// gateway's.
func mcpGrant(scope string) bool {
	scopes := strings.Fields(scope)
	allowed := append(strings.Fields(serviceScopes), mcpScope)
	return slices.Contains(scopes, mcpScope) && !slices.ContainsFunc(scopes, func(s string) bool { return !slices.Contains(allowed, s) })
}

// retryAfterSeconds is the Retry-After of a 503 from /mcp.
const retryAfterSeconds = "10"

// requireToken guards /mcp: a valid bearer token of the service, or 401
// (the service refused it, or there is none), 503 (the service is
// unreachable, throttling or failing, when the token is checked or during
// the call) or 500 (the gateway is misconfigured). Only a 401 carries
// WWW-Authenticate.
func (g *Gateway) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+g.metadataURL+`"`)
			writeJSON(w, http.StatusUnauthorized, oauthErrorBody{Error: "invalid_request", Description: "This endpoint needs a bearer token: sign in through the gateway's OAuth flow."})
			return
		}
		if err := g.validator.validate(r.Context(), token); err != nil {
			g.writeValidationError(w, err)
			return
		}
		// A token validated from the cache does not ask the service: an
		// outage shows only in the call itself, and is answered as one.
		ctx, outcome := withOutcome(WithToken(r.Context(), token))
		held := newHeldResponse(w)
		next.ServeHTTP(held, r.WithContext(ctx))
		if outcome.unavailable.Load() && !held.streamed() {
			writeUnavailable(w, "The service is unavailable; try again shortly.")
			return
		}
		held.release()
	})
}

// writeUnavailable answers the 503 of a service that does not answer, or
// answers 429 or 5xx: Retry-After and an OAuth-style JSON error, without
// WWW-Authenticate (the token may well be good).
func writeUnavailable(w http.ResponseWriter, desc string) {
	w.Header().Set("Retry-After", retryAfterSeconds)
	writeJSON(w, http.StatusServiceUnavailable, oauthErrorBody{Error: "temporarily_unavailable", Description: desc})
}

func (g *Gateway) writeValidationError(w http.ResponseWriter, err error) {
	var se *serviceError
	errors.As(err, &se)
	switch failureOf(err) {
	case failRejected:
		desc := "The service rejected the access token."
		if se != nil && se.detail != "" {
			desc = "The service rejected the access token: " + se.detail + "."
		}
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="`+strings.ReplaceAll(desc, `"`, "'")+`", resource_metadata="`+g.metadataURL+`"`)
		writeJSON(w, http.StatusUnauthorized, oauthErrorBody{Error: "invalid_token", Description: desc})
	case failMisconfigured:
		g.log.Error("token validation failed: the gateway is misconfigured", "error", err)
		writeJSON(w, http.StatusInternalServerError, oauthErrorBody{Error: "server_error",
			Description: "The gateway cannot validate tokens with the service it is configured for; an operator must check its settings."})
	default:
		g.log.Warn("token validation failed: the service is unavailable", "error", err)
		writeUnavailable(w, "The service that validates tokens is unavailable; try again shortly.")
	}
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// logger returns the gateway's logger, or a silent one.
func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
