// Package operate holds the operator's actions on a hold that is not
// theirs: baton unlock and baton resign (force, after checking that the
// holder is dead, or --even-if-alive; a hand-over with --to; a release
// request), each recorded in the audit log.
package operate
