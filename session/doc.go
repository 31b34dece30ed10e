// Package session is an etcd lease that any number of baton mutexes and
// elections share: one renewal per TTL/3 keeps every lock held through it
// alive, however many there are.
//
//	s, err := session.New(cli, session.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer s.Close()
//	a, _ := mutex.New(cli, "a", mutex.WithSession(s))
//	b, _ := election.New(cli, "b", election.WithSession(s))
//
// A Mutex or Election given no session makes its own, with the options
// given to it. Session-wide settings (TTL, maximum TTL, safety margin,
// maximum keys held, logger, registerer) live on the session: a Mutex or
// Election on a shared session that is given one of them with another
// value is refused by its New, with an error naming both values.
//
// # Guarantees
//
//   - The lease is granted on first use, with a bounded wait, and replaced
//     by a new one after it is lost; calls waiting for a grant return when
//     their own ctx ends, whatever the grant is doing.
//   - Every hold's Context ends at the latest at the send time of the last
//     acknowledged renewal + TTL − margin on the monotonic clock, and at
//     once when two renewals in a row fail or etcd says the lease is gone.
//   - Several goroutines or Mutexes locking the same name through one
//     session exclude each other (etcd alone would let them share a key),
//     and a key still being deleted after a loss is never adopted.
//   - Close revokes the lease, so every key on it goes at once, and waits
//     for every goroutine the session started.
//
// Not guaranteed: that a holder paused past its lease stops writing — no
// lease can; the fencing token is what the protected resource checks.
// A session given as an etcd *concurrency.Session to mutex.WithSession is
// watched by each Mutex on its own: use this package to share one among
// several.
package session
