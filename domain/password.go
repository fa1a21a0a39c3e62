package domain

import (
	"sync"

	"github.com/alexedwards/argon2id"
)

// passwordParams are the OWASP-recommended argon2id settings (19 MiB, two
// passes, one lane): about 20 ms a hash, so logins stay cheap for us and
// expensive for an offline attacker.
var passwordParams = &argon2id.Params{Memory: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLength: 16, KeyLength: 32}

// MinPasswordLength is the shortest password accepted.
const MinPasswordLength = 8

// HashPassword returns the argon2id hash of password in PHC string format.
func HashPassword(password string) (string, error) {
	return argon2id.CreateHash(password, passwordParams)
}

// unusableHash is compared against when an account does not exist, so that
// a failed login costs the same whether or not the email is known. It is
// made on first use: hashing at package init cost every process (each
// command, each container health check) 19 MiB and a tenth of a second.
var unusableHash = sync.OnceValue(func() string {
	hash, _ := HashPassword("an unusable password for timing")
	return hash
})

// passwordMatches reports whether password matches hash. An empty or
// malformed hash never matches.
func passwordMatches(password, hash string) bool {
	if hash == "" {
		_, _ = argon2id.ComparePasswordAndHash(password, unusableHash())
		return false
	}
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	return err == nil && ok
}
