// Package router routes baton's namespaces to independent etcd clusters,
// so that locks and elections outgrow one cluster and an outage of one
// cluster leaves the namespaces of the others working.
//
// A cluster map names the clusters, their endpoints, TLS files and
// credentials, and the namespaces each serves; one cluster may be the
// default for every other namespace (see Map for the file format, which
// the baton CLI reads too with --clusters). Using it is one line before
// the usual constructor:
//
//	r, err := router.Load("/etc/baton/clusters.yaml")
//	defer r.Close()
//	cli, err := r.Client(ctx, "payments")
//	m, err := mutex.New(cli, "settle", mutex.WithNamespace("payments"))
//
// # Guarantees
//
//   - A namespace is served by exactly one cluster of a map: a map that
//     lists a namespace twice, or an endpoint in two clusters, is refused
//     with every problem reported at once (ErrInvalidMap). Client always
//     routes a namespace to the same cluster for the life of a Router.
//   - A namespace no cluster serves is an error (ErrUnserved), never a
//     silent fallback, unless the map names a default cluster.
//   - Clusters are isolated: each has its own connection, opened on first
//     use and shared by every caller until Close. Opening one cluster's
//     connection never waits for another's, and an unreachable cluster
//     fails only the calls of its own namespaces.
//   - Mutual exclusion and fencing inside one cluster are exactly those of
//     packages mutex and election: the router only picks the client.
//   - A cluster that pins its identity (Cluster.ID, Cluster.Revision) is
//     the etcd cluster it says: a connection whose endpoints answer as
//     another cluster, or below the pinned revision (rebuilt, restored),
//     is refused with ErrIdentity when it opens, and so is every later
//     response, unary or on a stream, before any lock or term is handed
//     out from it.
//   - Across a namespace's move to another cluster, tokens composed with
//     Token (or Router.Token) keep increasing provided the map's epochs
//     do (CheckMove verifies it, telling clusters apart by their pinned
//     identity and following retired namespaces, so a name repointed at
//     a new cluster, or a namespace removed and re-added, needs a greater
//     epoch): a holder that acquired on the old cluster is rejected by the
//     resource's guard once a holder of the new cluster has written.
//
// What is not guaranteed:
//
//   - Catching every rebuilt or restored cluster. etcd derives the cluster
//     ID from the peer URLs and --initial-cluster-token, so a cluster
//     rebuilt or restored with the same ones has the same ID, and only its
//     revision can tell: one that has gone beyond the pinned revision
//     (pinned long ago, or restored from a snapshot taken after the pin)
//     passes, and its tokens restart below the ones issued before. Rebuild
//     with a fresh token, restore with a revision bump, and pin again now
//     and then (docs/scaling.md).
//   - Exclusion across clusters. During a move, a process still running
//     with the old map can acquire on the old cluster while another holds
//     on the new one. Drain first (docs/scaling.md): stop new
//     acquisitions, wait for the holders to release, then switch the map.
//     Fencing with composed tokens is what keeps the data safe if the
//     drain is incomplete.
//   - That the raw tokens of two clusters compare: each cluster's
//     revisions start at 1. A guard fed raw tokens after a move would
//     reject the new holders and accept the old one; compose them.
//   - Any ordering or transaction across namespaces on different
//     clusters.
//   - That an unpinned cluster is the one it was: its connection only holds
//     to the first etcd cluster it meets. Pin the map (baton clusters pin).
//   - That watch and keep-alive streams are checked: only unary responses
//     are (every acquisition is a transaction).
package router
