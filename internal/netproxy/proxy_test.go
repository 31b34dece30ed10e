package netproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// server accepts connections and reports each line it reads on got; it
// answers each with the line back.
func server(t *testing.T) (addr string, got <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					ch <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func proxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func recv(t *testing.T, ch <-chan string, within time.Duration) (string, bool) {
	t.Helper()
	select {
	case s := <-ch:
		return s, true
	case <-time.After(within):
		return "", false
	}
}

// A request sent while replies are lost reaches the server; its answer
// never reaches the client, whose connection Sever cuts.
func TestLoseRepliesAppliesTheRequestAndDropsItsAnswer(t *testing.T) {
	addr, got := server(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	if _, err := c.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.ReadString('\n'); s != "before\n" {
		t.Fatalf("answer %q, want before", s)
	}
	<-got
	p.LoseReplies()
	if _, err := c.Write([]byte("lost\n")); err != nil {
		t.Fatal(err)
	}
	if s, ok := recv(t, got, 2*time.Second); !ok || s != "lost\n" {
		t.Fatalf("server got %q (%v), want the request", s, ok)
	}
	p.Sever(0, 0)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if s, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the client heard %q after Sever", s)
	}
	// A new connection is forwarded both ways.
	c2, r2 := dial(t, p)
	if _, err := c2.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if s, _ := r2.ReadString('\n'); s != "after\n" {
		t.Fatalf("answer %q after Sever, want after", s)
	}
}

// A request held back reaches the server only after Sever cut its
// client off, late: what the client gave up on applies then.
func TestHoldRequestsDeliversThemAfterTheClientIsCut(t *testing.T) {
	addr, got := server(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	if _, err := c.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.ReadString('\n'); s != "first\n" {
		t.Fatalf("answer %q", s)
	}
	<-got
	p.HoldRequests()
	if _, err := c.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	if s, ok := recv(t, got, 300*time.Millisecond); ok {
		t.Fatalf("server got %q while requests were held", s)
	}
	cut := time.Now()
	p.Sever(200*time.Millisecond, 100*time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if s, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the client heard %q after Sever", s)
	}
	s, ok := recv(t, got, 2*time.Second)
	if !ok || s != "late\n" {
		t.Fatalf("server got %q (%v), want the held request", s, ok)
	}
	if d := time.Since(cut); d < 200*time.Millisecond {
		t.Fatalf("the held request arrived %v after the cut, want 200 ms or more", d)
	}
}

// Restore after HoldRequests lets the held requests through in order,
// on the same connection.
func TestRestoreFlushesHeldRequestsInOrder(t *testing.T) {
	addr, got := server(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	p.HoldRequests()
	for _, l := range []string{"a\n", "b\n"} {
		if _, err := c.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if s, ok := recv(t, got, 200*time.Millisecond); ok {
		t.Fatalf("server got %q while held", s)
	}
	p.Restore()
	for _, want := range []string{"a\n", "b\n"} {
		if s, ok := recv(t, got, 2*time.Second); !ok || s != want {
			t.Fatalf("server got %q (%v), want %q", s, ok, want)
		}
		if s, _ := r.ReadString('\n'); s != want {
			t.Fatalf("answer %q, want %q", s, want)
		}
	}
}
