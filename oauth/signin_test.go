package oauth_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// signIn is one browser signing in from a client address, as a trusted
// proxy on loopback reports it.
type signIn struct {
	t   *testing.T
	env *handlerstest.Env
	b   *handlerstest.Browser
}

func from(t *testing.T, env *handlerstest.Env, addr string) *signIn {
	b := newBrowser(t, env)
	if addr != "" {
		b.Header = http.Header{"X-Forwarded-For": {addr}}
	}
	return &signIn{t, env, b}
}

// try submits the login page once and returns the status and, for a
// refusal by the throttle, its Retry-After.
func (s *signIn) try(email, password string) (int, time.Duration) {
	s.t.Helper()
	return s.tryWith(email, password, nil)
}

// tryWorked is try with the proof of work the page's script would solve.
func (s *signIn) tryWorked(email, password string) (int, time.Duration) {
	s.t.Helper()
	return s.tryWith(email, password, func(page string) url.Values {
		_, fields := handlerstest.Form(s.t, page)
		challenge := fields.Get("work_challenge")
		bits, err := strconv.Atoi(regexp.MustCompile(`data-work-bits="(\d+)"`).FindStringSubmatch(page)[1])
		if challenge == "" || err != nil {
			s.t.Fatalf("no proof-of-work challenge on the login page:\n%s", page)
		}
		return url.Values{"work": {domain.SolveSignInWork(challenge, email, bits)}}
	})
}

// tryWith is try with fields the page's form gets besides the email and
// password (from the page).
func (s *signIn) tryWith(email, password string, extra func(page string) url.Values) (int, time.Duration) {
	s.t.Helper()
	_, page := s.b.Do("GET", s.env.URL+"/o/login/", nil)
	set := url.Values{"email": {email}, "password": {password}}
	if extra != nil {
		for k, v := range extra(page) {
			set[k] = v
		}
	}
	resp, page := s.b.Submit(page, set)
	if resp.StatusCode != http.StatusTooManyRequests {
		if resp.StatusCode == http.StatusOK && !strings.Contains(page, "You are signed in as "+email) {
			s.t.Fatalf("200 without signing in:\n%s", page)
		}
		return resp.StatusCode, 0
	}
	seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || seconds < 1 {
		s.t.Fatalf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(page, "try again in") || !strings.Contains(page, `role="alert"`) {
		s.t.Fatalf("429 without saying when to try again:\n%s", page)
	}
	return resp.StatusCode, time.Duration(seconds) * time.Second
}

// fail makes n wrong-password attempts count, stepping the clock over
// every delay the throttle asks for; it returns the time waited.
func (s *signIn) fail(email string, n int) time.Duration {
	s.t.Helper()
	var waited time.Duration
	for i := 0; i < n; {
		status, wait := s.try(email, "wrong password")
		switch status {
		case http.StatusUnauthorized:
			i++
		case http.StatusTooManyRequests:
			s.env.Clock.Advance(wait)
			waited += wait
		default:
			s.t.Fatalf("wrong password %d: %d", i+1, status)
		}
	}
	return waited
}

// succeed signs in with the right password, stepping over the delays the
// throttle asks for, and returns the time waited.
func (s *signIn) succeed(email string) time.Duration {
	s.t.Helper()
	var waited time.Duration
	for range 10 {
		status, wait := s.try(email, handlerstest.Password)
		if status == http.StatusOK {
			return waited
		}
		if status != http.StatusTooManyRequests {
			s.t.Fatalf("right password: %d", status)
		}
		s.env.Clock.Advance(wait)
		waited += wait
	}
	s.t.Fatalf("right password: still refused after %v", waited)
	return 0
}

// The acceptance case: 100 bad passwords from one address do not keep the
// owner out, from another address, for more than a short delay, and not
// at all from an address they signed in from before.
func TestSignInThrottleCannotLockOutTheOwner(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: "127.0.0.1"})
	env.Clock.Stop()
	env.Practitioner(t, "doc@example.org", false)
	from(t, env, "192.0.2.10").succeed("doc@example.org") // the owner's office: known from now on

	attacker := from(t, env, "203.0.113.66")
	waited := attacker.fail("doc@example.org", 100)
	if waited < 15*time.Minute {
		t.Errorf("100 bad passwords from one address waited only %v in all", waited)
	}
	// The attacker's address is slowed to the ceiling, even for the right
	// password.
	if status, wait := attacker.try("doc@example.org", handlerstest.Password); status != http.StatusTooManyRequests || wait < 10*time.Minute {
		t.Errorf("the attacker's address right after 100 failures: %d, Retry-After %v", status, wait)
	}
	if waited := from(t, env, "192.0.2.10").succeed("doc@example.org"); waited != 0 {
		t.Errorf("the owner at a known address waited %v", waited)
	}
	if waited := from(t, env, "198.51.100.7").succeed("doc@example.org"); waited > 30*time.Second {
		t.Errorf("the owner at a new address waited %v, want at most 30s", waited)
	}
	// The per-account delay, which any address raises, is bounded.
	other := from(t, env, "198.51.100.8")
	other.fail("doc@example.org", 3)
	if waited := from(t, env, "198.51.100.9").succeed("doc@example.org"); waited > 30*time.Second {
		t.Errorf("after more failures elsewhere, the owner waited %v", waited)
	}
}

// The acceptance case of an attacker polling from rotating addresses: the
// account's count across addresses stays in its delay for as long as the
// attack lasts, and a blind attempt (a script's) waits with the
// attacker's; the owner still signs in, from their browser on a new
// network (its device cookie) or from a new machine (the page's proof of
// work). On the old throttle both were refused. Guessing stays slow: an
// attacker who solves the work shares a count as slow as the old one, a
// stolen device cookie has its own, and a solved challenge counts once.
func TestSignInUnderRotatingAddressAttack(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: "127.0.0.1"})
	env.Clock.Stop()
	env.Practitioner(t, "doc@example.org", false)
	const email = "doc@example.org"
	laptop := from(t, env, "192.0.2.10")
	laptop.succeed(email) // the owner's browser: it holds a device cookie from now on
	_, page := laptop.b.Do("GET", env.URL+"/o/login/", nil)
	if resp, out := laptop.b.Submit(page, nil); !strings.Contains(out, "signed out") { // the session ends; the device cookie stays
		t.Fatalf("signing out: %d %s", resp.StatusCode, out)
	}
	addresses := 0
	next := func() *signIn {
		addresses++
		return from(t, env, fmt.Sprintf("203.0.%d.%d", 113+addresses/250, addresses%250+1))
	}
	// attack counts n failures, each from a new address, polling: the
	// attacker's next attempt comes the moment a delay ends.
	attack := func(n int) {
		for range n {
			s := next()
			for {
				status, wait := s.try(email, "wrong password")
				if status == http.StatusUnauthorized {
					break
				}
				env.Clock.Advance(wait)
			}
		}
	}
	attack(40)
	if status, _ := from(t, env, "198.51.100.40").try(email, handlerstest.Password); status != http.StatusTooManyRequests {
		t.Fatalf("a blind attempt during the attack: %d, want 429 (the attack holds the account's count)", status)
	}
	laptop.b.Header = http.Header{"X-Forwarded-For": {"198.51.100.41"}} // the owner's browser, on a new network
	if status, _ := laptop.try(email, handlerstest.Password); status != http.StatusOK {
		t.Errorf("the owner's browser on a new network during the attack: %d, want 200", status)
	}
	attack(5)
	if status, _ := from(t, env, "198.51.100.42").tryWorked(email, handlerstest.Password); status != http.StatusOK {
		t.Errorf("the owner on a new machine, its page's work solved, during the attack: %d, want 200", status)
	}

	// An attacker who solves the work too gets 10 free guesses, then waits.
	statuses := map[int]int{}
	for range 12 {
		status, _ := next().tryWorked(email, "wrong password")
		statuses[status]++
	}
	if statuses[http.StatusUnauthorized] != 10 || statuses[http.StatusTooManyRequests] != 2 {
		t.Errorf("12 worked guesses from rotating addresses: %v, want 10 checked and 2 held back", statuses)
	}
	// A solved challenge counts once: sent again, it proves nothing.
	replay := next()
	_, page = replay.b.Do("GET", env.URL+"/o/login/", nil)
	_, fields := handlerstest.Form(t, page)
	work := url.Values{"email": {email}, "password": {"wrong password"}, "work": {domain.SolveSignInWork(fields.Get("work_challenge"), email, domain.SignInWorkBits)}}
	env.Clock.Advance(time.Minute) // the worked count's delay is over
	if resp, _ := replay.b.Submit(page, work); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a first use of a solved challenge: %d", resp.StatusCode)
	}
	attack(1)
	replay.b.Header = http.Header{"X-Forwarded-For": {"198.51.100.43"}}
	if resp, _ := replay.b.Submit(page, work); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a replayed proof of work during the attack: %d, want 429 (a blind attempt)", resp.StatusCode)
	}
	// A device cookie copied to another browser guesses 5 times, then waits.
	thief := next()
	u, _ := url.Parse(env.URL + "/o/login/")
	for _, c := range laptop.b.Jar().Cookies(u) {
		if c.Name == "exchange_device" {
			thief.b.Jar().SetCookies(u, []*http.Cookie{c})
		}
	}
	statuses = map[int]int{}
	for i := range 7 {
		thief.b.Header = http.Header{"X-Forwarded-For": {fmt.Sprintf("198.18.0.%d", i+1)}}
		status, _ := thief.try(email, "wrong password")
		statuses[status]++
	}
	if statuses[http.StatusUnauthorized] != 5 || statuses[http.StatusTooManyRequests] != 2 {
		t.Errorf("7 guesses with a stolen device cookie: %v, want 5 checked and 2 held back", statuses)
	}
}

// Credential stuffing from one address slows that address only.
func TestSignInThrottlePerAddress(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: "127.0.0.1"})
	env.Clock.Stop()
	env.Practitioner(t, "doc@example.org", false)
	stuffer := from(t, env, "203.0.113.66")
	for i := range 20 {
		if status, _ := stuffer.try(fmt.Sprintf("user%d@example.org", i), "password123"); status != http.StatusUnauthorized {
			t.Fatalf("attempt %d from the address: %d", i+1, status)
		}
	}
	status, first := stuffer.try("another@example.org", "password123")
	if status != http.StatusTooManyRequests {
		t.Fatalf("21st failure from one address: %d, want 429", status)
	}
	env.Clock.Advance(first)
	stuffer.try("yet-another@example.org", "password123")
	if _, second := stuffer.try("and-another@example.org", "password123"); second <= first {
		t.Errorf("the address's delay does not grow: %v then %v", first, second)
	}
	if waited := from(t, env, "198.51.100.7").succeed("doc@example.org"); waited != 0 {
		t.Errorf("another address waited %v", waited)
	}
}

// TRUSTED_PROXIES: X-Forwarded-For gives the client's address only from a
// listed peer; from any other, spoofing it escapes nothing. The same holds
// for X-Forwarded-Proto (the cookies' Secure flag) and X-Forwarded-Host
// (discovery).
func TestTrustedProxiesHonouredOnlyFromListedPeers(t *testing.T) {
	for _, c := range []struct {
		name, trusted string
		listed        bool
	}{
		{"listed", "127.0.0.0/8", true},
		{"not listed", "10.0.0.0/8", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: c.trusted})
			env.Clock.Stop()
			env.Practitioner(t, "doc@example.org", false)
			// Six failures, each from a "different" client: the sixth is
			// throttled only when they all count as one address.
			var last int
			for i := range 6 {
				last, _ = from(t, env, fmt.Sprintf("203.0.113.%d", i+1)).try("doc@example.org", "wrong password")
			}
			if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusTooManyRequests}[c.listed]; last != want {
				t.Errorf("sixth failure, each with its own X-Forwarded-For: %d, want %d", last, want)
			}

			b := from(t, env, "")
			b.b.Header = http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"exchange.example.org"}}
			resp, _ := b.b.Do("GET", env.URL+"/o/login/", nil)
			secure := strings.Contains(resp.Header.Get("Set-Cookie"), "Secure")
			if secure != c.listed {
				t.Errorf("Secure cookie from X-Forwarded-Proto: %v, want %v (%s)", secure, c.listed, resp.Header.Get("Set-Cookie"))
			}
			_, doc := handlerstest.SendTo(t, "GET", env.URL+"/o/.well-known/openid-configuration", "", nil,
				map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "exchange.example.org"})
			want := env.URL + "/o"
			if c.listed {
				want = "https://exchange.example.org/o"
			}
			if doc["issuer"] != want {
				t.Errorf("issuer %v, want %s", doc["issuer"], want)
			}
		})
	}
}

// A burst of parallel guesses gets the free attempts only: attempts for
// one account are checked one at a time against the throttle.
func TestSignInBurstGetsOnlyTheFreeAttempts(t *testing.T) {
	env := handlerstest.Start(t)
	env.Clock.Stop()
	env.Practitioner(t, "doc@example.org", false)
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for range 20 {
		s := from(t, env, "")
		_, page := s.b.Do("GET", env.URL+"/o/login/", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := s.b.Login(page, "doc@example.org", "wrong password")
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[http.StatusUnauthorized] != 5 || statuses[http.StatusTooManyRequests] != 15 {
		t.Errorf("20 parallel guesses: %v, want 5 checked (401) and 15 throttled (429)", statuses)
	}
}

// Refusals are logged with the user's id, never with the password or the
// email typed.
func TestSignInFailuresLoggedWithoutSecrets(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	env := handlerstest.StartWith(t, handlerstest.Options{Logger: slog.New(slog.NewTextHandler(&lockedWriter{&mu, &logs}, nil))})
	env.Clock.Stop()
	doc := env.Practitioner(t, "doc@example.org", false)
	s := from(t, env, "")
	for range 6 {
		s.try("doc@example.org", "hunter2-secret")
	}
	s.try("nobody@example.org", "hunter2-secret")
	mu.Lock()
	defer mu.Unlock()
	text := logs.String()
	for _, secret := range []string{"hunter2-secret", "doc@example.org", "nobody@example.org"} {
		if strings.Contains(text, secret) {
			t.Errorf("the log shows %q:\n%s", secret, text)
		}
	}
	if !strings.Contains(text, "sign-in refused") || !strings.Contains(text, "user="+strconv.FormatInt(doc.ID, 10)) || !strings.Contains(text, "sign-in throttled") {
		t.Errorf("the log does not show the refusals with the user id:\n%s", text)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
