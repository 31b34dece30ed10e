//go:build baton_never

package p

// G exists only with a tag.
func G() {}
