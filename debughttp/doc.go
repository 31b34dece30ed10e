// Package debughttp serves, as JSON, the locks and leaderships this
// process holds: for each, its name, key, fencing token, lease, TTL, how
// long it has been held and how long its validity has left. Mount it on a
// debug or admin listener:
//
//	mux.Handle("/debug/baton", debughttp.Handler(
//		debughttp.From(reportMutex.Held),
//		debughttp.From(schedulerElection.Held),
//	))
//
// The package imports neither mutex nor election: From takes any method
// value that lists holds, such as (*mutex.Mutex).Held or
// (*election.Election).Held.
//
// # Guarantees
//
//   - Each request reads the sources anew; nothing runs between requests
//     and the handler starts no goroutine.
//   - The view is this process's own, from memory: it makes no etcd
//     request, so it answers while etcd is unreachable, and then shows
//     validity running out.
//
// What is not guaranteed:
//
//   - That a hold listed as valid is still held by the time the answer is
//     read: ownership can end at any moment. Decide with the holder's
//     Context, not with this endpoint.
//   - Agreement with etcd: a hold whose key an operator deleted shows as
//     ended only once the holder has seen the deletion. `baton locks` shows
//     etcd's view.
//   - Secrecy: the answer carries fencing tokens, which a token-checking
//     service (fencing.Middleware) accepts from anyone who presents them.
//     Serve it only where the holder's own credentials could be read.
package debughttp
