// Package netproxy is the harness's one TCP forwarder, on 127.0.0.1
// between a client and etcd. It can cut a client off: Blackhole stops
// traffic in both directions without closing connections, as a network
// partition does, and Restore lets the held-back bytes through, as TCP
// retransmission would. Close closes the listener and every connection at
// once, as a crashed process's kernel would: the front of a cluster
// member that is killed (Listen on the member's fixed address, again at
// its restart).
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection accepted on Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	open    chan struct{} // closed while traffic flows; replaced by Blackhole
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	stopped chan struct{}
}

// New listens on a free 127.0.0.1 port and forwards to target.
func New(target string) (*Proxy, error) { return Listen("127.0.0.1:0", target) }

// Listen listens on addr and forwards to target. It retries for up to a
// second, because a port just closed may linger.
func Listen(addr, target string) (*Proxy, error) {
	var ln net.Listener
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, open: open, conns: make(map[net.Conn]struct{}), stopped: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Endpoint is the proxy's address as an http URL, for clientv3.Config.
func (p *Proxy) Endpoint() string { return "http://" + p.Addr() }

// Blackhole stops forwarding in both directions; connections stay open.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Restore resumes forwarding, held-back bytes first.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// SetDelay delays every chunk forwarded in either direction by d.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// DropConnections closes every open connection; new ones are accepted.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection. Idempotent; waits for
// the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stopped)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	if !p.wait() {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
}

// wait blocks while blackholed; false once the proxy is closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	open, delay := p.open, p.delay
	p.mu.Unlock()
	select {
	case <-open:
	case <-p.stopped:
		return false
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-p.stopped:
			return false
		}
	}
	return true
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: close both sides
		}
	}
}
