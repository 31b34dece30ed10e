package compat_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/compat"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rbac"
)

// securityDoc is the page the suite runs.
const securityDoc = "../../docs/security.md"

// What differs between docs/security.md and the test's run of it, and
// nothing else:
//
//   - docPKI, where the doc keeps certificates, is the test's temporary
//     directory, which is also every command's working directory (the doc's
//     bare ca.crt, policy.yaml, ./pki);
//   - the etcd line's member name and URLs (harnessFlags) are the harness's
//     members m1 to m3 on 127.0.0.1 and free ports (it adds their data
//     directories and initial cluster); the doc's URLs must be https;
//   - export BATON_ENDPOINTS is that cluster's endpoints;
//   - on etcd 3.4, --tls-min-version and its value are left out, as the doc
//     tells users of 3.4 to do;
//   - baton dev gets --listen and --listen-peer on free ports;
//   - etcd and etcdctl are the version's binaries, baton the one built from
//     this tree.
const docPKI = "/etc/etcd/pki"

// harnessFlags are the etcd flags the harness sets for each member; true
// when the value is a URL.
var harnessFlags = map[string]bool{
	"--name":                        false,
	"--listen-client-urls":          true,
	"--advertise-client-urls":       true,
	"--listen-peer-urls":            true,
	"--initial-advertise-peer-urls": true,
}

// tlsMinVersionFlag is the flag etcd 3.4 does not know.
const tlsMinVersionFlag = "--tls-min-version"

// checkDocStep reports why the suite could not run s as the doc has it.
func checkDocStep(s compat.Step) error {
	if s.Kind != compat.StepEtcd {
		return nil
	}
	seen := map[string]bool{}
	args := s.Args[1:]
	for i := 0; i < len(args); i++ {
		f := args[i]
		if !strings.HasPrefix(f, "--") {
			return fmt.Errorf("%v: %q is not a flag", s, f)
		}
		hasValue := i+1 < len(args) && !strings.HasPrefix(args[i+1], "--")
		if isURL, ok := harnessFlags[f]; ok {
			if !hasValue {
				return fmt.Errorf("%v: %s without a value", s, f)
			}
			if isURL && !strings.HasPrefix(args[i+1], "https://") {
				return fmt.Errorf("%v: %s %s is not an https URL", s, f, args[i+1])
			}
			seen[f] = true
		}
		if hasValue {
			i++
		}
	}
	for f := range harnessFlags {
		if !seen[f] {
			return fmt.Errorf("%v: no %s, which the harness sets per member", s, f)
		}
	}
	return nil
}

// docRun runs docs/security.md's steps against one etcd version.
type docRun struct {
	t   *testing.T
	b   compat.Binaries
	dir string
	env map[string]string
	c   *compat.Cluster
	// authEnable is the doc's `baton auth enable` line, for running it again.
	authEnable []string
}

func (d *docRun) subst(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = compat.ExpandVars(strings.ReplaceAll(a, docPKI, d.dir), d.env)
	}
	return out
}

func (d *docRun) environ() []string {
	env := os.Environ()
	for k, v := range d.env {
		env = append(env, k+"="+v)
	}
	return env
}

func (d *docRun) run(s compat.Step) {
	t := d.t
	t.Helper()
	if err := checkDocStep(s); err != nil {
		t.Fatal(err)
	}
	t.Logf("docs/security.md %v", s)
	switch s.Kind {
	case compat.StepEtcd:
		d.startEtcd(s)
	case compat.StepExport:
		if s.Args[0] != "BATON_ENDPOINTS" {
			t.Fatalf("docs/security.md %v: no substitution for %s", s, s.Args[0])
		}
		if d.c == nil {
			t.Fatalf("docs/security.md %v: no etcd started before", s)
		}
		d.env["BATON_ENDPOINTS"] = strings.Join(d.c.Endpoints(), ",")
	case compat.StepFile:
		if err := os.WriteFile(filepath.Join(d.dir, s.File), []byte(s.Content), 0o600); err != nil {
			t.Fatal(err)
		}
	case compat.StepBaton:
		args := d.subst(s.Args[1:])
		out, errOut := d.baton(args)
		d.expect(s, args, out, errOut)
	case compat.StepEtcdctl:
		cmd := exec.Command(d.b.Etcdctl, d.subst(s.Args[1:])...)
		cmd.Dir, cmd.Env = d.dir, d.environ()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/security.md %v: %v\n%s", s, err, out)
		}
		t.Logf("etcdctl printed:\n%s", out)
	case compat.StepBatonServe:
		d.serve(s)
	default:
		t.Fatalf("docs/security.md %v: no way to run a %v step", s, s.Kind)
	}
}

// baton runs the built baton in the doc's directory with its exports.
func (d *docRun) baton(args []string) (stdout, stderr string) {
	d.t.Helper()
	cmd := exec.Command(baton(d.t), args...)
	cmd.Dir, cmd.Env = d.dir, d.environ()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		d.t.Fatalf("baton %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// expect checks what the doc says a baton command prints.
func (d *docRun) expect(s compat.Step, args []string, out, errOut string) {
	t := d.t
	t.Helper()
	sub := strings.Join(args[:min(2, len(args))], " ")
	dry := false
	for _, a := range args {
		dry = dry || a == "--dry-run"
	}
	switch {
	case sub == "auth enable":
		d.authEnable = args
		if !strings.Contains(out, "enable-auth") {
			t.Fatalf("docs/security.md %v printed %q, want enable-auth", s, out)
		}
	case sub == "rbac apply" && !dry:
		if !strings.Contains(out, "grant-role baton:payments:readwrite to user payments-api") || strings.Contains(errOut, "warning") {
			t.Fatalf("docs/security.md %v:\n%s%s", s, out, errOut)
		}
	case sub == "rbac show":
		if !strings.Contains(out, "payments-api") || strings.Contains(errOut, "warning") {
			t.Fatalf("docs/security.md %v:\n%s%s", s, out, errOut)
		}
	}
}

// startEtcd starts the doc's etcd line as the harness's 3-member cluster.
func (d *docRun) startEtcd(s compat.Step) {
	t := d.t
	t.Helper()
	if d.c != nil {
		t.Fatalf("docs/security.md %v: a second etcd line", s)
	}
	var flags []string
	args := d.subst(s.Args[1:])
	for i := 0; i < len(args); i++ {
		f := args[i]
		n := 1
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			n = 2
		}
		switch _, owned := harnessFlags[f]; {
		case owned:
		case f == tlsMinVersionFlag && !d.b.AtLeast("3.5"):
		default:
			flags = append(flags, args[i:i+n]...)
		}
		i += n - 1
	}
	rootTLS, err := rbac.ClientFiles(d.dir, "root").ClientConfig()
	if err != nil {
		t.Fatalf("docs/security.md %v: root's certificate: %v", s, err)
	}
	d.c = compat.Start(t, d.b, compat.Options{TLS: true, Flags: flags, ClientTLS: rootTLS})
}

// serve runs `baton dev` until it says it serves, then stops it with
// SIGTERM as Ctrl-C would.
func (d *docRun) serve(s compat.Step) {
	t := d.t
	t.Helper()
	listen, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	args := append(d.subst(s.Args[1:]), "--listen", listen, "--listen-peer", peer)
	cmd := exec.Command(baton(t), args...)
	cmd.Dir, cmd.Env = d.dir, d.environ()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var got []string
	deadline := time.After(30 * time.Second)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("docs/security.md %v exited before serving:\n%s\n%s", s, strings.Join(got, "\n"), errOut.String())
			}
			got = append(got, l)
			ready = l == "press Ctrl-C to stop"
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("docs/security.md %v: not serving within 30s:\n%s\n%s", s, strings.Join(got, "\n"), errOut.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Drain until the process closes its stdout.
	go func() {
		for range lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("docs/security.md %v: after SIGTERM: %v\n%s", s, err, errOut.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("docs/security.md %v: still running 15s after SIGTERM", s)
	}
	if !strings.Contains(strings.Join(got, "\n"), "https://"+listen) {
		t.Errorf("docs/security.md %v printed no https endpoint:\n%s", s, strings.Join(got, "\n"))
	}
}

// TestSecurityDocSteps needs no etcd binaries: it fails fast when
// docs/security.md gains a shell line the compatibility suite cannot run.
func TestSecurityDocSteps(t *testing.T) {
	steps, err := compat.SecuritySteps(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	count := map[compat.StepKind]int{}
	for _, s := range steps {
		t.Logf("%v step %v", s.Kind, s)
		if err := checkDocStep(s); err != nil {
			t.Error(err)
		}
		count[s.Kind]++
	}
	if count[compat.StepEtcd] != 1 {
		t.Errorf("%d etcd lines in docs/security.md, want exactly 1 (the cluster the matrix runs on)", count[compat.StepEtcd])
	}
	if count[compat.StepBaton] == 0 || count[compat.StepFile] == 0 {
		t.Errorf("docs/security.md has no baton commands or no policy file: %v", steps)
	}
}
