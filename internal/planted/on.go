//go:build robustness_planted

package planted

import "os"

// Available reports whether this build can plant bugs.
const Available = true

// On reports whether bug is the one $BATON_PLANTED_BUG names.
func On(bug string) bool { return os.Getenv(Env) == bug }
