package domain

import "sync"

// keyLocks serialises work on the same keys within this process. Sign-in
// attempts take the locks of their account and of their client address, so
// that a burst of parallel guesses is checked one at a time against the
// throttle instead of all reading it before the first failure is counted.
// That also keeps the counts exact on FerretDB v1, whose updates are
// read-modify-write and lose concurrent increments; across instances on
// MongoDB, whose $inc is atomic, a burst passes at most once per instance.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	holders int // holding or waiting; the entry goes when none is left
}

// lock takes the lock of each key in order and returns what releases them
// all. Every caller must list its keys in the same order of kinds (an
// account before an address), so no two callers wait on each other.
func (l *keyLocks) lock(keys ...string) (unlock func()) {
	held := make([]*keyLock, len(keys))
	for i, key := range keys {
		l.mu.Lock()
		if l.locks == nil {
			l.locks = map[string]*keyLock{}
		}
		k := l.locks[key]
		if k == nil {
			k = &keyLock{}
			l.locks[key] = k
		}
		k.holders++
		l.mu.Unlock()
		k.Lock()
		held[i] = k
	}
	return func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].Unlock()
			l.mu.Lock()
			if held[i].holders--; held[i].holders == 0 {
				delete(l.locks, keys[i])
			}
			l.mu.Unlock()
		}
	}
}
