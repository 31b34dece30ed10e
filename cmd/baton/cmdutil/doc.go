// Package cmdutil is the plumbing every baton command shares: the
// environment (IO, global flags and their variables, the etcd client, the
// cluster map's routing and fan-out), exit codes and the errors that carry
// them, output (tables, JSON, escaping of untrusted text), validation of
// arguments, credentials, tracing, interruption and retry pauses. It
// imports no command.
package cmdutil
