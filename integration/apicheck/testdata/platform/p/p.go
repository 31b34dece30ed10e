// Package p has a file that a build constraint leaves out.
package p

// F is everywhere.
func F() {}
