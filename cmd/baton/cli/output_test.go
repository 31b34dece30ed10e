package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/hold"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/operate"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
)

func TestOutputGolden(t *testing.T) {
	leader := inspect.LeaderView{Election: "scheduler", Now: clitest.Now, Leader: &inspect.LeaderInfo{
		Value: "host-a", Key: "/baton/v1/election/scheduler/694d7f1c2a3b0001", Token: 42,
		Lease: 0x694d7f1c2a3b0001, TTL: 9 * time.Second, Since: clitest.T0,
	}}
	unknownSince := leader
	info := *leader.Leader
	info.Since = time.Time{}
	unknownSince.Leader = &info
	cands := inspect.CandidatesView{Election: "scheduler", Candidates: []election.Candidate{
		{Key: "/baton/v1/election/scheduler/694d7f1c2a3b0001", Value: "host-a", Token: 42, LeaseID: 0x694d7f1c2a3b0001, TTL: 9 * time.Second, Leader: true},
		{Key: "/baton/v1/election/scheduler/694d7f1c2a3b0007", Value: "host-b", Token: 57, LeaseID: 0x694d7f1c2a3b0007, TTL: 14 * time.Second},
		{Key: "/baton/v1/election/scheduler/694d7f1c2a3b0009", Value: "", Token: 60, LeaseID: 0x694d7f1c2a3b0009, TTL: -1},
	}}
	preferredCands := inspect.CandidatesView{Election: "scheduler", Candidates: []election.Candidate{
		{Key: "/baton/v1/election/scheduler/694d7f1c2a3b0001", Value: "host-a", Token: 42, LeaseID: 0x694d7f1c2a3b0001, TTL: 9 * time.Second,
			Leader: true, Priority: 10, Version: "v1.4.2", Strategy: election.Preferred, Record: "/baton/v1/candidate/scheduler/preferred/694d7f1c2a3b0001"},
		{Key: "/baton/v1/election/scheduler/694d7f1c2a3b0007", Value: "host-b\x1b[2J", LeaseID: 0x694d7f1c2a3b0007, TTL: 14 * time.Second,
			Priority: 10, Version: "v1.5.0", Strategy: election.Preferred, Record: "/baton/v1/candidate/scheduler/preferred/694d7f1c2a3b0007"},
	}}
	locks := inspect.LocksView{Namespace: "baton", Now: clitest.Now, Locks: []keyspace.LockRow{
		{Name: "jobs/nightly", Holder: mutex.Contender{Key: "/baton/v1/lock/jobs%2Fnightly/694d7f1c2a3b0003", Token: 12,
			Lease: 0x694d7f1c2a3b0003, TTL: 13 * time.Second, Identity: "web-1:4242"}, Since: clitest.T0, Waiters: 2},
		{Name: "migrate", Holder: mutex.Contender{Key: "/baton/v1/lock/migrate/694d7f1c2a3b0005", Token: 30,
			Lease: 0x694d7f1c2a3b0005, TTL: -1, Identity: "db-2:77"}},
		{Name: "exports", Kind: keyspace.KindSemaphore, Holders: 2, Limit: 3, Waiters: 1, Since: clitest.T0, Holder: mutex.Contender{
			Key: "/baton/v1/semaphore/exports/694d7f1c2a3b0011.p1", Token: 40, Lease: 0x694d7f1c2a3b0011, TTL: 12 * time.Second, Identity: "w-1:10"}},
		{Name: "exports", Kind: keyspace.KindSemaphore, Holders: 2, Limit: 3, Waiters: 1, Holder: mutex.Contender{
			Key: "/baton/v1/semaphore/exports/694d7f1c2a3b0012.p1", Token: 41, Lease: 0x694d7f1c2a3b0012, TTL: 14 * time.Second, Identity: "w-2:11"}},
		{Name: "catalog", Kind: keyspace.KindRead, Holders: 1, Waiters: 1, Holder: mutex.Contender{
			Key: "/baton/v1/rwlock/catalog/694d7f1c2a3b0013.r1", Token: 50, Lease: 0x694d7f1c2a3b0013, TTL: 9 * time.Second, Identity: "r-1:12"}},
	}}
	audit := keyspace.AuditView{Namespace: "baton", Entries: []keyspace.AuditEntry{{
		Key: "/baton/audit/v1/20260301T120000.000000000Z-694d7f1c2a3b0005",
		Record: keyspace.AuditRecord{
			Time: clitest.T0, Action: operate.ActionForceUnlock, Kind: "lock", Name: "migrate", Key: "/baton/v1/lock/migrate/694d7f1c2a3b0005",
			Holder: "db-2:77", Token: 30, Lease: "694d7f1c2a3b0005", TTLLeft: 4, Renewed: false,
			Reason: "db-2 powered off", Identity: "ops", IdentitySource: cmdutil.IdentityCertificate, OSUser: "alice", Host: "laptop", Result: operate.ResultDeleted,
		},
	}, {
		Key: "/baton/audit/v1/request/20260301T120000.500000000Z-request-30",
		Record: keyspace.AuditRecord{
			Time: clitest.T0.Add(500 * time.Millisecond), Action: keyspace.ActionRequestRelease, Kind: "lock", Name: "migrate", Key: "/baton/v1/lock/migrate/694d7f1c2a3b0005",
			Holder: "db-2:77", Token: 30, Lease: "694d7f1c2a3b0005", Reason: "reindex waits\x1b[2J", Identity: "reindex-job",
			IdentitySource: cmdutil.IdentityCertificate, OSUser: "svc", Host: "batch-3", Result: "requested",
		},
	}, {
		// As older versions wrote a request: directly under the trail, the
		// etcd identity without its source.
		Key: "/baton/audit/v1/20260301T120000.700000000Z-request-30",
		Record: keyspace.AuditRecord{
			Time: clitest.T0.Add(700 * time.Millisecond), Action: keyspace.ActionRequestRelease, Kind: "lock", Name: "migrate", Key: "/baton/v1/lock/migrate/694d7f1c2a3b0005",
			Holder: "db-2:77", Token: 30, Lease: "694d7f1c2a3b0005", Reason: "deploy", Identity: "deployer", OSUser: "bob", Host: "ci-1", Result: "requested",
		},
	}, keyspace.ParseAudit("/baton/audit/v1/20260301T120001.000000000Z-1", []byte("not json\x1b[2J"))}}
	observe := []inspect.ObserveEvent{
		{Time: clitest.T0, Election: "scheduler", Leader: election.Leader{Revision: 7}},
		{Time: clitest.T0.Add(1500 * time.Millisecond), Election: "scheduler", Leader: election.Leader{
			Key: "/baton/v1/election/scheduler/694d7f1c2a3b0001", Value: "host-a", Token: 42, LeaseID: 0x694d7f1c2a3b0001, Revision: 42}},
		{Time: clitest.T0.Add(3 * time.Second), Election: "scheduler", Leader: election.Leader{
			Key: "/baton/v1/election/scheduler/694d7f1c2a3b0002", Value: "host-b", Token: 57, LeaseID: 0x694d7f1c2a3b0002, Revision: 57,
			Priority: 5, Version: "v1.10", Strategy: election.Preferred}},
	}
	held := hold.HeldView{Kind: "lock", Name: "jobs/nightly", Key: "/baton/v1/lock/jobs%2Fnightly/694d7f1c2a3b0003",
		Token: 12, Lease: "694d7f1c2a3b0003", TTL: 15 * time.Second}
	leading := hold.HeldView{Kind: "election", Name: "scheduler", Value: "host-a", Key: "/baton/v1/election/scheduler/694d7f1c2a3b0001",
		Token: 42, Lease: "694d7f1c2a3b0001", TTL: 10 * time.Second}

	cases := []struct {
		name  string
		write func(b *bytes.Buffer, asJSON bool) error
	}{
		{"leader", func(b *bytes.Buffer, j bool) error { return inspect.WriteLeader(b, j, leader) }},
		{"leader-since-unknown", func(b *bytes.Buffer, j bool) error { return inspect.WriteLeader(b, j, unknownSince) }},
		{"leader-none", func(b *bytes.Buffer, j bool) error {
			return inspect.WriteLeader(b, j, inspect.LeaderView{Election: "scheduler", Now: clitest.Now})
		}},
		{"candidates", func(b *bytes.Buffer, j bool) error { return inspect.WriteCandidates(b, j, cands) }},
		{"candidates-preferred", func(b *bytes.Buffer, j bool) error { return inspect.WriteCandidates(b, j, preferredCands) }},
		{"candidates-none", func(b *bytes.Buffer, j bool) error {
			return inspect.WriteCandidates(b, j, inspect.CandidatesView{Election: "scheduler"})
		}},
		{"locks", func(b *bytes.Buffer, j bool) error { return inspect.WriteLocks(b, j, locks) }},
		{"locks-none", func(b *bytes.Buffer, j bool) error {
			return inspect.WriteLocks(b, j, inspect.LocksView{Namespace: "baton", Prefix: "jobs/", Now: clitest.Now})
		}},
		{"audit", func(b *bytes.Buffer, j bool) error { return inspect.WriteAudit(b, j, audit) }},
		{"audit-none", func(b *bytes.Buffer, j bool) error {
			return inspect.WriteAudit(b, j, keyspace.AuditView{Namespace: "baton"})
		}},
		{"observe", func(b *bytes.Buffer, j bool) error {
			for _, ev := range observe {
				if err := inspect.WriteObserveEvent(b, j, ev); err != nil {
					return err
				}
			}
			return nil
		}},
		{"held", func(b *bytes.Buffer, j bool) error {
			if err := hold.WriteHeld(b, j, held); err != nil {
				return err
			}
			return hold.WriteHeld(b, j, leading)
		}},
	}
	for _, c := range cases {
		for _, format := range []string{cmdutil.FormatTable, cmdutil.FormatJSON} {
			t.Run(c.name+"/"+format, func(t *testing.T) {
				var b bytes.Buffer
				if err := c.write(&b, format == cmdutil.FormatJSON); err != nil {
					t.Fatal(err)
				}
				clitest.Golden(t, c.name+"."+format+".golden", b.Bytes())
			})
		}
	}
}

func TestAgeText(t *testing.T) {
	cases := []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"},
		{1234 * time.Millisecond, "1.2s"},
		{-3 * time.Second, "0s"}, // a holder whose clock runs ahead
		{95 * time.Second, "1m35s"},
		{3*time.Hour + 20*time.Minute + 31*time.Second, "3h21m0s"},
	}
	for _, c := range cases {
		if got := cmdutil.AgeText(clitest.Now, clitest.Now.Add(-c.ago)); got != c.want {
			t.Errorf("ageText(%v ago) = %q, want %q", c.ago, got, c.want)
		}
	}
	if got := cmdutil.AgeText(clitest.Now, time.Time{}); got != "unknown" {
		t.Errorf("ageText(zero) = %q, want unknown", got)
	}
}

func TestTTLText(t *testing.T) {
	if got := cmdutil.TTLText(-1); got != "expired" {
		t.Errorf("ttlText(-1) = %q", got)
	}
	if got := cmdutil.TTLText(7 * time.Second); got != "7s" {
		t.Errorf("ttlText(7s) = %q", got)
	}
	if cmdutil.TTLSeconds(-1) != -1 || cmdutil.TTLSeconds(7*time.Second) != 7 {
		t.Errorf("ttlSeconds wrong")
	}
}
