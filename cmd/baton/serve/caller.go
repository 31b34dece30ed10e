package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/rbac"
)

// caller is who a request comes from, as the transport proves it: the CN
// of an mTLS client certificate, the user ID of a Unix socket's peer
// (SO_PEERCRED), or only an address over plaintext TCP.
type caller struct {
	transport string // "tcp", "tls" or "unix"
	addr      string // the peer's address (tcp, tls)
	cn        string // the client certificate's CN (tls)
	uid       int    // the peer's user ID (unix), -1 when unknown
}

type callerKey struct{}
type connKey struct{}

// connContext keeps each connection in its requests' context, for the
// peer credentials of a Unix socket.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// withCaller identifies the caller of every request before its handler.
func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := caller{transport: "tcp", addr: r.RemoteAddr, uid: -1}
		if conn, ok := r.Context().Value(connKey{}).(*net.UnixConn); ok {
			c.transport, c.addr = "unix", ""
			if raw, err := conn.SyscallConn(); err == nil {
				_ = raw.Control(func(fd uintptr) {
					if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
						c.uid = int(cred.Uid)
					}
				})
			}
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			c.transport, c.cn = "tls", r.TLS.PeerCertificates[0].Subject.CommonName
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

func callerOf(ctx context.Context) caller {
	if c, ok := ctx.Value(callerKey{}).(caller); ok {
		return c
	}
	return caller{transport: "tcp", uid: -1}
}

// principal is who may heartbeat and release a hold besides its stream:
// the certificate's CN, or the socket peer's user; over plaintext TCP
// nobody is proven, and the hold_id alone is the capability.
func (c caller) principal() string {
	switch {
	case c.transport == "tls":
		return "cn:" + c.cn
	case c.transport == "unix" && c.uid >= 0:
		return "uid:" + strconv.Itoa(c.uid)
	}
	return ""
}

// identity is the holder identity of a request: with mTLS the CN and
// nothing else; otherwise the request's, or the caller's address (a Unix
// socket's peer: "uid:N").
func (c caller) identity(requested string) (string, error) {
	switch {
	case c.transport == "tls":
		if requested != "" && requested != c.cn {
			return "", connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("identity %q: the client certificate names %q, and a caller holds as its certificate names it", requested, c.cn))
		}
		return c.cn, nil
	case requested != "":
		return requested, nil
	case c.transport == "unix" && c.uid >= 0:
		return "uid:" + strconv.Itoa(c.uid), nil
	case c.transport == "unix":
		return "unix", nil
	}
	return c.addr, nil
}

// access is what a call needs of the namespace policy.
type access int

const (
	contend access = iota // hold locks: contenders, requesters, operators
	observe               // read: every level
)

// policy is the namespace policy of package rbac (the file `baton rbac
// apply` takes), checked on the identity of each call; nil allows all.
type policy struct {
	file string
	p    rbac.Policy
}

// authorize refuses, with PERMISSION_DENIED, an identity the policy does
// not give the access to ns. Nothing has been written when it refuses.
func (p *policy) authorize(ns, identity string, need access) error {
	if p == nil {
		return nil
	}
	for _, n := range p.p.Namespaces {
		if n.Name != ns {
			continue
		}
		levels := [][]string{n.Contenders, n.Requesters, n.Operators}
		if need == observe {
			levels = append(levels, n.Observers)
		}
		for _, users := range levels {
			if slices.Contains(users, identity) {
				return nil
			}
		}
	}
	what := "hold locks"
	if need == observe {
		what = "read"
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("identity %q may not %s in namespace %q: the policy (%s) does not list it there", identity, what, ns, p.file))
}
