package cluster

import (
	"net"
	"sync"
	"time"
)

// front is the address clients dial for one member. It forwards to the
// member's private client port, and on a kill it closes its listener and
// every open connection at once, as a crashed process's kernel would:
// embed.Etcd.Close otherwise drains streams gracefully for seconds, which
// is a shutdown, not a crash.
type front struct {
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newFront(addr, target string) *front {
	return &front{addr: addr, target: target, conns: make(map[net.Conn]struct{})}
}

// open starts accepting on the front address; it retries briefly because a
// port just closed may linger.
func (f *front) open() error {
	var ln net.Listener
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		ln, err = net.Listen("tcp", f.addr)
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	f.wg.Add(1)
	go f.accept(ln)
	return nil
}

// cut closes the listener and every connection, and waits for the
// forwarding goroutines. Idempotent.
func (f *front) cut() {
	f.mu.Lock()
	if f.ln != nil {
		_ = f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *front) accept(ln net.Listener) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !f.track(ln, c) {
			return
		}
		f.wg.Add(1)
		go f.serve(c)
	}
}

// track registers c unless the listener it came from was cut meanwhile.
func (f *front) track(ln net.Listener, c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != ln {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *front) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

func (f *front) serve(client net.Conn) {
	defer f.wg.Done()
	defer f.untrack(client)
	server, err := net.DialTimeout("tcp", f.target, 2*time.Second)
	if err != nil {
		return
	}
	f.mu.Lock()
	if _, live := f.conns[client]; !live {
		f.mu.Unlock()
		_ = server.Close()
		return
	}
	f.conns[server] = struct{}{}
	f.mu.Unlock()
	defer f.untrack(server)
	done := make(chan struct{}, 2)
	go func() { pipe(server, client); done <- struct{}{} }()
	go func() { pipe(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

func pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
