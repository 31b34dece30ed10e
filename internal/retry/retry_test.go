package retry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestTransientAndPermanent(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		transient bool
		permanent bool
	}{
		{"nil", nil, false, false},
		{"connection reset", status.Error(codes.Unavailable, "error reading from server: EOF"), true, false},
		{"wrapped connection reset", fmt.Errorf("release: %w", status.Error(codes.Unavailable, "EOF")), true, false},
		{"no leader", rpctypes.ErrNoLeader, true, false},
		{"leader changed", rpctypes.ErrLeaderChanged, true, false},
		{"timeout due to leader fail", rpctypes.ErrTimeoutDueToLeaderFail, true, false},
		{"attempt deadline", context.DeadlineExceeded, true, false},
		{"caller cancelled", context.Canceled, false, false},
		{"permission denied", rpctypes.ErrPermissionDenied, false, true},
		{"auth failed", rpctypes.ErrAuthFailed, false, true},
		{"lease not found", rpctypes.ErrLeaseNotFound, false, false},
		{"compacted", rpctypes.ErrCompacted, false, false},
		{"other", errors.New("boom"), false, false},
	}
	for _, tt := range tests {
		if got := Transient(tt.err); got != tt.transient {
			t.Errorf("%s: Transient = %v, want %v", tt.name, got, tt.transient)
		}
		if got := Permanent(tt.err); got != tt.permanent {
			t.Errorf("%s: Permanent = %v, want %v", tt.name, got, tt.permanent)
		}
	}
}

func TestDoRetriesTransientErrorsUntilCtxEnds(t *testing.T) {
	calls := 0
	err := Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return rpctypes.ErrNoLeader
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	if err := Do(context.Background(), func(context.Context) error { calls++; return rpctypes.ErrPermissionDenied }); !errors.Is(err, rpctypes.ErrPermissionDenied) || calls != 1 {
		t.Fatalf("Do on a permanent error = %v after %d calls, want it after 1", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := Do(ctx, func(context.Context) error { return rpctypes.ErrNoLeader }); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("Do = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Do kept retrying %v past its ctx", d)
	}
	if got := Backoff(0); got != 50*time.Millisecond {
		t.Errorf("Backoff(0) = %v", got)
	}
	if got := Backoff(30); got != time.Second {
		t.Errorf("Backoff(30) = %v", got)
	}
}

func TestLoopPausesDoubleAfterFailuresAndStartOverAfterSuccess(t *testing.T) {
	results := []error{errTransientForLoop, errTransientForLoop, errTransientForLoop, nil, errTransientForLoop}
	var pauses []time.Duration
	calls := 0
	err := Loop(context.Background(), time.Millisecond, 3*time.Millisecond, func(context.Context) (bool, error) {
		calls++
		if calls > len(results) {
			return true, errStopForLoop
		}
		return false, results[calls-1]
	}, func(_ error, p time.Duration) { pauses = append(pauses, p) })
	if !errors.Is(err, errStopForLoop) {
		t.Fatalf("Loop returned %v, want the stopping call's error", err)
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, time.Millisecond}
	if !slices.Equal(pauses, want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
}

func TestLoopReturnsWhenContextEndsDuringAPause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	err := Loop(ctx, time.Hour, time.Hour, func(context.Context) (bool, error) { return false, errTransientForLoop },
		func(error, time.Duration) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Loop returned %v, want context.Canceled", err)
	}
}

var errTransientForLoop, errStopForLoop = errors.New("transient"), errors.New("stop")
