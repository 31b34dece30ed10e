package main

import (
	"context"
	"strings"
	"testing"
)

// Bad input is refused before anything starts (no member, no child), with
// exit status 2 and an error naming the flag and its bound.
func TestBadFlagsAreRefusedBeforeAnythingStarts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-held", "0"}, "-held must be at least 1, got 0"},
		{[]string{"-waiters", "-5"}, "-waiters must be at least 1, got -5"},
		{[]string{"-clients", "0"}, "-clients must be at least 1, got 0"},
		{[]string{"-waiters", "10", "-clients", "11"}, "-clients must be at most -waiters (10), got 11"},
		{[]string{"-held", "100", "-held-small", "101"}, "-held-small must be at most -held (100), got 101"},
		{[]string{"-held-runs", "0"}, "-held-runs must be at least 1"},
		{[]string{"-only", "held,nope"}, `-only: no phase "nope"`},
		{[]string{"-clients", "100000000", "-waiters", "100000000"}, "more than RLIMIT_NOFILE allows"},
		{[]string{"-only", "waiters", "-waiters", "1000000000", "-clients", "10"}, "more than the"},
		{[]string{"-only", "held", "-held", "1000000000"}, "per held lock, client and server), more than the"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("run(%q) = %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
