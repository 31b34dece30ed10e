package serve

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

func d(x time.Duration) *durationpb.Duration { return durationpb.New(x) }

func TestInvalidFieldsAreRefusedNamingTheField(t *testing.T) {
	long := strings.Repeat("n", keys.MaxNameBytes+1)
	many := make([]string, mutex.MaxSetNames+1)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i)
	}
	for _, c := range []struct {
		field string
		req   *batonv1.HoldRequest
	}{
		{"names", &batonv1.HoldRequest{}},
		{"names", &batonv1.HoldRequest{Names: many}},
		{"names[0]", &batonv1.HoldRequest{Names: []string{""}}},
		{"names[0]", &batonv1.HoldRequest{Names: []string{long}}},
		{"names[1]", &batonv1.HoldRequest{Names: []string{"a", "b\x1b[2J"}}},
		{"names[0]", &batonv1.HoldRequest{Names: []string{"\xff"}}},
		{"names[2]", &batonv1.HoldRequest{Names: []string{"a", "b", "a"}}},
		{"namespace", &batonv1.HoldRequest{Namespace: "a/b", Names: []string{"a"}}},
		{"ttl", &batonv1.HoldRequest{Names: []string{"a"}, Ttl: d(time.Second)}},
		{"ttl", &batonv1.HoldRequest{Names: []string{"a"}, Ttl: d(2500 * time.Millisecond)}},
		{"ttl", &batonv1.HoldRequest{Names: []string{"a"}, Ttl: d(time.Hour)}},
		{"ttl", &batonv1.HoldRequest{Names: []string{"a"}, Ttl: &durationpb.Duration{Seconds: 5, Nanos: -1}}},
		{"identity", &batonv1.HoldRequest{Names: []string{"a"}, Identity: "a\nb"}},
		{"identity", &batonv1.HoldRequest{Names: []string{"a"}, Identity: long}},
		{"wait_timeout", &batonv1.HoldRequest{Names: []string{"a"}, WaitTimeout: d(-time.Second)}},
		{"wait_timeout", &batonv1.HoldRequest{Names: []string{"a"}, Try: true, WaitTimeout: d(time.Second)}},
		{"lock_delay", &batonv1.HoldRequest{Names: []string{"a"}, LockDelay: d(time.Second)}},
		{"lock_delay", &batonv1.HoldRequest{Names: []string{"a"}, LockDelay: d(2 * time.Hour)}},
		{"lock_delay", &batonv1.HoldRequest{Names: []string{"a"}, LockDelay: d(2500 * time.Millisecond)}},
		{"names", &batonv1.HoldRequest{Names: many[:mutex.MaxSetNamesWithLockDelay+1], LockDelay: d(2 * time.Second)}},
		{"limit", &batonv1.HoldRequest{Names: []string{"a"}, Limit: 3}},
		{"kind", &batonv1.HoldRequest{Names: []string{"a"}, Kind: 99}},
	} {
		_, err := checkHold(c.req, "baton", mutex.DefaultMaxTTL)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), c.field+": ") {
			t.Errorf("%v: got %v, want INVALID_ARGUMENT naming %s", c.req, err, c.field)
		}
	}
	for _, c := range []struct {
		field string
		req   *batonv1.HoldRequest
	}{
		{"limit", &batonv1.HoldRequest{Names: []string{"a"}, Kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE}},
		{"limit", &batonv1.HoldRequest{Names: []string{"a"}, Kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE, Limit: 10001}},
		{"limit", &batonv1.HoldRequest{Names: []string{"a"}, Kind: batonv1.LockKind_LOCK_KIND_READ, Limit: 2}},
		{"names", &batonv1.HoldRequest{Names: []string{"a", "b"}, Kind: batonv1.LockKind_LOCK_KIND_WRITE}},
	} {
		_, err := checkHold(c.req, "baton", mutex.DefaultMaxTTL)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), c.field+": ") {
			t.Errorf("%v: got %v, want INVALID_ARGUMENT naming %s", c.req, err, c.field)
		}
	}
	if sp, err := checkHold(&batonv1.HoldRequest{Names: []string{"a"}, Kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE, Limit: 3}, "baton", mutex.DefaultMaxTTL); err != nil || sp.limit != 3 {
		t.Errorf("semaphore: %+v %v", sp, err)
	}
	sp, err := checkHold(&batonv1.HoldRequest{Names: []string{"a/b%"}}, "team", 10*time.Second)
	if err != nil || sp.namespace != "team" || sp.ttl != 10*time.Second {
		t.Errorf("defaults: %+v %v, want namespace team and ttl capped at --max-ttl", sp, err)
	}
}

// fields are the names an INVALID_ARGUMENT may start with.
var fields = []string{"names", "namespace", "ttl", "identity", "wait_timeout", "lock_delay", "limit", "kind"}

// FuzzCheckHold: checkHold never panics; it refuses with INVALID_ARGUMENT
// naming a field, and
// whatever it accepts the library accepts too.
func FuzzCheckHold(f *testing.F) {
	f.Add("", "invoice-42", "", uint8(1), int64(15), int32(0), "", false, int64(0), int64(0), int32(0), uint32(0))
	f.Add("team", "a/b", "a%2F", uint8(2), int64(2), int32(0), "host:1", false, int64(5e9), int64(2), int32(1), uint32(0))
	f.Add("x", "\x00", "", uint8(200), int64(-1), int32(-5), "\n", true, int64(-1), int64(3601), int32(2), uint32(7))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = cli.Close() })
	f.Fuzz(func(t *testing.T, ns, n1, n2 string, count uint8, ttlSec int64, ttlNanos int32, identity string, try bool, waitNanos, delaySec int64, kind int32, limit uint32) {
		names := make([]string, 0, int(count)%4)
		for i := 0; i < int(count)%4; i++ {
			names = append(names, []string{n1, n2, n1 + n2}[i%3])
		}
		req := &batonv1.HoldRequest{
			Namespace: ns, Names: names, Ttl: &durationpb.Duration{Seconds: ttlSec, Nanos: ttlNanos}, Identity: identity,
			Try: try, WaitTimeout: durationpb.New(time.Duration(waitNanos)), LockDelay: &durationpb.Duration{Seconds: delaySec},
			Kind: batonv1.LockKind(kind), Limit: limit,
		}
		sp, err := checkHold(req, "baton", mutex.DefaultMaxTTL)
		if err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Fatalf("refusal %v: not INVALID_ARGUMENT", err)
			}
			for _, field := range fields {
				if strings.HasPrefix(ce.Message(), field+": ") || strings.HasPrefix(ce.Message(), field+"[") {
					return
				}
			}
			t.Fatalf("refusal %q names no field", ce.Message())
		}
		opts := []mutex.Option{mutex.WithNamespace(sp.namespace), mutex.WithTTL(sp.ttl), mutex.WithLockDelay(sp.lockDelay)}
		if sp.identity != "" {
			opts = append(opts, mutex.WithIdentity(sp.identity))
		}
		a, err := newAcquirer(cli, sp, opts)
		if err != nil {
			t.Fatalf("accepted %+v, which the library refuses: %v", sp, err)
		}
		_ = a.close()
	})
}
