package cmdutil

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/user"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sources of an audit record's identity.
const (
	identityPassword    = "user"
	IdentityCertificate = "certificate"
	IdentityAuthOff     = "auth disabled"
)

// etcdIdentity is who etcd authenticated this client as.
type etcdIdentity struct{ Name, Source string }

// Identity asks etcd whether auth is on and, if it is, names the user it
// authenticated: the --user name (a token is sent and wins), else the CN
// of the certificate that etcd verified.
func (g *Env) Identity(ctx context.Context, cli *clientv3.Client) (etcdIdentity, error) {
	octx, cancel := g.OpContext(ctx)
	defer cancel()
	st, err := cli.AuthStatus(octx)
	if err != nil {
		return etcdIdentity{}, err
	}
	if !st.Enabled {
		return etcdIdentity{Source: IdentityAuthOff}, nil
	}
	if name, _, _ := strings.Cut(g.User, ":"); name != "" {
		return etcdIdentity{Name: name, Source: identityPassword}, nil
	}
	if g.cert != "" {
		cn, err := certCN(g.cert)
		if err != nil {
			return etcdIdentity{}, WithCode(ExitUsage, fmt.Errorf("--cert %s: %w", g.cert, err))
		}
		return etcdIdentity{Name: cn, Source: IdentityCertificate}, nil
	}
	return etcdIdentity{}, nil
}

// certCN is the CN of the first certificate in a PEM file.
func certCN(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return "", fmt.Errorf("no certificate in the file")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return "", err
		}
		return c.Subject.CommonName, nil
	}
}

func WhoAmI() (osUser, host string) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	if u, err := user.Current(); err == nil {
		return u.Username, host
	}
	return Dash(os.Getenv("USER")), host
}
