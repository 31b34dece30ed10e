package chaos_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// TestZombieHolderPausedPastTTL freezes a holder process with SIGSTOP
// right after it checked its Context, lets a new holder acquire and
// write, then resumes it: every write it makes with its old token is
// rejected by the in-memory guard, by its fenced etcd transaction, by the
// bare ownership comparison and by the durable etcd guard, and nothing
// with its token is admitted after the new holder's first write.
func TestZombieHolderPausedPastTTL(t *testing.T) {
	c := cluster.Start(t, 3)
	res := newResource(t)
	const ttl = 2 * time.Second
	for _, role := range []string{"lock", "leader"} {
		t.Run(role, func(t *testing.T) {
			name := "zombie-" + role
			register := "/chaos/register/" + role
			ch := startChild(t, role, map[string]string{
				endpointsEnv: strings.Join(c.Endpoints(), ","), nameEnv: name, ttlEnv: ttl.String(),
				resourceEnv: res.URL(name), registerEnv: register,
			})
			tok1, _ := ch.held(30 * time.Second)
			ch.send("check")
			if l := ch.next(5 * time.Second); l != "alive" {
				t.Fatalf("child's check said %q, want alive", l)
			}
			ch.signal(syscall.SIGSTOP)
			stopped := time.Now()

			cli := c.Client(t)
			guard, err := fencing.NewEtcdGuard(cli)
			if err != nil {
				t.Fatal(err)
			}
			h2 := acquireOwner(t, cli, role, name, ttl)
			took := time.Since(stopped)
			if h2.Token() <= tok1 {
				t.Fatalf("new holder's token %d not above the zombie's %d", h2.Token(), tok1)
			}
			// The new holder writes first, by every path.
			ctx := ctxTimeout(t, 10*time.Second)
			if st, err := postWrite(ctx, http.DefaultClient, res.URL(name), h2.Token(), "new-1"); err != nil || st != http.StatusOK {
				t.Fatalf("new holder's write: %s", describe(st, err))
			}
			if _, err := guard.Write(ctx, h2, register, clientv3.OpPut(register+"/value", "new-1")); err != nil {
				t.Fatalf("new holder's guarded etcd write: %v", err)
			}
			if _, err := h2.Txn(ctx).Then(clientv3.OpPut(register, "new-1")).Commit(); err != nil {
				t.Fatalf("new holder's fenced txn: %v", err)
			}

			ch.signal(syscall.SIGCONT)
			var fencedBy []string
			for i := range 3 {
				ch.send("write zombie-" + string(rune('a'+i)))
				for {
					l := ch.next(15 * time.Second)
					if l == "wrote" {
						break
					}
					if strings.HasPrefix(l, "ctx ") {
						if i == 0 {
							figure(t, "zombie's Context after its first late write: %s", strings.TrimPrefix(l, "ctx "))
						}
						continue
					}
					f := strings.Fields(l)
					if len(f) < 3 || f[0] != "result" || f[2] != "rejected" {
						t.Errorf("zombie write %d: %q, want rejected", i, l)
						continue
					}
					if i == 0 && f[1] == "fenced-txn" {
						fencedBy = append(fencedBy, strings.Join(f[3:], " "))
					}
					if f[1] == "etcd-guard" && !strings.Contains(l, fencing.ErrStale.Error()) {
						t.Errorf("durable guard rejected for another reason than a stale token: %q", l)
					}
				}
			}
			// The new holder goes on writing undisturbed.
			if st, err := postWrite(ctx, http.DefaultClient, res.URL(name), h2.Token(), "new-2"); err != nil || st != http.StatusOK {
				t.Fatalf("new holder's write after the zombie's: %s", describe(st, err))
			}
			checkNoneAfter(t, res.writes(), h2.Token())
			for _, w := range res.writes() {
				if w.Token == tok1 && w.Status == http.StatusOK && w.At.After(stopped) {
					t.Errorf("zombie's write %q admitted after it was frozen", w.Label)
				}
			}
			for _, k := range []string{register, register + "/value"} {
				resp, err := cli.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "new-1" {
					t.Errorf("%s = %v, want the new holder's new-1", k, resp.Kvs)
				}
			}
			figure(t, "TTL %v; new holder acquired %v after the SIGSTOP; zombie's fenced txn: %s",
				ttl, took.Round(time.Millisecond), strings.Join(fencedBy, ""))
		})
	}
}

// acquireOwner takes the lock or leadership name for a new holder on cli,
// released at cleanup.
func acquireOwner(t *testing.T, cli *clientv3.Client, role, name string, ttl time.Duration) owner {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	switch role {
	case "lock":
		m, err := mutex.New(cli, name, mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatalf("new holder's Lock: %v", err)
		}
		return l
	default:
		e, err := election.New(cli, name, election.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		term, err := e.Campaign(ctx, "new-leader")
		if err != nil {
			t.Fatalf("new leader's Campaign: %v", err)
		}
		return term
	}
}
