package rbac_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/rbac"
)

// serve answers every connection on a loopback listener with handle until
// the test ends.
func serve(t *testing.T, ln net.Listener, handle func(net.Conn)) string {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// answerFirst reads what the client sends first and answers, as etcd's
// port does once it knows the protocol.
func answerFirst(c net.Conn) {
	buf := make([]byte, 64)
	if _, err := c.Read(buf); err == nil {
		_, _ = c.Write([]byte("x"))
	}
}

func TestProbeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer([]string{"localhost"}, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.IssueClient("probe", rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := server.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	cliCfg, err := client.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, ln, answerFirst)
	_, port, _ := net.SplitHostPort(addr)
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := serve(t, plainLn, func(c net.Conn) { _, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) })

	for _, tc := range []struct {
		name     string
		endpoint string
		cfg      *tls.Config
		sentinel error
		want     string
	}{
		{"accepted", "https://localhost:" + port, cliCfg, nil, ""},
		{"accepted without scheme", "localhost:" + port, cliCfg, nil, ""},
		{"wrong host", "https://" + addr, cliCfg, rbac.ErrTLSRefused, `not valid for "127.0.0.1"`},
		{"not TLS", "https://" + plain, cliCfg, rbac.ErrTLSRefused, "does not speak TLS"},
		{"http scheme", "http://" + addr, cliCfg, rbac.ErrInvalid, "does not use TLS"},
		{"no port", "https://localhost", cliCfg, rbac.ErrInvalid, "endpoint"},
		{"no config", "localhost:" + port, nil, rbac.ErrInvalid, "needs a TLS configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := rbac.ProbeTLS(ctx, tc.endpoint, tc.cfg)
			if tc.sentinel == nil {
				if err != nil {
					t.Fatalf("ProbeTLS = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ProbeTLS = %v, want %v saying %q", err, tc.sentinel, tc.want)
			}
		})
	}
}
