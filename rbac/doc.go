// Package rbac locks down the etcd cluster baton runs on: a declarative
// policy of who may contend, who may also ask a holder to let go, who may
// only observe and who may operate (force-unlock) in each namespace,
// applied as etcd roles; auth enabled with a root user; TLS configurations
// for mutually authenticated connections; and a development CA that makes
// the certificates for all of it.
//
// Every lock and election key of a baton namespace lies under
// "/<namespace>/v1/"; the namespace's audit trail (who forced which lock,
// when and why) lies beside it under "/<namespace>/audit/v1/", where the
// contenders' grant does not reach. etcd has no create-only permission, so
// the trail is protected by who may write there at all:
//
//	role baton:<ns>:readwrite  readwrite on /<ns>/v1/, read on /<ns>/audit/v1/   contenders
//	role baton:<ns>:request    as readwrite, and readwrite on /<ns>/audit/v1/request/  requesters
//	role baton:<ns>:read       read      on /<ns>/v1/, read on /<ns>/audit/v1/   observers
//	role baton:<ns>:operate    readwrite on /<ns>/v1/ and on /<ns>/audit/v1/     operators
//
// A service that runs as a contender can therefore neither forge nor
// erase an audit record; an operator can force-unlock (delete a holder's
// key and write the record in one transaction) and can, like root, still
// delete records: keep the operators few and people, not services. A
// requester (a waiting job that may ask the holder to let go) writes the
// request records and nothing else of the trail: it can forge or erase
// request records, never a force-unlock's, and cannot force-unlock.
//
// A contender needs write for every step of holding a lock or leading:
// the Put of its key, the Delete on release, and the renewal and
// revocation of its lease, which etcd allows only to a user with write
// permission on every key attached to the lease. An observer reads and
// watches the prefix, and asks the time left of leases (which needs no
// permission); it can neither lock, campaign, delete another's key, nor
// revoke another's lease.
//
// With etcd's --client-cert-auth, a client that sends no password is the
// user named by its certificate's CN, so the secure set-up is: TLS with
// client certificates (TLSFiles), auth enabled (EnableAuth), one Apply.
// The development CA (OpenDevCA) writes those certificates for local use
// and tests. When a client is refused at the TLS level, etcd's client
// reports only "context deadline exceeded"; ProbeTLS says which side
// refused and why.
//
// # Guarantees
//
//   - Apply is idempotent: applying the same policy again makes no change
//     and returns none. For each namespace listed, the policy is the whole
//     truth about baton's four roles: users no longer listed lose them and
//     permissions added by hand are revoked. Namespaces not listed are
//     left alone unless WithPrune. Apply never deletes a user, never sets
//     a password, never touches a role not named "baton:…".
//   - A policy is decoded strictly: an unknown field, a duplicate key, a
//     bad name or a user listed twice in a namespace is an error wrapping
//     ErrInvalidPolicy, and nothing is applied.
//   - EnableAuth is safe to call again: when auth is on it changes nothing.
//   - The TLS configurations require TLS 1.2 or later and verify the peer;
//     nothing in this package sets InsecureSkipVerify. A client
//     certificate that is expired or not yet valid is refused when the
//     configuration is built, with its dates.
//   - Private keys are written with mode 0600, atomically (a reader never
//     sees half a key file).
//
// Not guaranteed:
//
//   - Apply is not atomic: etcd has no transaction over its auth state. If
//     a step fails, the changes before it stay and are returned with the
//     error; a second Apply completes the work. Two Apply calls racing
//     with different policies leave a mix; run one at a time.
//   - Revoking a role does not end what a client already holds: a
//     contender that lost its role keeps its keys until its lease expires
//     (it can no longer renew it, so that is at most a TTL).
//   - etcd enforces no quota: a contender with readwrite on a namespace
//     may hold any number of keys there. Bound the damage with the TTL
//     cap (mutex.WithMaxTTL), one namespace per team, and the hold-time
//     metric (see docs/security.md).
//   - The development CA is for development: its CA key sits next to the
//     certificates it signs, and nothing revokes a certificate.
package rbac
