// Package netproxy is the harness's one TCP forwarder, on 127.0.0.1
// between a client and etcd. It can cut a client off: Blackhole stops
// traffic in both directions without closing connections, as a network
// partition does, and Restore lets the held-back bytes through, as TCP
// retransmission would. It can make a request apply after its caller gave
// up on it: LoseReplies lets requests through and holds the replies back,
// HoldRequests holds the requests back, and Sever then cuts the client
// off, every reply held back lost, and delivers the held requests to the
// server late, over the connections the client has left. Close closes the
// listener and every connection at once, as a crashed process's kernel
// would: the front of a cluster member that is killed (Listen on the
// member's fixed address, again at its restart).
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
	hold    hold          // requests or replies held back until Sever
	replies chan struct{} // closed while replies flow; replaced by LoseReplies
	links   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
	stopped chan struct{}
}

type hold int

const (
	holdNone hold = iota
	holdReplies
	holdRequests
)

// link is one client's connection and the proxy's to the server.
type link struct {
	client, server net.Conn

	mu      sync.Mutex
	held    []byte // requests held back (HoldRequests), in order
	severed bool   // the client side is cut: what the server sends is dropped
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
	replies := make(chan struct{})
	close(replies)
	p := &Proxy{ln: ln, target: target, open: open, replies: replies, links: make(map[*link]struct{}), stopped: make(chan struct{})}
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

// Restore resumes forwarding, held-back bytes first: a blackhole's, the
// requests HoldRequests held and the replies LoseReplies held.
func (p *Proxy) Restore() {
	p.mu.Lock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	links := p.endHold()
	p.mu.Unlock()
	for _, l := range links {
		l.flush()
	}
}

// LoseReplies forwards what clients send and holds back what the server
// answers, until Sever drops it (or Restore lets it through): requests
// apply, and their callers hear nothing.
func (p *Proxy) LoseReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endHoldLocked()
	p.hold = holdReplies
	p.replies = make(chan struct{})
}

// HoldRequests keeps what clients send, reading it but forwarding
// nothing, until Sever delivers it late (or Restore in time).
func (p *Proxy) HoldRequests() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endHoldLocked()
	p.hold = holdRequests
}

// Sever cuts every client's side of its connections at once, as a lost
// link would: each client sees its calls in flight fail and connects
// again. Replies held back (LoseReplies) are lost. Requests held back
// (HoldRequests) are written to their servers after late, on the proxy's
// side of the old connections, which stay open for linger more (their
// replies dropped), so that what the clients gave up on applies then.
// New connections are forwarded as before.
func (p *Proxy) Sever(late, linger time.Duration) {
	type cut struct {
		l    *link
		held []byte
	}
	p.mu.Lock()
	cuts := make([]cut, 0, len(p.links))
	for l := range p.links {
		l.mu.Lock()
		l.severed = true // before the replies held back are let go: dropped
		cuts = append(cuts, cut{l, l.held})
		l.held = nil
		l.mu.Unlock()
		delete(p.links, l)
	}
	p.endHoldLocked()
	p.mu.Unlock()
	for _, c := range cuts {
		_ = c.l.client.Close()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.l.server.Close()
			if p.sleep(late) && len(c.held) > 0 {
				if _, err := c.l.server.Write(c.held); err != nil {
					return
				}
			}
			p.sleep(linger)
		}()
	}
}

// endHold ends LoseReplies or HoldRequests and returns the links whose
// held requests are to be flushed; p.mu is held.
func (p *Proxy) endHold() []*link {
	var out []*link
	if p.hold == holdRequests {
		for l := range p.links {
			out = append(out, l)
		}
	}
	p.endHoldLocked()
	return out
}

func (p *Proxy) endHoldLocked() {
	p.hold = holdNone
	select {
	case <-p.replies:
	default:
		close(p.replies)
	}
}

// flush writes the requests a link held to its server.
func (l *link) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) > 0 && !l.severed {
		_, _ = l.server.Write(l.held)
	}
	l.held = nil
}

// sleep waits d; false once the proxy is closed.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stopped:
		return false
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
	for l := range p.links {
		_ = l.client.Close()
		_ = l.server.Close()
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
	for l := range p.links {
		_ = l.client.Close()
		_ = l.server.Close()
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

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.wait() {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.requests(l) }()
	go func() { defer wg.Done(); p.answers(l) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// wait blocks while blackholed, then for the delay; false once the proxy
// is closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	open, delay := p.open, p.delay
	p.mu.Unlock()
	select {
	case <-open:
	case <-p.stopped:
		return false
	}
	return delay <= 0 || p.sleep(delay)
}

// requests forwards what the client sends to the server, or holds it. A
// severed link's server side is Sever's to close.
func (p *Proxy) requests(l *link) {
	defer func() {
		_ = l.client.Close()
		l.mu.Lock()
		severed := l.severed
		l.mu.Unlock()
		if !severed {
			_ = l.server.Close()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			p.mu.Lock()
			held := p.hold == holdRequests
			l.mu.Lock()
			p.mu.Unlock()
			switch {
			case l.severed:
				l.mu.Unlock()
				return
			case held || len(l.held) > 0: // in order behind what is held
				l.held = append(l.held, buf[:n]...)
				l.mu.Unlock()
			default:
				l.mu.Unlock()
				if _, werr := l.server.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or a closed connection
		}
	}
}

// answers forwards what the server sends to the client; once the link is
// severed it reads and drops it until the server side closes.
func (p *Proxy) answers(l *link) {
	defer func() {
		_ = l.client.Close()
		_ = l.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			p.mu.Lock()
			replies := p.replies
			p.mu.Unlock()
			select {
			case <-replies:
			case <-p.stopped:
				return
			}
			l.mu.Lock()
			severed := l.severed
			l.mu.Unlock()
			if !severed {
				if _, werr := l.client.Write(buf[:n]); werr != nil {
					l.mu.Lock()
					severed = l.severed
					l.mu.Unlock()
					if !severed {
						return
					}
				}
			}
		}
		if err != nil {
			return
		}
	}
}
