package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Sign-in throttling slows password guessing without handing anyone a way
// to lock others out. Failed sign-ins are counted three ways, each count
// forgotten after loginFailureMemory without a failure; past a number of
// free failures, each further attempt waits a delay that doubles from one
// second after the last failure, up to a ceiling:
//
//   - per account and client address (the guesser at their own address):
//     5 free, then up to 15 minutes;
//   - per client address across accounts (credential stuffing): 20 free,
//     then up to 15 minutes; other addresses are not affected;
//   - per account across addresses (a guesser with many addresses): 10
//     free, then at most 30 seconds, so this count, which anyone can raise,
//     never keeps the owner out for longer.
//
// An account that signed in from an address is known there for
// knownLoginPeriod: its attempts from there skip the per-address and
// per-account delays, so neither a guesser elsewhere nor a neighbour behind
// the same address can hold the owner back. Throttled attempts are not
// checked and not counted. The counts live in the database, so every
// instance of the exchange sees the same ones.
const (
	loginFailureMemory = time.Hour
	knownLoginPeriod   = 30 * 24 * time.Hour
)

// loginThrottle is one of the three counts.
type loginThrottle struct {
	key        func(loginKeys) string
	free       int           // failures without delay
	ceiling    time.Duration // the longest delay
	spareKnown bool          // a known account and address skips it
}

var loginThrottles = []loginThrottle{
	{key: func(k loginKeys) string { return k.pair }, free: 5, ceiling: 15 * time.Minute},
	{key: func(k loginKeys) string { return k.address }, free: 20, ceiling: 15 * time.Minute, spareKnown: true},
	{key: func(k loginKeys) string { return k.account }, free: 10, ceiling: 30 * time.Second, spareKnown: true},
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
	account, address, pair, known string
	accountLog                    string // a short form of the HMAC, to follow one account through the logs
}

func (s *Service) newLoginKeys(email, addr string) loginKeys {
	mac := hmac.New(sha256.New, s.throttleKey)
	mac.Write([]byte(email))
	account := hex.EncodeToString(mac.Sum(nil))
	return loginKeys{
		account:    "account:" + account,
		address:    "address:" + addr,
		pair:       "pair:" + account + "|" + addr,
		known:      "known:" + account + "|" + addr,
		accountLog: account[:12],
	}
}
