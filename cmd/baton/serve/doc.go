// Package serve is `baton serve`: baton's locks for callers in any
// language, over gRPC, gRPC-Web and Connect's HTTP/JSON from one set of
// handlers (connectrpc.com/connect), on the API of
// proto/baton/v1/baton.proto. docs/serve.md is its manual.
//
// A Hold stream acquires through package mutex on one shared session per
// TTL (one etcd lease, renewed for every hold of that TTL), and keeps the
// lock while its stream is open and its caller's heartbeats arrive. A Lead
// stream is the same for a term of package election, on a lease of its
// own (lead.go): leading first, end_requested while it leads, ended with
// its cause (before the key is deleted) or resigned last. A Shards stream
// is a member of a shard group (package shard's Run, on a lease of its
// own, shards.go): joined first, then owned, moved (released at Drained,
// or lost at the drain deadline and released once the caller's validity
// ran out) and lost per shard, and ended last. Fence is
// fencing.EtcdGuard: a token's admission, or a write under a hold in the
// namespace's data prefix (fence.go).
//
// # Guarantees
//
//   - The first message of a Hold is held, with the fencing token (the
//     key's CreateRevision, strictly greater than every earlier holder's),
//     the keys and the validity; the last is lost with its cause, or
//     released.
//   - A hold's validity deadline on the server is the earlier of its
//     heartbeat deadline (the last heartbeat's arrival + TTL − TTL/5) and
//     the library's (the lease's renewal send time + TTL − margin): never
//     later than the library's. No heartbeat extends a hold past it.
//   - lost is sent before the key is deleted, and before the lease can
//     expire: at the heartbeat deadline, when the library's Context ends
//     (an operator's delete, a revoke, failed renewals, the validity
//     deadline), and at shutdown.
//   - A hold the library lost to failed renewals keeps its key until the
//     validity its caller was last given, and the drift margin, ran out:
//     the lease is not revoked before its deadline (config.KeysToDeadline).
//     A Shards member's shard keys go with its lease at that deadline, and
//     every validity a member is given, owning a shard or not, is bounded
//     by its current lease's (a shard lost with an earlier one is named in
//     every heartbeat's reply since). Not at shutdown, which revokes at
//     once.
//   - Every validity is measured from the arrival of the request it answers,
//     so a caller that adds it to its send time gets a deadline before the
//     server's, and ends a hold by its own clock while cut off.
//   - A message its caller does not take within a twentieth of the TTL
//     (send.go) ends a hold; its key is deleted once the validity the
//     caller was last given has run out, not before.
//   - A closed stream, a Release and the end of a hold delete its key in a
//     transaction guarded by its CreateRevision; a wait that ends leaves no
//     key.
//   - Every refusal of a field is INVALID_ARGUMENT naming it, before
//     anything is written; RESOURCE_EXHAUSTED over --max-holds or
//     --max-holds-per-identity; PERMISSION_DENIED when the policy does not
//     list the identity, or a fenced write names a key outside the
//     namespace's data prefix, with nothing written.
//
// Not guaranteed: that a caller stops in time (a process can pause after
// checking; fencing covers it), nor the deadlines under clocks whose rates
// differ by more than the margin allows.
package serve
