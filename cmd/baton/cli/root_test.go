package cli

import (
	"context"
	"strings"
	"testing"
)

func TestExitCodesWithoutEtcd(t *testing.T) {
	unreachable := []string{"--endpoints", "127.0.0.1:1", "--dial-timeout", "300ms"}
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, ExitUsage, "unknown command"},
		{"unknown flag", []string{"locks", "--frob"}, ExitUsage, "unknown flag"},
		{"bad output format", []string{"-o", "yaml", "locks"}, ExitUsage, "table or json"},
		{"bad namespace", []string{"--namespace", "a/b", "locks"}, ExitUsage, "--namespace"},
		{"cert without key", []string{"--cert", "c.pem", "locks"}, ExitUsage, "--cert and --key"},
		{"zero dial timeout", []string{"--dial-timeout", "0s", "locks"}, ExitUsage, "--dial-timeout"},
		{"leader without name", []string{"leader"}, ExitUsage, "takes 1 argument"},
		{"locks with two prefixes", []string{"locks", "a", "b"}, ExitUsage, "takes 0 to 1 arguments"},
		{"elect without value", []string{"elect", "x"}, ExitUsage, "at least 2"},
		{"lock command without dash", append([]string{"lock", "x", "true"}, unreachable...), ExitUsage, "put -- before"},
		{"try and timeout", []string{"lock", "x", "--try", "--timeout", "1s"}, ExitUsage, "exclude each other"},
		{"zero grace", []string{"lock", "x", "--grace", "0s"}, ExitUsage, "--grace"},
		{"unlock without force", []string{"unlock", "x", "--reason", "r"}, ExitUsage, "--force"},
		{"unlock without reason", []string{"unlock", "x", "--force"}, ExitUsage, "--reason"},
		{"demo with one worker", []string{"demo", "--workers", "1"}, ExitUsage, "--workers"},
		{"etcd unreachable", append([]string{"locks"}, unreachable...), ExitUnavailable, "cannot connect"},
		{"etcd unreachable for lock", append([]string{"lock", "x", "--try"}, unreachable...), ExitUnavailable, "cannot connect"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut syncBuffer
			io := IO{Out: &out, Err: &errOut}
			code := Main(context.Background(), c.args, io)
			if code != c.code {
				t.Errorf("exit code %d, want %d; stderr: %s", code, c.code, errOut.String())
			}
			if !strings.Contains(errOut.String(), c.msg) {
				t.Errorf("stderr %q lacks %q", errOut.String(), c.msg)
			}
		})
	}
}

func TestExitCodeOf(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{childStatus(0), ExitOK},
		{childStatus(3), 3},
		{withCode(ExitNotAcquired, context.Canceled), ExitNotAcquired},
		{context.DeadlineExceeded, ExitUnavailable},
		{context.Canceled, ExitError},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestEndpointsFromEnvironment(t *testing.T) {
	cases := []struct {
		env  string
		want string
	}{
		{"", defaultEndpoint}, // baton dev's, with no flags
		{" 127.0.0.1:1, 127.0.0.1:2 ,", "127.0.0.1:1,127.0.0.1:2"},
	}
	for _, c := range cases {
		_, g := newRoot(IO{Getenv: func(k string) string {
			if k == "BATON_ENDPOINTS" {
				return c.env
			}
			return ""
		}})
		if got := strings.Join(g.endpoints, ","); got != c.want {
			t.Errorf("BATON_ENDPOINTS=%q: endpoints %q, want %q", c.env, got, c.want)
		}
	}
}
