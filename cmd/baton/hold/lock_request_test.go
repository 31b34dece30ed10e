package hold_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rbac"
)

// TestUnlockRequestStopsTheCommandAndReleases: baton lock NAME -- sleep
// 1000 gets a release request; its command gets SIGTERM, baton releases
// the lock and exits with the command's status (143); the audit trail
// shows the request.
func TestUnlockRequestStopsTheCommandAndReleases(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const ns = "clirequest"
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- clitest.RunTo(ctx, ns, &out, &errOut, "lock", "report", "--", "sleep", "1000") }()
	clitest.WaitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })
	code, rout, rerr := clitest.Run(ctx, t, ns, "unlock", "report", "--request", "--reason", "deploy at 10:00, INC-1")
	if code != cmdutil.ExitOK || !strings.Contains(rout, "asked the holder of lock \"report\"") {
		t.Fatalf("unlock --request: exit %d: %s%s", code, rout, rerr)
	}
	select {
	case code := <-done:
		if code != 128+15 {
			t.Fatalf("baton lock exited %d, want 143 (the command's SIGTERM): %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("baton lock did not end after the request: %s", errOut.String())
	}
	if s := errOut.String(); !strings.Contains(s, "release of lock \"report\" requested by") || !strings.Contains(s, "deploy at 10:00, INC-1") ||
		!strings.Contains(s, "passing terminated to the command") || !strings.Contains(s, "released lock \"report\"") {
		t.Fatalf("status lines:\n%s", s)
	}
	cli := clitest.Srv.Client(t)
	if g, _ := cli.Get(ctx, "/"+ns+"/v1/lock/report/", clientv3.WithPrefix(), clientv3.WithCountOnly()); g.Count != 0 {
		t.Fatal("the lock was not released")
	}
	g, err := cli.Get(ctx, rbac.AuditPrefix(ns), clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 1 || !strings.Contains(string(g.Kvs[0].Value), `"action":"request-release"`) {
		t.Fatalf("audit trail: %v %v", g, err)
	}
	if code, aout, _ := clitest.Run(ctx, t, ns, "audit"); code != cmdutil.ExitOK || !strings.Contains(aout, "request-release") {
		t.Fatalf("baton audit does not show the request (exit %d):\n%s", code, aout)
	}
	// Nobody holds now: refused, nothing written.
	if code, _, rerr := clitest.Run(ctx, t, ns, "unlock", "report", "--request", "--reason", "again"); code != cmdutil.ExitError || !strings.Contains(rerr, "nobody holds it") {
		t.Fatalf("request with no holder: exit %d: %s", code, rerr)
	}
}

// TestUnlockRequestWithoutACommandReleases: a bare baton lock releases on
// a request and exits 0; --release-signal picks another signal.
func TestUnlockRequestWithoutACommandReleases(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const ns = "clirequest2"
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- clitest.RunTo(ctx, ns, &out, &errOut, "lock", "bare") }()
	clitest.WaitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })
	if code, _, rerr := clitest.Run(ctx, t, ns, "unlock", "bare", "--request", "--reason", "r"); code != cmdutil.ExitOK {
		t.Fatalf("exit %d: %s", code, rerr)
	}
	if code := <-done; code != cmdutil.ExitOK {
		t.Fatalf("bare lock exited %d: %s", code, errOut.String())
	}
	errOut = clitest.SyncBuffer{}
	ready := filepath.Join(t.TempDir(), "trap-set")
	go func() {
		done <- clitest.RunTo(ctx, ns, &out, &errOut, "lock", "--release-signal", "USR1", "sig", "--", "sh", "-c",
			`trap 'exit 7' USR1; : > "$1"; while :; do sleep 0.05; done`, "sh", ready)
	}()
	// The command says when its trap is set; a request before that would
	// kill the shell with the signal's default action.
	clitest.WaitFor(t, func() bool { _, err := os.Stat(ready); return err == nil })
	if code, _, rerr := clitest.Run(ctx, t, ns, "unlock", "sig", "--request", "--reason", "r"); code != cmdutil.ExitOK {
		t.Fatalf("exit %d: %s", code, rerr)
	}
	if code := <-done; code != 7 {
		t.Fatalf("the command's USR1 trap should exit 7; baton lock exited %d: %s", code, errOut.String())
	}
}

func TestUnlockRequestUsageErrors(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	for _, args := range [][]string{
		{"unlock", "x", "--request"},
		{"unlock", "x", "--request", "--force", "--reason", "r"},
		{"unlock", "x", "--request", "--reason", "r", "--revoke-lease"},
		{"lock", "x", "--release-signal", "NOPE", "--", "true"},
		{"lock", "x", "--release-signal", "99", "--", "true"},
		{"lock", "x", "--lock-delay", "1500ms", "--", "true"},
	} {
		if code, _, errOut := clitest.Run(ctx, t, "clirequest3", args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d (%s); want %d", args, code, errOut, cmdutil.ExitUsage)
		}
	}
}

// TestUnlockRequestRefusedWithoutTheRight: a contender may lock but not
// ask for a release (the request's audit record takes the requesters or
// the operators access level): exit 78 and nothing written; an operator
// may.
func TestUnlockRequestRefusedWithoutTheRight(t *testing.T) {
	as := clitest.StartSecureDev(t, "worker,oncall,root", "namespaces:\n  - name: jobs\n    contenders: [worker]\n    operators: [oncall]\n")
	held := make(chan struct{})
	go func() {
		defer close(held)
		_, _, _ = as("worker", "--namespace", "jobs", "lock", "nightly", "--", "sleep", "30")
	}()
	clitest.WaitFor(t, func() bool {
		code, out, _ := as("oncall", "--namespace", "jobs", "locks")
		return code == cmdutil.ExitOK && strings.Contains(out, "nightly")
	})
	code, _, errOut := as("worker", "--namespace", "jobs", "unlock", "nightly", "--request", "--reason", "mine now")
	if code != cmdutil.ExitDenied || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("a contender's request: exit %d, want %d: %s", code, cmdutil.ExitDenied, errOut)
	}
	select {
	case <-held:
		t.Fatal("the worker's command ended after a refused request")
	case <-time.After(500 * time.Millisecond):
	}
	code, out, _ := as("oncall", "--namespace", "jobs", "-o", "json", "audit")
	if code != cmdutil.ExitOK || strings.Contains(out, "request-release") {
		t.Fatalf("the refused request left an audit record (exit %d): %s", code, out)
	}
	code, rout, errOut := as("oncall", "--namespace", "jobs", "unlock", "nightly", "--request", "--reason", "maintenance")
	if code != cmdutil.ExitOK || !strings.Contains(rout, "asked the holder") {
		t.Fatalf("an operator's request: exit %d: %s%s", code, rout, errOut)
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker's lock did not end after the operator's request")
	}
}

// TestResignRequestStopsTheLeadersCommand: baton elect's command gets the
// request to step down as SIGTERM, and baton resigns.
func TestResignRequestStopsTheLeadersCommand(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const ns = "clirequest4"
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- clitest.RunTo(ctx, ns, &out, &errOut, "elect", "sched", "host-a", "--", "sleep", "1000")
	}()
	clitest.WaitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })
	if code, rout, rerr := clitest.Run(ctx, t, ns, "resign", "sched", "--request", "--reason", "move to host-b"); code != cmdutil.ExitOK {
		t.Fatalf("resign --request: exit %d: %s%s", code, rout, rerr)
	}
	select {
	case code := <-done:
		if code != 143 || !strings.Contains(errOut.String(), "move to host-b") {
			t.Fatalf("elect exited %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("elect did not end: %s", errOut.String())
	}
	if code, lout, _ := clitest.Run(ctx, t, ns, "leader", "sched"); code == cmdutil.ExitOK && strings.Contains(lout, "host-a") {
		t.Fatalf("host-a still leads: %s", lout)
	}
}

// TestUnlockRequestByARequester: a user listed under requesters may ask
// the holder to let go, and the holder's command ends; the record lies
// under the request records of the trail, with the requester's etcd
// identity, and baton audit shows it to the requester. The same user's
// --force is refused (exit 78) and writes nothing.
func TestUnlockRequestByARequester(t *testing.T) {
	as := clitest.StartSecureDev(t, "worker,waiting-job,oncall,root",
		"namespaces:\n  - name: jobs\n    contenders: [worker]\n    requesters: [waiting-job]\n    operators: [oncall]\n")
	held := make(chan struct{})
	go func() {
		defer close(held)
		_, _, _ = as("worker", "--namespace", "jobs", "lock", "nightly", "--", "sleep", "30")
	}()
	clitest.WaitFor(t, func() bool {
		code, out, _ := as("waiting-job", "--namespace", "jobs", "locks")
		return code == cmdutil.ExitOK && strings.Contains(out, "nightly")
	})
	code, _, errOut := as("waiting-job", "--namespace", "jobs", "unlock", "nightly", "--force", "--reason", "mine now")
	if code != cmdutil.ExitDenied || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("a requester's force-unlock: exit %d, want %d: %s", code, cmdutil.ExitDenied, errOut)
	}
	if code, out, errOut := as("root", "--namespace", "jobs", "-o", "json", "audit"); code != cmdutil.ExitOK || strings.Contains(out, `"action"`) {
		t.Fatalf("the refused force left an audit record (exit %d): %s%s", code, out, errOut)
	}
	select {
	case <-held:
		t.Fatal("the worker's command ended after a refused force")
	case <-time.After(500 * time.Millisecond):
	}

	code, rout, errOut := as("waiting-job", "--namespace", "jobs", "-o", "json", "unlock", "nightly", "--request", "--reason", "reindex waits")
	if code != cmdutil.ExitOK {
		t.Fatalf("a requester's request: exit %d: %s%s", code, rout, errOut)
	}
	var made struct {
		Audit string `json:"audit_key"`
	}
	if err := json.Unmarshal([]byte(rout), &made); err != nil || !strings.HasPrefix(made.Audit, "/jobs/audit/v1/request/") {
		t.Fatalf("audit key %q (%v), want it under /jobs/audit/v1/request/: %s", made.Audit, err, rout)
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker's lock did not end after the requester's request")
	}
	code, aout, errOut := as("waiting-job", "--namespace", "jobs", "audit")
	if code != cmdutil.ExitOK || !strings.Contains(aout, "request-release") || !strings.Contains(aout, "waiting-job (certificate)") ||
		!strings.Contains(aout, "reindex waits") {
		t.Fatalf("baton audit as the requester (exit %d):\n%s%s", code, aout, errOut)
	}
	code, jout, _ := as("oncall", "--namespace", "jobs", "-o", "json", "audit")
	var listed struct {
		Records []struct {
			Key    string `json:"audit_key"`
			Action string `json:"action"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(jout), &listed); code != cmdutil.ExitOK || err != nil || len(listed.Records) != 1 ||
		listed.Records[0].Key != made.Audit || listed.Records[0].Action != keyspace.ActionRequestRelease {
		t.Fatalf("audit records (exit %d, %v): %s", code, err, jout)
	}
}

// TestAuditListsEveryRecordInTimeOrder: force-unlock records, request
// records under the request sub-prefix and request records where older
// versions wrote them (directly under the trail) are listed together,
// oldest first, in JSON and in the table.
func TestAuditListsEveryRecordInTimeOrder(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	const ns = "cliauditorder"
	cli := clitest.Srv.Client(t)
	rec := func(at, action, name string) string {
		return `{"time":"` + at + `","action":"` + action + `","kind":"lock","name":"` + name + `"}`
	}
	put := []struct{ key, value string }{
		{rbac.AuditPrefix(ns) + "20260301T120003.000000000Z-694d7f1c2a3b0005", rec("2026-03-01T12:00:03Z", "force-unlock", "d")},
		{rbac.RequestAuditPrefix(ns) + "20260301T120002.000000000Z-request-9", rec("2026-03-01T12:00:02Z", "request-release", "c")},
		{rbac.AuditPrefix(ns) + "20260301T120001.000000000Z-request-7", rec("2026-03-01T12:00:01Z", "request-release", "b")},
		{rbac.AuditPrefix(ns) + "20260301T120000.000000000Z-694d7f1c2a3b0001", rec("2026-03-01T12:00:00Z", "force-unlock", "a")},
		{rbac.RequestAuditPrefix(ns) + "20260301T120004.000000000Z-request-11", rec("2026-03-01T12:00:04Z", "request-release", "e")},
	}
	for _, p := range put {
		if _, err := cli.Put(ctx, p.key, p.value); err != nil {
			t.Fatal(err)
		}
	}
	code, jout, errOut := clitest.Run(ctx, t, ns, "-o", "json", "audit")
	var listed struct {
		Records []struct {
			Name string `json:"name"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(jout), &listed); code != cmdutil.ExitOK || err != nil {
		t.Fatalf("audit -o json: exit %d, %v: %s%s", code, err, jout, errOut)
	}
	var names []string
	for _, r := range listed.Records {
		names = append(names, r.Name)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(names, want) {
		t.Fatalf("records in the order %v, want %v (time order)", names, want)
	}
	code, tout, _ := clitest.Run(ctx, t, ns, "audit")
	lines := strings.Split(strings.TrimSpace(tout), "\n")
	if code != cmdutil.ExitOK || len(lines) != 6 {
		t.Fatalf("audit table (exit %d):\n%s", code, tout)
	}
	for i, want := range []string{"12:00:00Z  force-unlock", "12:00:01Z  request-release", "12:00:02Z  request-release",
		"12:00:03Z  force-unlock", "12:00:04Z  request-release"} {
		if !strings.Contains(lines[i+1], want) {
			t.Fatalf("table row %d is %q, want %q:\n%s", i+1, lines[i+1], want, tout)
		}
	}
}

// TestSortAudit orders by the time in the key, wherever the request
// records lie, and leaves a key without a time (malformed) in key order.
func TestSortAudit(t *testing.T) {
	const ns = "s"
	keys := []string{
		"/s/audit/v1/request/20260301T120002.000000000Z-request-3",
		"/s/audit/v1/junk",
		"/s/audit/v1/20260301T120001.000000000Z-request-2",
		"/s/audit/v1/20260301T120003.000000000Z-4",
		"/s/audit/v1/20260301T120000.000000000Z-1",
		"/s/audit/v1/request/20260301T120000.000000000Z-request-0",
	}
	var es []keyspace.AuditEntry
	for _, k := range keys {
		es = append(es, keyspace.AuditEntry{Key: k})
	}
	keyspace.SortAudit(ns, es)
	var got []string
	for _, e := range es {
		got = append(got, e.Key)
	}
	want := []string{
		"/s/audit/v1/20260301T120000.000000000Z-1",
		"/s/audit/v1/request/20260301T120000.000000000Z-request-0",
		"/s/audit/v1/20260301T120001.000000000Z-request-2",
		"/s/audit/v1/request/20260301T120002.000000000Z-request-3",
		"/s/audit/v1/20260301T120003.000000000Z-4",
		"/s/audit/v1/junk",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
