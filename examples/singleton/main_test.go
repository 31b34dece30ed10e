package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

// replica runs the program in this process until the test ends.
func replica(t *testing.T, value string) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	cfg := config{endpoints: srv.Endpoints(), namespace: "example-singleton", name: "singleton", value: value,
		listen: "127.0.0.1:0", ttl: 2 * time.Second, tick: 50 * time.Millisecond}
	go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("replica %s: %v", value, err)
	}
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return "http://" + addr.String(), stop
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); status(t, url) != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %d within 10 s", url, want)
		}
	}
}

// Three replicas: exactly one leads, all are healthy; stopping the leader
// hands over to another at once (it resigns on the way out).
func TestThreeReplicasOneLeadsAndHandsOver(t *testing.T) {
	var bases []string
	var stops []func()
	for _, v := range []string{"pod-a", "pod-b", "pod-c"} {
		b, s := replica(t, v)
		bases, stops = append(bases, b), append(stops, s)
	}
	leading := func() (who []int) {
		for i, b := range bases {
			if b != "" && status(t, b+"/leader") == http.StatusOK {
				who = append(who, i)
			}
		}
		return who
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(leading()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no replica led within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	who := leading()
	if len(who) != 1 {
		t.Fatalf("replicas %v lead, want one", who)
	}
	for _, b := range bases {
		if c := status(t, b+"/healthz"); c != http.StatusOK {
			t.Fatalf("%s/healthz = %d", b, c)
		}
	}
	start := time.Now()
	stops[who[0]]()
	bases[who[0]] = ""
	for len(leading()) != 1 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("no other replica led within 5 s of the leader's stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("FIGURE handover after the leader's stop: %v", time.Since(start).Round(time.Millisecond))
	for _, s := range stops {
		s()
	}
}
