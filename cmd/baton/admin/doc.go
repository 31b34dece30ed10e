// Package admin holds the commands that set etcd up for baton: baton rbac
// (apply and show a role policy, on one cluster or every cluster of a map),
// baton certs (a development CA) and baton auth (enable authentication).
package admin
