// Package keyspace reads and writes what baton keeps in etcd beside the
// primitives' own keys, and reads the primitives' keys as the libraries
// write them: who holds (one rule, the libraries' own: Holding), the
// acquisition records (held), the audit records of operator actions, lock
// delays and release requests. The commands and the page read through it.
package keyspace
