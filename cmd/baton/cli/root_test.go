package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

func TestExitCodesWithoutEtcd(t *testing.T) {
	unreachable := []string{"--endpoints", "127.0.0.1:1", "--dial-timeout", "300ms"}
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, cmdutil.ExitUsage, "unknown command"},
		{"unknown flag", []string{"locks", "--frob"}, cmdutil.ExitUsage, "unknown flag"},
		{"bad output format", []string{"-o", "yaml", "locks"}, cmdutil.ExitUsage, "table or json"},
		{"bad namespace", []string{"--namespace", "a/b", "locks"}, cmdutil.ExitUsage, "--namespace"},
		{"cert without key", []string{"--cert", "c.pem", "locks"}, cmdutil.ExitUsage, "--cert and --key"},
		{"zero dial timeout", []string{"--dial-timeout", "0s", "locks"}, cmdutil.ExitUsage, "--dial-timeout"},
		{"leader without name", []string{"leader"}, cmdutil.ExitUsage, "takes 1 argument"},
		{"locks with two prefixes", []string{"locks", "a", "b"}, cmdutil.ExitUsage, "takes 0 to 1 arguments"},
		{"elect without value", []string{"elect", "x"}, cmdutil.ExitUsage, "at least 2"},
		{"lock command without dash", append([]string{"lock", "x", "true"}, unreachable...), cmdutil.ExitUsage, "put -- before"},
		{"try and timeout", []string{"lock", "x", "--try", "--timeout", "1s"}, cmdutil.ExitUsage, "exclude each other"},
		{"zero grace", []string{"lock", "x", "--grace", "0s"}, cmdutil.ExitUsage, "--grace"},
		{"unlock without force", []string{"unlock", "x", "--reason", "r"}, cmdutil.ExitUsage, "--force"},
		{"unlock without reason", []string{"unlock", "x", "--force"}, cmdutil.ExitUsage, "--reason"},
		{"demo with one worker", []string{"demo", "--workers", "1"}, cmdutil.ExitUsage, "--workers"},
		{"etcd unreachable", append([]string{"locks"}, unreachable...), cmdutil.ExitUnavailable, "cannot connect"},
		{"etcd unreachable for lock", append([]string{"lock", "x", "--try"}, unreachable...), cmdutil.ExitUnavailable, "cannot connect"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut clitest.SyncBuffer
			io := cmdutil.IO{Out: &out, Err: &errOut}
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
		{nil, cmdutil.ExitOK},
		{cmdutil.ChildStatus(0), cmdutil.ExitOK},
		{cmdutil.ChildStatus(3), 3},
		{cmdutil.WithCode(cmdutil.ExitNotAcquired, context.Canceled), cmdutil.ExitNotAcquired},
		{context.DeadlineExceeded, cmdutil.ExitUnavailable},
		{context.Canceled, cmdutil.ExitError},
	}
	for _, c := range cases {
		if got := cmdutil.ExitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestEndpointsFromEnvironment(t *testing.T) {
	cases := []struct {
		env  string
		want string
	}{
		{"", cmdutil.DefaultEndpoint}, // baton dev's, with no flags
		{" 127.0.0.1:1, 127.0.0.1:2 ,", "127.0.0.1:1,127.0.0.1:2"},
	}
	for _, c := range cases {
		_, g := newRoot(cmdutil.IO{Getenv: func(k string) string {
			if k == "BATON_ENDPOINTS" {
				return c.env
			}
			return ""
		}})
		if got := strings.Join(g.Endpoints, ","); got != c.want {
			t.Errorf("BATON_ENDPOINTS=%q: endpoints %q, want %q", c.env, got, c.want)
		}
	}
}
