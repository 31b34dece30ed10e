// Package clusters holds baton clusters: check, pin and check-move of a
// cluster map (which etcd cluster answers each name, and which names a new
// map moves). Reaching a cluster and fanning a listing out over a map are
// shared plumbing, in cmdutil.
package clusters
