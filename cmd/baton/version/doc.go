// Package version holds baton version: the client's version and each
// endpoint's, with a verdict on whether baton supports it.
package version
