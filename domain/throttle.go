package domain

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Sign-in throttling slows password guessing without handing anyone a way
// to lock others out. Failed sign-ins are counted per key, each count
// forgotten after loginFailureMemory without a failure; past a number of
// free failures, each further attempt waits a delay that doubles from one
// second after the last failure, up to a ceiling.
//
// Which counts hold an attempt back depends on what it proves beside the
// password (its class), so that capacity the attacker cannot take is kept
// for the owner:
//
//   - A browser the account signed in from before carries a device cookie
//     (signed, bound to the account, DeviceLife; the OWASP "device
//     cookie"): its attempts are held back only by that device's own count
//     (5 free, then up to 15 minutes), whatever others do to the account.
//   - An address the account signed in from lately is known there
//     (knownLoginPeriod): its attempts wait on the account-and-address
//     count only (5 free, then up to 15 minutes).
//   - A new browser solves a proof of work that the login page's script
//     computes (a few hundred thousand SHA-256 hashes, single use, bound
//     to the email typed): such attempts share an account count of their
//     own (10 free, then at most 30 seconds), which attempts without a
//     proof never raise.
//   - Any other attempt (a script polling the form) waits on the
//     account-and-address count, the address count across accounts (20
//     free, then up to 15 minutes: credential stuffing) and the account
//     count across addresses (10 free, then at most 30 seconds).
//
// So an attacker polling from rotating addresses holds back only attempts
// as blind as theirs: the owner gets in from their browser, or from a new
// one whose page solved the puzzle. An attacker who solves the puzzle too
// pays for every attempt and is held to the same slow account count; only
// one who holds a device cookie of the owner's (their browser) escapes the
// account counts, and is held to the device's. Throttled attempts are not
// checked and not counted. The counts live in the database, so every
// instance of the exchange sees the same ones.
const (
	loginFailureMemory = time.Hour
	knownLoginPeriod   = 30 * 24 * time.Hour
	// DeviceLife is how long a device cookie vouches for its browser.
	DeviceLife = 180 * 24 * time.Hour
	// workLife is how long a proof-of-work challenge can be solved.
	workLife = 10 * time.Minute
	// SignInWorkBits is the proof of work's difficulty: the leading zero
	// bits its hash needs (2^16 hashes on average: a fraction of a second
	// in a browser's WebCrypto).
	SignInWorkBits = 16
)

// signInClass is what an attempt proved beside its password.
type signInClass int

const (
	classPlain  signInClass = iota // nothing
	classWork                      // a proof of work, single use
	classKnown                     // an address the account signed in from
	classDevice                    // a device cookie of the account
)

// loginThrottle is one of the counts.
type loginThrottle struct {
	key     func(loginKeys) string
	free    int           // failures without delay
	ceiling time.Duration // the longest delay
	// waits are the classes it holds back; counts, those whose failures
	// it counts.
	waits, counts []signInClass
}

var loginThrottles = []loginThrottle{
	{key: func(k loginKeys) string { return k.pair }, free: 5, ceiling: 15 * time.Minute,
		waits: []signInClass{classPlain, classWork, classKnown}, counts: []signInClass{classPlain, classWork, classKnown}},
	{key: func(k loginKeys) string { return k.address }, free: 20, ceiling: 15 * time.Minute,
		waits: []signInClass{classPlain, classWork}, counts: []signInClass{classPlain, classWork, classKnown}},
	{key: func(k loginKeys) string { return k.account }, free: 10, ceiling: 30 * time.Second,
		waits: []signInClass{classPlain}, counts: []signInClass{classPlain, classKnown}},
	{key: func(k loginKeys) string { return k.worked }, free: 10, ceiling: 30 * time.Second,
		waits: []signInClass{classWork}, counts: []signInClass{classWork}},
	{key: func(k loginKeys) string { return k.device }, free: 5, ceiling: 15 * time.Minute,
		waits: []signInClass{classDevice}, counts: []signInClass{classDevice}},
}

// delay returns how long after the last of n failures the next attempt
// waits.
func (t loginThrottle) delay(n int) time.Duration {
	if n < t.free {
		return 0
	}
	if shift := n - t.free; shift < 30 {
		return min(time.Second<<shift, t.ceiling)
	}
	return t.ceiling
}

// loginKeys are the throttle keys of one attempt. The account is an HMAC
// of the typed email under the service's ThrottleKey: the store never
// holds what was typed (people type passwords into the email field), and
// whoever reads the database or a log line cannot confirm a guessed email
// by hashing it, as they could an unkeyed hash. Unknown emails are counted
// like known ones, so throttling tells nothing about which accounts exist.
type loginKeys struct {
	account, address, pair, known, worked string
	device                                string // the device's count: set for an attempt of classDevice
	accountMAC                            string // the account's HMAC, which device cookies are bound to
	accountLog                            string // a short form of the HMAC, to follow one account through the logs
}

func (s *Service) newLoginKeys(email, addr string) loginKeys {
	account := s.mac("account", email)
	return loginKeys{
		account:    "account:" + account,
		address:    "address:" + addr,
		pair:       "pair:" + account + "|" + addr,
		known:      "known:" + account + "|" + addr,
		worked:     "worked:" + account,
		accountMAC: account,
		accountLog: account[:12],
	}
}

// mac is the hex HMAC of the parts under the throttle key. The account
// names are HMACs of the email alone, as they always were (their records
// stay valid); device cookies and challenges name their purpose first.
func (s *Service) mac(purpose string, parts ...string) string {
	m := hmac.New(sha256.New, s.throttleKey)
	if purpose != "account" {
		m.Write([]byte(purpose + "\x00"))
	}
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// newDevice returns a new device cookie of the account: a random id, when
// it was issued, and the HMAC that binds both to the account.
func (s *Service) newDevice(k loginKeys, now time.Time) string {
	id, issued := randomHex(16), strconv.FormatInt(now.Unix(), 10)
	return id + "." + issued + "." + s.mac("device", k.accountMAC, id, issued)
}

// deviceOf returns the id of a device cookie that vouches for the account
// at now: issued by this service (any instance: the key derives from
// SECRET_KEY) for this very account, within deviceLife.
func (s *Service) deviceOf(k loginKeys, cookie string, now time.Time) (string, bool) {
	id, issued, mac, ok := cutThree(cookie)
	if !ok || !hmac.Equal([]byte(mac), []byte(s.mac("device", k.accountMAC, id, issued))) {
		return "", false
	}
	at, err := strconv.ParseInt(issued, 10, 64)
	if err != nil || now.Sub(time.Unix(at, 0)) > DeviceLife || time.Unix(at, 0).After(now.Add(time.Minute)) {
		return "", false
	}
	return id, true
}

// SignInChallenge returns a new proof-of-work challenge for the login
// page, and the bits of work its solution needs: the page's script finds
// a number n such that SHA-256 of "<challenge>|<email>|<n>" (the email
// trimmed, in lower case) starts with that many zero bits.
func (s *Service) SignInChallenge() (string, int) {
	id, issued := randomHex(16), strconv.FormatInt(s.Now().Unix(), 10)
	return id + "." + issued + "." + s.mac("work", id, issued), SignInWorkBits
}

// workDone reports whether work solves the challenge for the email, and
// spends the challenge: a proof counts once. A challenge not issued by
// this service, or past workLife, proves nothing.
func (s *Service) workDone(ctx context.Context, email, challenge, work string, now time.Time) (bool, error) {
	id, issued, mac, ok := cutThree(challenge)
	if !ok || len(work) > 20 || !hmac.Equal([]byte(mac), []byte(s.mac("work", id, issued))) {
		return false, nil
	}
	at, err := strconv.ParseInt(issued, 10, 64)
	if err != nil || now.Sub(time.Unix(at, 0)) > workLife || time.Unix(at, 0).After(now.Add(time.Minute)) {
		return false, nil
	}
	sum := sha256.Sum256([]byte(challenge + "|" + email + "|" + work))
	if leadingZeroBits(sum[:]) < SignInWorkBits {
		return false, nil
	}
	return s.store.SpendLoginProof(ctx, "work:"+id, time.Unix(at, 0).Add(workLife))
}

// SolveSignInWork finds the proof of work the login page's script finds
// (SignInChallenge): for clients that sign in without a browser, and
// tests.
func SolveSignInWork(challenge, email string, bits int) string {
	email = strings.ToLower(strings.TrimSpace(email))
	for n := 0; ; n++ {
		work := strconv.Itoa(n)
		sum := sha256.Sum256([]byte(challenge + "|" + email + "|" + work))
		if leadingZeroBits(sum[:]) >= bits {
			return work
		}
	}
}

func leadingZeroBits(b []byte) int {
	n := 0
	for _, x := range b {
		if x != 0 {
			return n + bits.LeadingZeros8(x)
		}
		n += 8
	}
	return n
}

// cutThree splits "a.b.c".
func cutThree(v string) (a, b, c string, ok bool) {
	a, rest, ok1 := strings.Cut(v, ".")
	b, c, ok2 := strings.Cut(rest, ".")
	return a, b, c, ok1 && ok2 && a != "" && b != "" && c != "" && len(v) <= 200
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
