package serve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
)

// overloadStreams is how many Hold streams TestOverload opens: 10,000
// (the default --max-holds), or 1,000 under the race detector (make
// test), which slows the server's work tenfold or more (10,000 would take
// minutes there), and whose bookkeeping per goroutine would weigh in the
// memory measured.
func overloadStreams() int {
	if clitest.RaceEnabled {
		return 1000
	}
	return 10000
}

// streamsPerConn is how many streams share one HTTP/2 connection: under
// the server's 250 concurrent streams a connection.
const streamsPerConn = 200

// h2Only is a client of unencrypted HTTP/2 alone (prior knowledge): every
// call multiplexed on its one connection, up to the server's limit.
func h2Only() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// Overload: --max-holds Hold streams open at once on one server, over a
// few HTTP/2 connections, half of them holding (a name each) and half
// waiting (behind each holder, in the server's process). The server's
// cost per stream is measured (the heap and the goroutines the streams
// added, over all: caller, server and etcd share this process, so it is
// an upper bound), and with every stream open the server answers health
// checks and heartbeats at once, refuses one more stream with
// RESOURCE_EXHAUSTED, and shuts down ending every stream with its cause.
func TestOverloadMaxHoldsStreamsOnOneServer(t *testing.T) {
	n := overloadStreams()
	e := start(t, func(c *serve.Config) { c.MaxHolds, c.MaxHoldsPerIdentity = n, n })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()
	began := time.Now()

	var clients []*http.Client
	defer func() {
		for _, hc := range clients {
			hc.CloseIdleConnections()
		}
	}()
	var (
		wg       sync.WaitGroup
		heldIDs  = make(chan string, n)
		lost     atomic.Int64 // held streams ended by lost SERVER_SHUTDOWN
		lostMu   sync.Mutex
		lastLost time.Time    // when the last lost arrived
		refused  atomic.Int64 // waiting streams ended by UNAVAILABLE (shutdown)
		unwanted = make(chan string, n)
	)
	var c batonv1connect.BatonServiceClient
	for i := range n {
		if i%streamsPerConn == 0 {
			hc := h2Only()
			clients = append(clients, hc)
			c = batonv1connect.NewBatonServiceClient(hc, e.url)
		}
		req := &batonv1.HoldRequest{Names: []string{fmt.Sprintf("load-%d", i/2)}, Identity: "load", Ttl: dur(5 * time.Minute)}
		wg.Add(1)
		go func(c batonv1connect.BatonServiceClient) {
			defer wg.Done()
			st, err := c.Hold(ctx, connect.NewRequest(req))
			if err != nil {
				if connect.CodeOf(err) == connect.CodeUnavailable {
					refused.Add(1)
					return
				}
				unwanted <- fmt.Sprintf("hold: %v", err)
				return
			}
			defer func() { _ = st.Close() }()
			for st.Receive() {
				switch m := st.Msg(); {
				case m.GetHeld() != nil:
					heldIDs <- m.GetHeld().HoldId
				case m.GetLost().GetCause() == batonv1.Cause_CAUSE_SERVER_SHUTDOWN:
					lost.Add(1)
					lostMu.Lock()
					lastLost = time.Now()
					lostMu.Unlock()
				default:
					unwanted <- fmt.Sprintf("message %v", m)
				}
			}
			if err := st.Err(); err != nil {
				if connect.CodeOf(err) == connect.CodeUnavailable {
					refused.Add(1)
					return
				}
				unwanted <- fmt.Sprintf("stream: %v", err)
			}
		}(c)
	}
	defer wg.Wait()
	defer cancel()

	// Every stream admitted: half held, half waiting.
	for metric(t, e, "baton_serve_holds", "held") != float64(n/2) || metric(t, e, "baton_serve_holds", "waiting") != float64(n-n/2) {
		select {
		case u := <-unwanted:
			t.Fatal(u)
		case <-ctx.Done():
			t.Fatalf("held %v, waiting %v of %d streams", metric(t, e, "baton_serve_holds", "held"), metric(t, e, "baton_serve_holds", "waiting"), n)
		case <-time.After(100 * time.Millisecond):
		}
	}
	opened := time.Since(began)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	goroutines := runtime.NumGoroutine() - goroutinesBefore
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d Hold streams (%d held, %d waiting) from %d HTTP/2 clients, opened in %v (race detector: %v)",
		n, n/2, n-n/2, len(clients), opened.Round(time.Millisecond), clitest.RaceEnabled)
	t.Logf("heap +%.1f MiB: %.1f KiB a stream; goroutines +%d: %.2f a stream (caller, server and etcd in one process: an upper bound of the server's)",
		float64(heap)/(1<<20), float64(heap)/float64(n)/1024, goroutines, float64(goroutines)/float64(n))

	// With every stream open the server answers, at once.
	t0 := time.Now()
	resp, err := e.hc.Post(e.url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), "SERVING_STATUS_SERVING") {
		t.Fatalf("health: %s", body)
	}
	health := time.Since(t0)
	t0 = time.Now()
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: <-heldIDs})); err != nil {
		t.Fatalf("heartbeat under load: %v", err)
	}
	beat := time.Since(t0)
	t.Logf("under load: health check %v, heartbeat %v", health.Round(time.Microsecond), beat.Round(time.Microsecond))
	if health > 5*time.Second || beat > 5*time.Second {
		t.Fatalf("the server answered slowly under load: health %v, heartbeat %v", health, beat)
	}

	// One stream more is refused before anything is written.
	err = e.hold(ctx, &batonv1.HoldRequest{Names: []string{"one-more"}, Identity: "other"}).end(t)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-holds") {
		t.Fatalf("stream %d: %v, want RESOURCE_EXHAUSTED (--max-holds)", n+1, err)
	}

	// Shutdown ends every stream with its cause and leaves no key.
	t0 = time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ended := time.Since(t0)
	e.stop() // and the HTTP server
	wg.Wait()
	lostMu.Lock()
	allLost := lastLost.Sub(t0)
	lostMu.Unlock()
	t.Logf("shutdown: every held stream's lost arrived in %v; every stream ended (its key deleted) in %v; the HTTP server's shutdown took %v more",
		allLost.Round(time.Millisecond), ended.Round(time.Millisecond), (time.Since(t0) - ended).Round(time.Millisecond))
	// The guarantee: every lost is sent before the leases are revoked,
	// which Shutdown does at --shutdown-timeout at the latest.
	if ended > serve.DefaultShutdownTimeout || allLost > ended+time.Second {
		t.Errorf("shutdown took %v (lost all sent in %v): more than the default --shutdown-timeout %v", ended, allLost, serve.DefaultShutdownTimeout)
	}
	close(unwanted)
	for u := range unwanted {
		t.Error(u)
	}
	if lost.Load() != int64(n/2) || refused.Load() != int64(n-n/2) {
		t.Fatalf("ends: %d lost SERVER_SHUTDOWN (want %d), %d UNAVAILABLE (want %d)", lost.Load(), n/2, refused.Load(), n-n/2)
	}
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("%d keys left", len(k))
	}
}
