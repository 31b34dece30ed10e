// Package inspect holds the read-only commands: baton leader,
// candidates, observe, locks and audit, with their table and JSON
// writers, on one cluster or fanned out over a cluster map. What they
// read comes from keyspace.
package inspect
