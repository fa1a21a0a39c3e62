package oauth

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies is the TRUSTED_PROXIES setting: the peers (reverse
// proxies, load balancers) whose forwarding headers the exchange believes.
// Any other peer's X-Forwarded-For, Forwarded, X-Forwarded-Proto and
// X-Forwarded-Host are ignored, so a client can choose neither the address
// its sign-in attempts are throttled under nor the origin that discovery
// documents, ID tokens and cookie flags are built from. The zero value
// trusts no peer: the peer's own address is the client's.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies parses a list of CIDR prefixes and addresses (an
// address alone is a /32 or /128) separated by commas or spaces.
func ParseTrustedProxies(list string) (TrustedProxies, error) {
	var t TrustedProxies
	for _, item := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return TrustedProxies{}, fmt.Errorf("%q is neither a CIDR prefix nor an IP address", item)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// Trusts reports whether a is one of the trusted proxies.
func (t TrustedProxies) Trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header returns every value of a request header, across repeated lines:
// http.Header.Values is one.
type Header func(name string) []string

// ClientAddress returns the address of the client behind a request that
// came from peer (a RemoteAddr, "ip:port" or "ip"). Unless the peer is a
// trusted proxy, that is the peer. From a trusted proxy it is the
// rightmost hop of X-Forwarded-For (or, without one, of Forwarded's for=
// parameters) that is not itself a trusted proxy: the address the outermost
// trusted proxy saw. Everything left of it was written by the client and is
// ignored; an unreadable hop (garbage, "unknown", an obfuscated name) stops
// the walk at the last trusted hop. A proxy that writes Forwarded must drop
// a client's X-Forwarded-For, which takes precedence. An unreadable peer
// gives the zero Addr.
func (t TrustedProxies) ClientAddress(peer string, header Header) netip.Addr {
	client := parseHop(peer)
	if !client.IsValid() || !t.Trusts(client) {
		return client
	}
	hops := listValues(header("X-Forwarded-For"))
	if len(hops) == 0 {
		hops = forwardedFor(header("Forwarded"))
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop := parseHop(hops[i])
		if !hop.IsValid() {
			break
		}
		client = hop
		if !t.Trusts(hop) {
			break
		}
	}
	return client
}

// Origin returns the scheme://host a client used to reach the service: the
// connection's own (tls, the Host header), or, from a trusted proxy, the
// first value of X-Forwarded-Proto and X-Forwarded-Host when set.
func (t TrustedProxies) Origin(peer string, tls bool, host string, header Header) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if a := parseHop(peer); a.IsValid() && t.Trusts(a) {
		if v := firstValue(header("X-Forwarded-Proto")); v == "http" || v == "https" {
			scheme = v
		}
		if v := firstValue(header("X-Forwarded-Host")); v != "" {
			host = v
		}
	}
	return scheme + "://" + host
}

// RequestClientAddress is ClientAddress of a net/http request.
func (t TrustedProxies) RequestClientAddress(r *http.Request) netip.Addr {
	return t.ClientAddress(r.RemoteAddr, r.Header.Values)
}

// RequestOrigin is Origin of a net/http request.
func (t TrustedProxies) RequestOrigin(r *http.Request) string {
	return t.Origin(r.RemoteAddr, r.TLS != nil, r.Host, r.Header.Values)
}

// VaryForwarded is the Vary header of responses built from Origin.
const VaryForwarded = "X-Forwarded-Proto, X-Forwarded-Host"

// parseHop reads an address with or without a port, IPv6 in brackets or
// not; IPv4-mapped IPv6 addresses become IPv4.
func parseHop(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}
	}
	return a.Unmap()
}

// listValues splits the comma-separated values of every line of a header,
// in order.
func listValues(lines []string) []string {
	var out []string
	for _, line := range lines {
		for _, v := range strings.Split(line, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// forwardedFor returns the for= parameter of each element of RFC 7239
// Forwarded headers, in order; an element without one gives "" (an
// unreadable hop).
func forwardedFor(lines []string) []string {
	var out []string
	for _, element := range listValues(lines) {
		hop := ""
		for _, pair := range strings.Split(element, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if strings.EqualFold(k, "for") {
				hop = strings.Trim(v, `"`)
			}
		}
		out = append(out, hop)
	}
	return out
}

func firstValue(header []string) string {
	if len(header) == 0 {
		return ""
	}
	v, _, _ := strings.Cut(header[0], ",")
	return strings.ToLower(strings.TrimSpace(v))
}

// Origin is where the request's browser reached the exchange (scheme and
// host), for absolute links: X-Forwarded-Proto and -Host count only from
// TRUSTED_PROXIES.
func (p *Provider) Origin(r *http.Request) string { return p.proxies.RequestOrigin(r) }
