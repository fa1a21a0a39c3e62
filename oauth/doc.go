// Package oauth is the exchange's OAuth 2.0 authorization server and OpenID
// Connect provider, built on ory/fosite and served under /o/.
//
// It owns the grant (authorization code with PKCE S256 only, refresh tokens
// with rotation), the server-rendered login and consent pages, the login
// session cookie, introspection, revocation, userinfo, discovery and the
// JWKS, client registration, the patient authorization codes handed out as
// invitation links, and the bearer tokens printed for scripts.
//
// Design principles:
//
//   - fosite does the protocol; this package wires it behind storage
//     interfaces (Store, implemented by package repo on MongoDB) the way
//     ory/hydra does, and returns fosite's sentinel errors from storage so
//     fosite can tell "not found" from "used" (refresh token reuse revokes
//     the whole grant).
//   - Errors on the protocol endpoints are written only through fosite's
//     writers; the pages render their own accessible error messages.
//   - The handler is plain net/http, mounted by package handlers; nothing
//     here knows about Fiber.
package oauth
