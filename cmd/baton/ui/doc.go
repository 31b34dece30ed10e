// Package ui holds baton ui: a local web page of the namespace's
// elections and locks, kept from one watch of etcd (State), served with
// server-sent events.
package ui
