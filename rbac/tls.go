package rbac

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// MinTLSVersion is the oldest TLS version the configurations of this
// package accept.
const MinTLSVersion = tls.VersionTLS12

// TLSFiles names the PEM files of one side of a mutually authenticated
// TLS connection, as etcd's --cacert, --cert and --key flags do.
type TLSFiles struct {
	// CA holds the certificates of the authorities that sign the other
	// side's certificates.
	CA string `json:"ca"`
	// Cert is this side's certificate (chain), Key its private key.
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// ClientConfig returns a client configuration for clientv3.Config.TLS:
// the server's certificate is verified against CA (the system's roots
// when CA is empty), TLS 1.2 at least, and Cert and Key, when given, are
// presented to the server; with --client-cert-auth the certificate's CN
// is the etcd user. Cert and Key go together. A certificate that is
// expired or not yet valid is refused here, with its dates, rather than
// by the server with a bare "bad certificate".
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: MinTLSVersion}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: TLSFiles.Cert and TLSFiles.Key must be given together (cert %q, key %q)", ErrInvalid, f.Cert, f.Key)
	}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		pair, err := loadPair(f.Cert, f.Key, time.Now())
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// ServerConfig returns a server configuration that requires every client
// to present a certificate signed by CA: TLS 1.2 at least, all three files
// required. It suits a proxy or any server in front of etcd; for an etcd
// member (embed or flags) ServerInfo gives the same settings.
func (f TLSFiles) ServerConfig() (*tls.Config, error) {
	if err := f.requireAll(); err != nil {
		return nil, err
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, err
	}
	pair, err := loadPair(f.Cert, f.Key, time.Now())
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   MinTLSVersion,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// ServerInfo returns the etcd transport settings of a member that serves
// clients over TLS and authenticates them by certificate, for
// embed.Config.ClientTLSInfo: the equivalent of the flags --cert-file,
// --key-file, --trusted-ca-file, --client-cert-auth and
// --tls-min-version=TLS1.2. The files are checked as by ServerConfig.
func (f TLSFiles) ServerInfo() (transport.TLSInfo, error) {
	if _, err := f.ServerConfig(); err != nil {
		return transport.TLSInfo{}, err
	}
	return transport.TLSInfo{
		CertFile:       f.Cert,
		KeyFile:        f.Key,
		TrustedCAFile:  f.CA,
		ClientCertAuth: true,
		MinVersion:     MinTLSVersion,
	}, nil
}

func (f TLSFiles) requireAll() error {
	for _, c := range []struct{ field, value string }{{"CA", f.CA}, {"Cert", f.Cert}, {"Key", f.Key}} {
		if c.value == "" {
			return fmt.Errorf("%w: TLSFiles.%s must name a file", ErrInvalid, c.field)
		}
	}
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rbac: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrCertificate, path)
	}
	return pool, nil
}

// loadPair loads a certificate and its key and checks that the leaf is
// valid at now.
func loadPair(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("rbac: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("rbac: read key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: %s and %s: %v", ErrCertificate, certFile, keyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%w: %s: %v", ErrCertificate, certFile, err)
		}
	}
	if now.After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%w: %s (CN %q) expired at %s", ErrCertificate, certFile, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return tls.Certificate{}, fmt.Errorf("%w: %s (CN %q) is not valid before %s", ErrCertificate, certFile, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return pair, nil
}
