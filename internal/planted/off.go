//go:build !robustness_planted

package planted

// Available reports whether this build can plant bugs.
const Available = false

// On reports false: no bug is planted outside a robustness_planted build.
func On(string) bool { return false }
