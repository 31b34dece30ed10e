//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cli"
)

// A password given in BATON_USER=NAME:PASSWORD reaches the command's
// environment as the name alone.
func TestUserPasswordFromEnvironmentNeverReachesTheChild(t *testing.T) {
	const secret = "env-user-secret"
	p := startWithInput(t, []string{"BATON_USER=root:" + secret}, "",
		"--insecure-transport", "lock", "userenv", "--", "sh", "-c", `env; echo done`)
	if code := p.wait(20 * time.Second); code != cli.ExitOK {
		t.Fatalf("lock: exit %d\n%s%s", code, p.out(), p.errOut())
	}
	out := p.out()
	if !strings.Contains(out, "done") {
		t.Fatalf("the child did not run:\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the child saw the password of BATON_USER:\n%s", out)
	}
	if !strings.Contains(out, "BATON_USER=root\n") {
		t.Errorf("the child lost the user name of BATON_USER:\n%s", out)
	}
}

// The command, running as the same user as baton, cannot read the
// password from baton's /proc/PID/environ. Run as root, the test runs baton
// as nobody: root reads any process's environment.
func TestPasswordNotReadableFromBatonsProcEnviron(t *testing.T) {
	const secret = "environ-secret"
	exe := binary
	var attr *syscall.SysProcAttr
	if os.Getuid() == 0 {
		// A copy of the binary that nobody may run.
		dir := t.TempDir()
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		exe = filepath.Join(dir, "baton")
		b, err := os.ReadFile(binary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			t.Fatal(err)
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	// The supervisor's parent is baton.
	script := `bp=$(cut -d" " -f4 /proc/$PPID/stat)
echo "baton pid $bp"
cat /proc/$bp/environ | tr "\0" "\n"
echo done`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "--insecure-transport", "lock", "procenv", "--", "sh", "-c", script)
	cmd.Dir, cmd.SysProcAttr = "/", attr
	cmd.Env = append(os.Environ(), "BATON_ENDPOINTS="+srv.Endpoint(), "BATON_USER=root", "BATON_PASSWORD="+secret)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("lock: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "done") {
		t.Fatalf("the child did not run:\n%s", out)
	} else if strings.Contains(out, secret) {
		t.Errorf("the child read the password from baton's environment:\n%s", out)
	}
}

// The supervisor inherits baton's BATON_* variables but not its flags: a
// BATON_USER made valid by --insecure-transport on the command line must
// not make the supervisor refuse to start the command.
func TestSupervisorIgnoresTheGlobalEnvironment(t *testing.T) {
	p := startWithInput(t, []string{"BATON_USER=root", "BATON_PASSWORD=env-only"}, "",
		"--insecure-transport", "lock", "supervisor-env", "--", "sh", "-c", "echo ran")
	if code := p.wait(20 * time.Second); code != cli.ExitOK || !strings.Contains(p.out(), "ran") {
		t.Errorf("exit %d, want the command run and 0\nstdout:\n%s\nstderr:\n%s", code, p.out(), p.errOut())
	}
}
