package rbac

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// probeRead bounds the wait for the server's verdict after the handshake
// when ctx has no earlier deadline.
const probeRead = 2 * time.Second

// http2Preface is what an HTTP/2 client sends first. etcd serves gRPC and
// HTTP on one port and says nothing until the client speaks, so the probe
// speaks first to draw either a reply or the server's TLS alert.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ProbeTLS connects to one etcd endpoint ("https://host:port" or
// "host:port") with cfg and says why the TLS session is refused, or nil
// when the server accepts it.
//
// It exists because etcd's client does not say: a client whose
// certificate the server refuses (none, another CA's, expired) sees every
// call fail with "context deadline exceeded" after its timeout. Call it
// when a call over TLS times out; the error wraps ErrTLSRefused and says
// which side refused and why, e.g. "the server requires a client
// certificate". With TLS 1.3 the server judges the client's certificate
// after the client's handshake completes, so ProbeTLS also waits for the
// server's first answer, at most until ctx ends or two seconds pass.
func ProbeTLS(ctx context.Context, endpoint string, cfg *tls.Config) error {
	host, addr, err := probeAddr(endpoint)
	if err != nil {
		return err
	}
	if cfg == nil {
		return fmt.Errorf("%w: ProbeTLS needs a TLS configuration", ErrInvalid)
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("rbac: probe %s: %w", addr, err)
	}
	defer raw.Close()
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return explain(addr, err)
	}
	deadline := time.Now().Add(probeRead)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(http2Preface)); err != nil {
		return explain(addr, err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // no alert came: the server kept the session
		}
		return explain(addr, err)
	}
	return nil
}

func probeAddr(endpoint string) (host, addr string, err error) {
	addr = endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return "", "", fmt.Errorf("%w: endpoint %q: %v", ErrInvalid, endpoint, err)
		}
		if u.Scheme != "https" && u.Scheme != "unixs" {
			return "", "", fmt.Errorf("%w: endpoint %q does not use TLS (scheme %q, want https)", ErrInvalid, endpoint, u.Scheme)
		}
		addr = u.Host
	}
	host, _, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("%w: endpoint %q: %v", ErrInvalid, endpoint, err)
	}
	return host, addr, nil
}

// explain turns a handshake error into the reason an operator can act on.
func explain(addr string, err error) error {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	msg := err.Error()
	var why string
	switch {
	case errors.As(err, &unknown):
		why = "the server's certificate is not signed by the CA this client trusts (--cacert)"
	case errors.As(err, &hostname):
		why = fmt.Sprintf("the server's certificate is not valid for %q", hostname.Host)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		why = "the server's certificate is expired or not yet valid"
	case strings.Contains(msg, "certificate required"):
		why = "the server requires a client certificate (--cert and --key)"
	case strings.Contains(msg, "unknown certificate authority"), strings.Contains(msg, "bad certificate"):
		why = "the server does not trust the CA that signed the client certificate"
	case strings.Contains(msg, "expired certificate"):
		why = "the server finds the client certificate expired or not yet valid"
	case strings.Contains(msg, "protocol version"):
		why = "client and server share no TLS version (baton requires TLS 1.2 or later)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		why = "the endpoint does not speak TLS (use http://, or check the port)"
	default:
		why = "TLS handshake failed"
	}
	return fmt.Errorf("%w: %s: %s: %v", ErrTLSRefused, addr, why, err)
}
