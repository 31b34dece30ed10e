package mutex_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func TestNewValidatesNameAndOptions(t *testing.T) {
	cli := client(t)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	tests := []struct {
		name    string
		lock    string
		opts    []mutex.Option
		wantErr string // substring naming the field and bound; empty means accepted
	}{
		{"defaults", "a", nil, ""},
		{"ttl exactly the minimum", "a", []mutex.Option{mutex.WithTTL(2 * time.Second)}, ""},
		{"ttl exactly the default cap", "a", []mutex.Option{mutex.WithTTL(5 * time.Minute)}, ""},
		{"ttl exactly a raised cap", "a", []mutex.Option{mutex.WithMaxTTL(time.Hour), mutex.WithTTL(time.Hour)}, ""},
		{"name exactly 256 bytes", strings.Repeat("n", 256), nil, ""},
		{"unicode name", "Überweisung/日次", nil, ""},
		{"margin half the ttl", "a", []mutex.Option{mutex.WithTTL(4 * time.Second), mutex.WithSafetyMargin(2 * time.Second)}, ""},
		{"borrowed session", "a", []mutex.Option{mutex.WithSession(sess)}, ""},
		{"ttl below minimum", "a", []mutex.Option{mutex.WithTTL(time.Second)}, "at least 2s"},
		{"ttl just below minimum", "a", []mutex.Option{mutex.WithTTL(1999 * time.Millisecond)}, "at least 2s"},
		{"ttl above cap", "a", []mutex.Option{mutex.WithTTL(5*time.Minute + time.Second)}, "at most 5m0s"},
		{"ttl above lowered cap", "a", []mutex.Option{mutex.WithMaxTTL(10 * time.Second), mutex.WithTTL(11 * time.Second)}, "at most 10s"},
		{"ttl not whole seconds", "a", []mutex.Option{mutex.WithTTL(2500 * time.Millisecond)}, "whole number of seconds"},
		{"cap below minimum", "a", []mutex.Option{mutex.WithMaxTTL(time.Second)}, "WithMaxTTL"},
		{"negative margin", "a", []mutex.Option{mutex.WithSafetyMargin(-time.Second)}, "WithSafetyMargin"},
		{"margin above half the ttl", "a", []mutex.Option{mutex.WithTTL(4 * time.Second), mutex.WithSafetyMargin(2001 * time.Millisecond)}, "at most half the ttl"},
		{"ttl with session", "a", []mutex.Option{mutex.WithSession(sess), mutex.WithTTL(5 * time.Second)}, "WithSession"},
		{"nil logger", "a", []mutex.Option{mutex.WithLogger(nil)}, "WithLogger"},
		{"silent logger", "a", []mutex.Option{mutex.WithLogger(zap.NewNop())}, ""},
		{"nil option", "a", []mutex.Option{nil}, "nil option"},
		{"empty namespace", "a", []mutex.Option{mutex.WithNamespace("")}, "namespace"},
		{"namespace with slash", "a", []mutex.Option{mutex.WithNamespace("a/b")}, "namespace"},
		{"empty name", "", nil, "must not be empty"},
		{"name 257 bytes", strings.Repeat("n", 257), nil, "at most 256"},
		{"name with newline", "a\nb", nil, "control character"},
		{"name with NUL", "a\x00", nil, "control character"},
		{"name with DEL", "a\x7f", nil, "control character"},
		{"name not UTF-8", "a\xc3", nil, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mutex.New(cli, tt.lock, tt.opts...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("New accepted it, want error containing %q", tt.wantErr)
			}
			if !errors.Is(err, mutex.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := mutex.New(nil, "a"); !errors.Is(err, mutex.ErrInvalid) {
		t.Errorf("New(nil client) = %v, want ErrInvalid", err)
	}
}

func TestGrantedTTLIsReported(t *testing.T) {
	cli := client(t)
	m, err := mutex.New(cli, "granted-ttl", mutex.WithTTL(7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 7*time.Second {
		t.Errorf("TTL() = %v, want 7s", l.TTL())
	}
	// The validity deadline is at most TTL − margin (7s/5) after now.
	if left := time.Until(l.Deadline()); left > 7*time.Second-1400*time.Millisecond || left <= 0 {
		t.Errorf("validity deadline %v from now, want in (0, 5.6s]", left)
	}
}

// With an etcd session the lease's TTL is known only once it is read, so a
// margin above half of it is refused by the first Lock, naming both.
func TestMarginAboveHalfABorrowedLeasesTTLIsRefusedByLock(t *testing.T) {
	cs, err := concurrency.NewSession(client(t), concurrency.WithTTL(4))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	m, err := mutex.New(client(t), "borrowed-margin", mutex.WithSession(cs), mutex.WithSafetyMargin(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Lock(etcdtest.Context(t, 10*time.Second))
	if !errors.Is(err, mutex.ErrInvalid) || !strings.Contains(err.Error(), "safety margin 3s must be at most half the lease's TTL 4s") {
		t.Fatalf("Lock = %v, want ErrInvalid naming the margin and the TTL", err)
	}
}
