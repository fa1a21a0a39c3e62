// Package mcp is the MCP gateway: it lets assistant clients (Claude,
// ChatGPT connectors, IDEs) query the exchange as the user who signed in,
// through tools built on github.com/mark3labs/mcp-go.
//
// It owns four things:
//
//   - An OAuth broker towards the assistant client: protected resource
//     metadata (RFC 9728), authorization server metadata (RFC 8414),
//     dynamic registration of public clients (RFC 7591), and the
//     authorization code grant with PKCE, relayed to the exchange's own
//     /o/authorize/ with the gateway's confidential client. The broker is
//     stateless: client registrations, pending authorizations, codes and
//     wrapped refresh tokens are sealed with XChaCha20-Poly1305 under a key
//     derived from MCP_BROKER_KEY, each with a kind tag (the AEAD's
//     additional data, so one kind never opens as another) and a lifetime.
//     The gateway's code holds the exchange's code, redeemed only when the
//     client redeems the gateway's: the exchange's single use of codes and
//     its refresh token rotation apply unchanged. A forwarded flow is
//     bound to the browser that approved it (binding.go): the callback
//     answers only a browser holding the flow's cookie, once, and anywhere
//     else shows an error page and redirects nowhere. The gateway asks the
//     exchange for read scopes only, and hands a client no token granted
//     more. docs/gateway-security.md reviews every sealed value and
//     cookie: what each is bound to, how long it lives, where it is
//     checked.
//   - The user's consent to each client (approval.go): the exchange trusts
//     the gateway's one client, so /authorize asks the user on the
//     gateway's own approval page before it forwards, CSRF-protected with a
//     sealed double-submit cookie and never framed, and remembers an Allow
//     per client id and redirect URI in a sealed browser cookie.
//   - Token validation on every /mcp request: the exchange's introspection
//     (active, client_id, aud) and userinfo, cached for 30 seconds. A
//     refused token is a 401 with WWW-Authenticate; an unreachable,
//     throttling or failing exchange a 503 with Retry-After; an answer that
//     shows the gateway is misconfigured (404, not JSON, invalid_client) a
//     500. The 5xx carry an OAuth-style JSON error and no WWW-Authenticate.
//     An outage met during a tool call (the token validated from the cache)
//     is the same 503; other faults reach the client without the
//     service's address or Go's error text (faults.go). /health is
//     liveness; /ready reports whether the service is ready and accepts
//     the gateway's credentials. One middleware (metrics.go) gives each
//     request its id, passed on to the exchange with the calls it makes,
//     counts it, and logs a line; /metrics adds tool calls by tool and
//     outcome and the calls to the exchange by endpoint and status.
//   - The tools: studies, patients, observations, Open mHealth and IEEE 1752 schemas
//     (also MCP resources) and FHIR capabilities, each a constructor that
//     returns (mcp.Tool, server.ToolHandlerFunc). They call the exchange's
//     admin API and FHIR interface with the user's own token, so the user
//     sees exactly what the exchange lets them see; the gateway holds no
//     data. Search parameters are checked against the exchange's
//     CapabilityStatement before they are sent; results are slim and
//     bounded, with totals, has_more and cursors instead of raw Bundles.
//     Mistakes the user can fix are tool errors; faults are Go errors.
//
// The MCP endpoint is mcp-go's Streamable HTTP handler, stateless, on
// net/http; NewToolServer serves the same tools over stdio.
package mcp
