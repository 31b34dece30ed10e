package rbac_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/rbac"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestDevCAWritesCertificatesWithPrivateKeys(t *testing.T) {
	for _, kt := range []rbac.KeyType{rbac.ECDSAP256, rbac.Ed25519} {
		t.Run(string(kt), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			opts := rbac.CertOptions{KeyType: kt, Validity: 48 * time.Hour}
			// The CA outlives the leaves: a leaf issued a second later with
			// the CA's own validity would be cut to the CA's end.
			caOpts := opts
			caOpts.Validity = 72 * time.Hour
			ca, err := rbac.OpenDevCA(dir, caOpts)
			if err != nil {
				t.Fatal(err)
			}
			server, err := ca.IssueServer([]string{"localhost", "127.0.0.1", "::1", "etcd.example.internal"}, opts)
			if err != nil {
				t.Fatal(err)
			}
			client, err := ca.IssueClient("payments-api", opts)
			if err != nil {
				t.Fatal(err)
			}
			if fileMode(t, dir) != 0o700 {
				t.Errorf("dir mode %v, want 0700", fileMode(t, dir))
			}
			for _, key := range []string{filepath.Join(dir, rbac.CAKeyFile), server.Key, client.Key} {
				if m := fileMode(t, key); m != 0o600 {
					t.Errorf("%s mode %v, want 0600", key, m)
				}
			}
			for _, crt := range []string{ca.CertFile(), server.Cert, client.Cert} {
				if m := fileMode(t, crt); m != 0o644 {
					t.Errorf("%s mode %v, want 0644", crt, m)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".tmp") {
					t.Errorf("temp file left behind: %s", e.Name())
				}
			}

			root := readCert(t, ca.CertFile())
			pool := x509.NewCertPool()
			pool.AddCert(root)
			srvCert := readCert(t, server.Cert)
			if _, err := srvCert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
				t.Errorf("server cert for localhost: %v", err)
			}
			for _, name := range []string{"127.0.0.1", "::1", "etcd.example.internal"} {
				if err := srvCert.VerifyHostname(name); err != nil {
					t.Errorf("server cert for %s: %v", name, err)
				}
			}
			if err := srvCert.VerifyHostname("10.0.0.1"); err == nil {
				t.Error("server cert valid for a host it was not issued for")
			}
			cliCert := readCert(t, client.Cert)
			if cliCert.Subject.CommonName != "payments-api" {
				t.Errorf("client CN %q", cliCert.Subject.CommonName)
			}
			if _, err := cliCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client cert: %v", err)
			}
			if got := cliCert.NotAfter.Sub(cliCert.NotBefore); got != 48*time.Hour {
				t.Errorf("validity %v, want 48h", got)
			}
			switch kt {
			case rbac.Ed25519:
				if _, ok := cliCert.PublicKey.(ed25519.PublicKey); !ok {
					t.Errorf("key %T, want ed25519", cliCert.PublicKey)
				}
			default:
				k, ok := cliCert.PublicKey.(*ecdsa.PublicKey)
				if !ok || k.Curve != elliptic.P256() {
					t.Errorf("key %T, want ECDSA P-256", cliCert.PublicKey)
				}
			}
		})
	}
}

func TestDevCAReopensTheSameCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := readCert(t, ca.CertFile())
	again, err := rbac.OpenDevCA(dir, rbac.CertOptions{KeyType: rbac.Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	if !readCert(t, again.CertFile()).Equal(first) {
		t.Fatal("reopening replaced the CA")
	}
	// A certificate from the reopened CA verifies against the first.
	files, err := again.IssueClient("late-user", rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(first)
	if _, err := readCert(t, files.Cert).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatal(err)
	}
}

func TestDevCARefusesHalfACA(t *testing.T) {
	dir := t.TempDir()
	if _, err := rbac.OpenDevCA(dir, rbac.CertOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, rbac.CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	_, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if !errors.Is(err, rbac.ErrCertificate) || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("err = %v", err)
	}
}

func TestDevCALeafNeverOutlivesItsCA(t *testing.T) {
	ca, err := rbac.OpenDevCA(t.TempDir(), rbac.CertOptions{Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.IssueClient("u", rbac.CertOptions{Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if leaf, root := readCert(t, files.Cert), readCert(t, ca.CertFile()); leaf.NotAfter.After(root.NotAfter) {
		t.Fatalf("leaf ends %v after CA %v", leaf.NotAfter, root.NotAfter)
	}
}

func TestDevCARejectsBadArguments(t *testing.T) {
	ca, err := rbac.OpenDevCA(t.TempDir(), rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"negative validity", func() error {
			_, err := ca.IssueClient("u", rbac.CertOptions{Validity: -time.Second})
			return err
		}, "CertOptions.Validity"},
		{"validity above the cap", func() error {
			_, err := ca.IssueClient("u", rbac.CertOptions{Validity: rbac.MaxValidity + time.Hour})
			return err
		}, "at most"},
		{"unknown key type", func() error {
			_, err := ca.IssueClient("u", rbac.CertOptions{KeyType: "rsa"})
			return err
		}, `CertOptions.KeyType "rsa"`},
		{"bad user", func() error {
			_, err := ca.IssueClient("../etc/passwd", rbac.CertOptions{})
			return err
		}, "user name"},
		{"no hosts", func() error {
			_, err := ca.IssueServer(nil, rbac.CertOptions{})
			return err
		}, "at least one"},
		{"bad host", func() error {
			_, err := ca.IssueServer([]string{"exa mple"}, rbac.CertOptions{})
			return err
		}, `host "exa mple"`},
		{"empty label", func() error {
			_, err := ca.IssueServer([]string{"a..b"}, rbac.CertOptions{})
			return err
		}, "empty DNS label"},
		{"new CA with bad options", func() error {
			_, err := rbac.OpenDevCA(t.TempDir(), rbac.CertOptions{KeyType: "dsa"})
			return err
		}, "KeyType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, rbac.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

// handshake serves serverFiles on loopback, connects with clientCfg and
// returns the client's error: the handshake's, or the server's verdict.
func handshake(t *testing.T, serverFiles rbac.TLSFiles, clientCfg *tls.Config) error {
	t.Helper()
	srvCfg, err := serverFiles.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.(*tls.Conn).Handshake(); err != nil {
			srvErr <- err
			return
		}
		_, err = c.Write([]byte("ok"))
		srvErr <- err
	}()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), clientCfg)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		// With TLS 1.3 the server judges the client's certificate after
		// the client's side of the handshake: read to learn its verdict.
		buf := make([]byte, 2)
		_, err = conn.Read(buf)
		conn.Close()
	}
	ln.Close() // unblocks Accept if the client never connected
	<-srvErr
	return err
}

func TestTLSConfigsShakeHandsAndRefuseStrangers(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer([]string{"127.0.0.1"}, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.IssueClient("alice", rbac.CertOptions{KeyType: rbac.Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := rbac.OpenDevCA(t.TempDir(), rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := otherCA.IssueClient("mallory", rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := good.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion < tls.VersionTLS12 || cfg.InsecureSkipVerify {
		t.Fatalf("client config MinVersion %x InsecureSkipVerify %v", cfg.MinVersion, cfg.InsecureSkipVerify)
	}
	srvCfg, err := server.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if srvCfg.MinVersion < tls.VersionTLS12 || srvCfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("server config MinVersion %x ClientAuth %v", srvCfg.MinVersion, srvCfg.ClientAuth)
	}
	if err := handshake(t, server, cfg); err != nil {
		t.Fatalf("good client refused: %v", err)
	}

	// A certificate from another CA, presented with our CA as roots.
	strangerCfg, err := rbac.TLSFiles{CA: good.CA, Cert: stranger.Cert, Key: stranger.Key}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, strangerCfg); err == nil {
		t.Fatal("server accepted a certificate from another CA")
	}
	// No certificate at all.
	anon, err := rbac.TLSFiles{CA: good.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, anon); err == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	// A client that trusts another CA refuses our server.
	distrust, err := rbac.TLSFiles{CA: stranger.CA, Cert: good.Cert, Key: good.Key}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, distrust); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("client accepted a server from another CA: %v", err)
	}
	// TLS 1.1 is refused.
	old := cfg.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if err := handshake(t, server, old); err == nil {
		t.Fatal("server accepted TLS 1.1")
	}
}

func TestTLSFilesRejectBadInput(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.IssueClient("bob", rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.IssueClient("carol", rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.IssueClient("old", rbac.CertOptions{NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	future, err := ca.IssueClient("future", rbac.CertOptions{NotBefore: time.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		files    rbac.TLSFiles
		server   bool
		sentinel error
		want     string
	}{
		{"cert without key", rbac.TLSFiles{CA: good.CA, Cert: good.Cert}, false, rbac.ErrInvalid, "together"},
		{"key of another cert", rbac.TLSFiles{CA: good.CA, Cert: good.Cert, Key: other.Key}, false, rbac.ErrCertificate, good.Cert},
		{"expired", expired, false, rbac.ErrCertificate, `(CN "old") expired at`},
		{"not yet valid", future, false, rbac.ErrCertificate, "not valid before"},
		{"CA not PEM", rbac.TLSFiles{CA: notPEM}, false, rbac.ErrCertificate, "holds no PEM certificate"},
		{"missing CA file", rbac.TLSFiles{CA: filepath.Join(dir, "nope")}, false, os.ErrNotExist, "read CA file"},
		{"server without CA", rbac.TLSFiles{Cert: good.Cert, Key: good.Key}, true, rbac.ErrInvalid, "TLSFiles.CA"},
		{"server without key", rbac.TLSFiles{CA: good.CA, Cert: good.Cert}, true, rbac.ErrInvalid, "TLSFiles.Key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.server {
				_, err = tc.files.ServerConfig()
				if _, infoErr := tc.files.ServerInfo(); infoErr == nil {
					t.Error("ServerInfo accepted what ServerConfig refused")
				}
			} else {
				_, err = tc.files.ClientConfig()
			}
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.sentinel, tc.want)
			}
		})
	}
}

func TestServerInfoTurnsOnClientCertAuth(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.IssueServer([]string{"localhost"}, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := files.ServerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if !info.ClientCertAuth || info.MinVersion != tls.VersionTLS12 || info.TrustedCAFile != files.CA || info.InsecureSkipVerify {
		t.Fatalf("ServerInfo = %+v", info)
	}
	if got := rbac.ServerFiles(dir); got != files {
		t.Fatalf("ServerFiles = %+v, IssueServer wrote %+v", got, files)
	}
	if got := rbac.ClientFiles(dir, "x"); !slices.Contains([]string{filepath.Join(dir, "client-x.crt")}, got.Cert) {
		t.Fatalf("ClientFiles = %+v", got)
	}
}

func TestValidateHostsReportsEveryBadHostWithoutWriting(t *testing.T) {
	if err := rbac.ValidateHosts([]string{"localhost", "127.0.0.1", "::1", "*.example.internal"}); err != nil {
		t.Fatalf("good hosts refused: %v", err)
	}
	err := rbac.ValidateHosts([]string{"localhost", "exa mple", "a..b"})
	if !errors.Is(err, rbac.ErrInvalid) || !strings.Contains(err.Error(), `"exa mple"`) || !strings.Contains(err.Error(), `"a..b"`) {
		t.Fatalf("err = %v, want ErrInvalid naming both bad hosts", err)
	}
	if err := rbac.ValidateHosts(nil); !errors.Is(err, rbac.ErrInvalid) {
		t.Fatalf("no hosts: err = %v, want ErrInvalid", err)
	}
	if err := (rbac.CertOptions{KeyType: "rsa"}).Validate(); !errors.Is(err, rbac.ErrInvalid) {
		t.Fatalf("CertOptions.Validate: err = %v, want ErrInvalid", err)
	}
}
