package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// startWithInput runs baton with extra environment and a standard input,
// like start.
func startWithInput(t *testing.T, env []string, stdin string, args ...string) *proc {
	t.Helper()
	return launch(t, launchConfig{endpoints: srv.Endpoint(), env: env, stdin: strings.NewReader(stdin)}, args...)
}

func TestForceUnlockFreesOneLockOfFiftyOnASharedLease(t *testing.T) {
	ctx := ctxT(t)
	const ns = "bulk"
	s, err := concurrency.NewSession(client(t), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	locks := make([]*mutex.Lock, 50)
	for i := range locks {
		m, err := mutex.New(client(t), fmt.Sprintf("bulk-%04d", i), mutex.WithNamespace(ns), mutex.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if locks[i], err = m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	victim := locks[7]

	code, out, errOut := runBaton(t, 20*time.Second, "--namespace", ns, "unlock", "bulk-0007",
		"--force", "--reason", "e2e: one of fifty", "--even-if-alive", "--watch", "500ms")
	if code != cli.ExitOK || !strings.Contains(out, "deleted key "+victim.Key()) {
		t.Fatalf("unlock: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	select {
	case <-victim.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the forced lock's context did not end")
	}
	for i, l := range locks {
		if i == 7 {
			continue
		}
		if l.Context().Err() != nil {
			t.Errorf("lock %d lost with the forced one: %v", i, context.Cause(l.Context()))
		}
	}
	resp, err := client(t).Get(ctx, "/"+ns+"/v1/lock/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 49 {
		t.Fatalf("%d lock keys left, want the other 49", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == victim.Key() {
			t.Fatalf("the forced key %s is still there", kv.Key)
		}
	}
	if ttl, err := client(t).TimeToLive(ctx, s.Lease()); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the shared lease was touched: %+v %v", ttl, err)
	}

	// The record names the one key, in the namespace's audit trail.
	code, out, _ = runBaton(t, 10*time.Second, "--namespace", ns, "audit", "-o", "json")
	var audit struct {
		Records []map[string]any `json:"records"`
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &audit) != nil || len(audit.Records) != 1 {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if r := audit.Records[0]; r["key"] != victim.Key() || r["result"] != "deleted" || r["lease_keys"] != nil ||
		!strings.HasPrefix(r["audit_key"].(string), "/"+ns+"/audit/v1/") {
		t.Errorf("audit record %v", r)
	}

	// --revoke-lease is the explicit way to free them all: it lists and
	// records every key first.
	code, out, errOut = runBaton(t, 20*time.Second, "--namespace", ns, "unlock", "bulk-0008",
		"--force", "--reason", "e2e: whole lease", "--even-if-alive", "--watch", "500ms", "--revoke-lease")
	if code != cli.ExitOK || !strings.Contains(out, "holds 49 key(s)") || !strings.Contains(out, "revoked lease") {
		t.Fatalf("unlock --revoke-lease: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, _ = runBaton(t, 10*time.Second, "--namespace", ns, "audit", "-o", "json")
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &audit) != nil || len(audit.Records) != 2 {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if r := audit.Records[1]; r["result"] != "revoked" || len(r["lease_keys"].([]any)) != 49 {
		t.Errorf("revoke record %v", r)
	}
}

func TestForceResignRemovesTheLeaderOnly(t *testing.T) {
	ctx := ctxT(t)
	const ns = "resign"
	e1, _ := election.New(client(t), "sched", election.WithNamespace(ns))
	defer e1.Close()
	e2, _ := election.New(client(t), "sched", election.WithNamespace(ns))
	defer e2.Close()
	t1, err := e1.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan *election.Term, 1)
	go func() {
		t2, err := e2.Campaign(ctx, "host-b")
		if err != nil {
			t.Error(err)
		}
		second <- t2
	}()
	etcdtest.WaitKeys(t, client(t), "/"+ns+"/v1/election/sched/", 2)

	// unlock on an election says which command to use.
	code, _, errOut := runBaton(t, 10*time.Second, "--namespace", ns, "unlock", "sched", "--force", "--reason", "r")
	if code != cli.ExitUsage || !strings.Contains(errOut, "baton resign sched --force") {
		t.Fatalf("unlock on an election: exit %d, stderr %s", code, errOut)
	}
	code, out, errOut := runBaton(t, 20*time.Second, "--namespace", ns, "resign", "sched",
		"--force", "--reason", "e2e: hung leader", "--even-if-alive", "--watch", "300ms")
	if code != cli.ExitOK || !strings.Contains(out, "deleted key "+t1.Key()) {
		t.Fatalf("resign --force: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	select {
	case <-t1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the forced leader's term did not end")
	}
	select {
	case t2 := <-second:
		if t2 == nil || t2.Token() <= t1.Token() {
			t.Fatalf("next leader %v", t2)
		}
		_ = t2.Resign(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the next candidate did not lead")
	}
}

// hostile is an election value and lock holder that tries every trick on
// a terminal: clear screen, carriage return, a forged line, a right-to-left
// override, a zero-width space.
const hostile = "evil\x1b[2J\rFAKE\nleader ok\u202ekcab\u200b"

// rawUnsafe reports a control or format character other than the
// newlines and tabs of the output's own layout.
func rawUnsafe(s string) (rune, bool) {
	for _, line := range strings.Split(s, "\n") {
		for _, r := range line {
			if r == '\t' {
				continue
			}
			if r < 0x20 || r == 0x7f || r == 0x202e || r == 0x200b || r == '\r' {
				return r, true
			}
		}
	}
	return 0, false
}

func TestHostileTextIsPrintedQuotedByEveryCommand(t *testing.T) {
	ctx := ctxT(t)
	const ns = "hostile"
	e, _ := election.New(client(t), "sched", election.WithNamespace(ns))
	defer e.Close()
	term, err := e.Campaign(ctx, hostile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = term.Resign(ctx) }()
	// A contender may write any value at its key: the holder's identity.
	lease, err := client(t).Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("/%s/v1/lock/job/%x", ns, int64(lease.ID))
	if _, err := client(t).Put(ctx, key, hostile, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	obs := start(t, "--namespace", ns, "observe", "sched")
	obs.waitLine("token", 10*time.Second)
	_ = obs.cmd.Process.Signal(os.Interrupt)
	obs.wait(5 * time.Second)

	runs := [][]string{
		{"leader", "sched"}, {"candidates", "sched"}, {"locks"},
		{"unlock", "job", "--force", "--reason", "e2e: hostile", "--even-if-alive", "--watch", "300ms"},
		{"audit"},
	}
	outputs := map[string]string{"observe": obs.out()}
	for _, a := range runs {
		for _, format := range []string{"table", "json"} {
			if a[0] == "unlock" && format == "json" {
				continue
			}
			code, out, errOut := runBaton(t, 15*time.Second, append([]string{"--namespace", ns, "-o", format}, a...)...)
			if code != cli.ExitOK {
				t.Fatalf("%v: exit %d\n%s%s", a, code, out, errOut)
			}
			outputs[a[0]+"/"+format] = out + errOut
		}
	}
	for what, out := range outputs {
		if r, bad := rawUnsafe(out); bad {
			t.Errorf("%s prints %U raw:\n%q", what, r, out)
		}
		if strings.Contains(out, "\nleader ok") || strings.HasPrefix(out, "leader ok") {
			t.Errorf("%s prints a forged line:\n%s", what, out)
		}
		if !strings.Contains(out, `\x1b[2J\rFAKE\nleader ok\u202ekcab\u200b`) && !strings.Contains(out, `\u001b[2J\rFAKE\nleader ok\u202ekcab\u200b`) {
			t.Errorf("%s does not show the value escaped:\n%s", what, out)
		}
	}
}

func TestBadInputExitsAtOnceWithoutAServer(t *testing.T) {
	// A listener that speaks no etcd and counts who connects: bad input
	// must be refused before any dial, so it must see no connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-accepted })
	addr := ln.Addr().String()
	none := []string{"--endpoints", addr, "--dial-timeout", "3s"}
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"name with bidi override", []string{"leader", "a\u202eb"}, "NAME"},
		{"name with zero-width space", []string{"lock", "a\u200bb", "--try"}, "NAME"},
		{"name with escape", []string{"candidates", "a\x1b[2Jb"}, "control character"},
		{"empty name", []string{"observe", ""}, "must not be empty"},
		{"prefix with escape", []string{"locks", "\x1b[31m"}, "PREFIX"},
		{"ttl below etcd's minimum", []string{"lock", "x", "--ttl", "1s"}, "--ttl 1s"},
		{"ttl not whole seconds", []string{"elect", "x", "v", "--ttl", "2500ms"}, "--ttl 2.5s"},
		{"ttl above the cap", []string{"lock", "x", "--ttl", "1h"}, "--ttl 1h0m0s"},
		{"elect with an unknown strategy", []string{"elect", "x", "v", "--strategy", "newest"}, "--strategy"},
		{"elect with a bad version", []string{"elect", "x", "v", "--version", "v1 beta"}, "--version"},
		{"elect with a short handover deadline", []string{"elect", "x", "v", "--strategy", "preferred", "--handover-deadline", "1ms"}, "--handover-deadline"},
		{"reason with newline", []string{"unlock", "x", "--force", "--reason", "ok\n2026-01-01 forged"}, "--reason"},
		{"reason with bidi", []string{"resign", "x", "--force", "--reason", "a\u202eb"}, "--reason"},
		{"unlock without force", []string{"unlock", "x", "--reason", "r"}, "--force"},
		{"endpoint without port", []string{"--endpoints", "127.0.0.1", "locks"}, "--endpoints"},
		{"endpoint port out of range", []string{"--endpoints", "127.0.0.1:99999", "locks"}, "port"},
		{"endpoint empty host", []string{"--endpoints", ":2379", "locks"}, "host is empty"},
		{"endpoint ftp", []string{"--endpoints", "ftp://127.0.0.1:2379", "locks"}, "scheme"},
		{"unknown subcommand", []string{"auth", "enabel"}, `unknown command "enabel"`},
		{"command without dash", []string{"lock", "x", "sleep", "1"}, "baton lock x -- sleep 1"},
		{"user with empty password", []string{"--user", "root:", "locks"}, "password after ':' is empty"},
		{"password over plaintext", []string{"--user", "root", "--endpoints", "http://" + addr, "locks"}, "plaintext"},
		{"cacert with http", []string{"--cacert", "ca.crt", "--endpoints", "http://" + addr, "locks"}, "plaintext"},
		{"bad BATON_ variable", []string{"locks"}, "BATON_DIAL_TIMEOUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var env []string
			args := append(append([]string{}, c.args...), none...)
			if strings.HasPrefix(c.name, "endpoint") || strings.Contains(c.name, "plaintext") || strings.Contains(c.name, "http") {
				args = c.args // their own endpoints
			}
			if c.name == "bad BATON_ variable" {
				env = []string{"BATON_DIAL_TIMEOUT=soon", "BATON_ENDPOINTS=" + addr}
			}
			before := dials.Load()
			p := startWithInput(t, env, "", args...)
			code := p.wait(10 * time.Second)
			if code != cli.ExitUsage || !strings.Contains(p.errOut(), c.msg) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, p.errOut(), cli.ExitUsage, c.msg)
			}
			if n := dials.Load() - before; n != 0 {
				t.Errorf("refused bad input only after %d connection(s) to %s; want none", n, addr)
			}
		})
	}
}

func TestSecondDevOnTheSameDataDirExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	addr := func() string {
		a, err := etcdtest.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := start(t, "dev", "--data-dir", dir, "--listen", addr(), "--listen-peer", addr())
	first.waitLine("press Ctrl-C", 30*time.Second)

	began := time.Now()
	second := start(t, "dev", "--data-dir", dir, "--listen", addr(), "--listen-peer", addr())
	code := second.wait(5 * time.Second)
	if took := time.Since(began); code != 1 || took > 2*time.Second {
		t.Fatalf("second dev: exit %d after %v, want 1 within 2s; stderr:\n%s", code, took, second.errOut())
	}
	if want := fmt.Sprintf("data dir in use by PID %d", first.cmd.Process.Pid); !strings.Contains(second.errOut(), want) {
		t.Errorf("stderr %q lacks %q", second.errOut(), want)
	}
	_ = first.cmd.Process.Signal(os.Interrupt)
	if code := first.wait(15 * time.Second); code != cli.ExitOK {
		t.Errorf("first dev exit %d", code)
	}
}

func TestDevWarnsWhenListeningBeyondLoopbackInPlaintext(t *testing.T) {
	_, port, _ := strings.Cut(must(etcdtest.FreeAddr()), ":")
	p := start(t, "dev", "--listen", "0.0.0.0:"+port, "--listen-peer", must(etcdtest.FreeAddr()))
	p.waitLine("press Ctrl-C", 30*time.Second)
	_ = p.cmd.Process.Signal(os.Interrupt)
	p.wait(15 * time.Second)
	if !strings.Contains(p.errOut(), "warning: serving 0.0.0.0:"+port+" beyond loopback in plaintext without auth") {
		t.Errorf("no warning; stderr:\n%s", p.errOut())
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// secureDev runs baton dev with TLS, client-certificate auth and a policy
// with a contender, an observer and an operator of namespace pay, and a
// contender that logs in with a password.
type secureDev struct {
	pki      string
	endpoint string
}

const (
	payApp  = "pay-app"
	payOps  = "pay-ops"
	payOper = "pay-oper"
	pwUser  = "pay-batch"
	pwPass  = "right-password"
)

func startSecureDev(t *testing.T) secureDev {
	t.Helper()
	pki := filepath.Join(t.TempDir(), "pki")
	if code, _, errOut := runBaton(t, 30*time.Second, "certs", "init", "--dir", pki, "--users",
		strings.Join([]string{"root", payApp, payOps, payOper}, ",")); code != cli.ExitOK {
		t.Fatalf("certs init: %s", errOut)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	doc := fmt.Sprintf("namespaces:\n  - name: pay\n    contenders: [%s]\n    observers: [%s]\n    operators: [%s]\n", payApp, payOps, payOper)
	if err := os.WriteFile(policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := must(etcdtest.FreeAddr())
	dev := start(t, "dev", "--listen", listen, "--listen-peer", must(etcdtest.FreeAddr()), "--tls", pki, "--auth", "--policy", policy)
	dev.waitLine("press Ctrl-C", 30*time.Second)
	t.Cleanup(func() {
		_ = dev.cmd.Process.Signal(os.Interrupt)
		dev.wait(15 * time.Second)
	})
	d := secureDev{pki: pki, endpoint: "https://" + listen}
	root := d.client(t, "root")
	// A contender that logs in with a password (etcd's --client-cert-auth
	// still wants a certificate; the password's token wins over its CN).
	if _, err := root.UserAdd(ctxT(t), pwUser, pwPass); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctxT(t), pwUser, rbac.RoleName("pay", rbac.ReadWrite)); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d secureDev) client(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cfg, err := rbac.ClientFiles(d.pki, user).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.endpoint}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// as is the flags of a user with its certificate; "" for none.
func (d secureDev) as(user string, args ...string) []string {
	f := rbac.ClientFiles(d.pki, user)
	flags := []string{"--endpoints", d.endpoint, "--cacert", f.CA, "--namespace", "pay"}
	if user != "" {
		flags = append(flags, "--cert", f.Cert, "--key", f.Key)
	}
	return append(flags, args...)
}

func TestAuditTrailOnlyOperatorsWriteWithTheirCertificateIdentity(t *testing.T) {
	d := startSecureDev(t)
	ctx := ctxT(t)

	// A contender can neither forge nor erase the trail.
	app := d.client(t, payApp)
	if _, err := app.Put(ctx, rbac.AuditPrefix("pay")+"forged", `{"action":"force-unlock"}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("contender put under the audit trail: %v, want permission denied", err)
	}
	if _, err := app.Delete(ctx, rbac.AuditPrefix("pay"), clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("contender delete under the audit trail: %v, want permission denied", err)
	}

	holder := start(t, d.as(payApp, "lock", "incident")...)
	holder.waitLine("holding lock", 15*time.Second)

	// Neither a contender nor an observer may force; they learn it at
	// once, not after watching the lease for a third of its 15s TTL.
	for _, who := range []string{payApp, payOps} {
		began := time.Now()
		code, _, errOut := runBaton(t, 20*time.Second, d.as(who, "unlock", "incident", "--force", "--reason", "not mine")...)
		if code != cli.ExitDenied || !strings.Contains(errOut, "permission denied") {
			t.Errorf("%s: exit %d, want %d; stderr %s", who, code, cli.ExitDenied, errOut)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("%s: refused after %v, want before watching the lease", who, took)
		}
	}

	code, out, errOut := runBaton(t, 20*time.Second, d.as(payOper, "unlock", "incident", "--force",
		"--reason", "e2e: operator", "--even-if-alive", "--watch", "300ms")...)
	if code != cli.ExitOK {
		t.Fatalf("operator unlock: exit %d\n%s%s", code, out, errOut)
	}
	if code := holder.wait(10 * time.Second); code != cli.ExitOwnershipLost {
		t.Errorf("holder exit %d, want %d", code, cli.ExitOwnershipLost)
	}

	code, out, errOut = runBaton(t, 10*time.Second, d.as(payOps, "audit", "-o", "json")...)
	var audit struct {
		Records []map[string]any `json:"records"`
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &audit) != nil || len(audit.Records) != 1 {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errOut)
	}
	if r := audit.Records[0]; r["etcd_identity"] != payOper || r["etcd_identity_source"] != "certificate" {
		t.Errorf("audit identity %v/%v, want %s from the certificate", r["etcd_identity"], r["etcd_identity_source"], payOper)
	}
}

func TestRefusalsExitWithTheirOwnCode(t *testing.T) {
	d := startSecureDev(t)
	// No client certificate: the TLS handshake is refused.
	code, _, errOut := runBaton(t, 20*time.Second, d.as("", "--dial-timeout", "1s", "locks")...)
	if code != cli.ExitDenied || !strings.Contains(errOut, "certificate") {
		t.Errorf("no certificate: exit %d, want %d; stderr %s", code, cli.ExitDenied, errOut)
	}
	// A wrong password.
	pw := func(password string) (int, string) {
		p := startWithInput(t, nil, password+"\n", d.as(payOps, "--user", pwUser, "--password-stdin", "locks")...)
		return p.wait(20 * time.Second), p.errOut()
	}
	if code, errOut := pw("wrong-password"); code != cli.ExitDenied || !strings.Contains(errOut, "authentication failed") {
		t.Errorf("wrong password: exit %d, want %d; stderr %s", code, cli.ExitDenied, errOut)
	}
	if code, errOut := pw(pwPass); code != cli.ExitOK {
		t.Errorf("right password: exit %d; stderr %s", code, errOut)
	}
	// Nothing listens: unavailable, with the cause.
	code, _, errOut = runBaton(t, 20*time.Second, "--endpoints", "127.0.0.1:1", "--dial-timeout", "500ms", "locks")
	if code != cli.ExitUnavailable || !strings.Contains(errOut, "connection refused") {
		t.Errorf("nothing listening: exit %d, want %d; stderr %s", code, cli.ExitUnavailable, errOut)
	}
}

func TestPasswordNeverReachesTheChild(t *testing.T) {
	d := startSecureDev(t)
	p := startWithInput(t, []string{"BATON_PASSWORD=" + pwPass}, "",
		d.as(payOps, "--user", pwUser, "lock", "envcheck", "--", "sh", "-c", `env; echo "ARGV $0 $*"; echo done`)...)
	if code := p.wait(20 * time.Second); code != cli.ExitOK {
		t.Fatalf("lock: exit %d\n%s%s", code, p.out(), p.errOut())
	}
	out := p.out()
	if !strings.Contains(out, "BATON_FENCING_TOKEN=") || !strings.Contains(out, "done") {
		t.Fatalf("the child did not run:\n%s", out)
	}
	if strings.Contains(out, "BATON_PASSWORD") || strings.Contains(out, pwPass) {
		t.Errorf("the child saw the password:\n%s", out)
	}
	if strings.Contains(p.errOut(), pwPass) {
		t.Errorf("baton printed the password:\n%s", p.errOut())
	}
}
