// Package scale measures baton at sizes a single test cannot afford, on
// one embedded etcd member with fsync on, next to raw etcd concurrency
// where raw can do the same: many locks held on one session (Held), a long
// queue of waiters on one name (Waiters), what each costs the etcd server
// (ServerStats, read from the member's own metrics), a partition storm, many
// OS processes and several clusters. It backs the baton-scale program
// (make bench-scale) and docs/scaling.md.
//
// Figures are measured, never asserted: the package's tests check the
// behaviours (the queue drains in order, no double holder, nothing left
// behind) at a size CI can afford.
package scale
