// Package dev holds the commands for local use: baton dev (an embedded
// etcd, optionally with TLS and authentication, or several clusters) and
// baton demo with its hidden worker command (fencing shown end to end).
package dev
