package oauth_test

import (
	"net/http"
	"testing"

	"exchange/oauth"
)

func TestClientAddress(t *testing.T) {
	proxies, err := oauth.ParseTrustedProxies("10.0.0.0/8, 192.0.2.1 2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, peer string
		header     http.Header
		want       string
	}{
		{"no proxy", "198.51.100.7:5000", nil, "198.51.100.7"},
		{"an untrusted peer's X-Forwarded-For is ignored", "198.51.100.7:5000", http.Header{"X-Forwarded-For": {"203.0.113.1"}}, "198.51.100.7"},
		{"an untrusted peer's Forwarded is ignored", "198.51.100.7:5000", http.Header{"Forwarded": {"for=203.0.113.1"}}, "198.51.100.7"},
		{"a trusted peer without a header", "10.1.2.3:80", nil, "10.1.2.3"},
		{"one proxy", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"203.0.113.1"}}, "203.0.113.1"},
		{"the client's own values are ignored", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2, 203.0.113.1"}}, "203.0.113.1"},
		{"a chain of trusted proxies", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"1.1.1.1, 203.0.113.1, 192.0.2.1, 10.9.9.9"}}, "203.0.113.1"},
		{"repeated header lines", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"1.1.1.1", "203.0.113.1, 10.9.9.9"}}, "203.0.113.1"},
		{"only trusted hops", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"10.0.0.5, 10.0.0.6"}}, "10.0.0.5"},
		{"garbage stops the walk", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"203.0.113.1, not-an-address, 10.0.0.6"}}, "10.0.0.6"},
		{"a hop with a port", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"203.0.113.1:4711"}}, "203.0.113.1"},
		{"IPv6 peer and hop", "[2001:db8::1]:443", http.Header{"X-Forwarded-For": {"2001:db9::7"}}, "2001:db9::7"},
		{"IPv4-mapped IPv6", "[::ffff:10.1.2.3]:80", http.Header{"X-Forwarded-For": {"::ffff:203.0.113.1"}}, "203.0.113.1"},
		{"Forwarded", "10.1.2.3:80", http.Header{"Forwarded": {`for=1.1.1.1, for="[2001:db9::7]:4711";proto=https, for=192.0.2.1`}}, "2001:db9::7"},
		{"Forwarded for=unknown stops the walk", "10.1.2.3:80", http.Header{"Forwarded": {"for=unknown, for=10.0.0.6"}}, "10.0.0.6"},
		{"X-Forwarded-For before Forwarded", "10.1.2.3:80", http.Header{"X-Forwarded-For": {"203.0.113.1"}, "Forwarded": {"for=1.1.1.1"}}, "203.0.113.1"},
	} {
		if got := proxies.ClientAddress(c.peer, c.header.Values).String(); got != c.want {
			t.Errorf("%s: %s from %s = %s, want %s", c.name, c.header, c.peer, got, c.want)
		}
	}
	var none oauth.TrustedProxies
	if got := none.ClientAddress("10.1.2.3:80", http.Header{"X-Forwarded-For": {"203.0.113.1"}}.Values).String(); got != "10.1.2.3" {
		t.Errorf("no trusted proxies: %s", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.org", "10.0.0.1/8/8"} {
		if _, err := oauth.ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q) accepted", bad)
		}
	}
}

func TestOrigin(t *testing.T) {
	proxies, _ := oauth.ParseTrustedProxies("10.0.0.0/8")
	forwarded := http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"exchange.example.org, inner.example"}}
	if got := proxies.Origin("10.1.2.3:80", false, "internal:8000", forwarded.Values); got != "https://exchange.example.org" {
		t.Errorf("from a trusted proxy: %s", got)
	}
	if got := proxies.Origin("198.51.100.7:5000", false, "exchange.example.org", forwarded.Values); got != "http://exchange.example.org" {
		t.Errorf("from an untrusted peer: %s", got)
	}
	if got := proxies.Origin("198.51.100.7:5000", true, "exchange.example.org", nil); got != "https://exchange.example.org" {
		t.Errorf("TLS: %s", got)
	}
}
