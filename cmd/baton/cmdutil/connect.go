package cmdutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/rbac"
	"github.com/batonhq/baton/router"
)

// Client connects to etcd and checks, within --dial-timeout, that it
// answers, so that an unreachable cluster fails fast with ExitUnavailable
// and a refusal (TLS, authentication, permission) with ExitDenied, each
// with its cause.
func (g *Env) Client(ctx context.Context) (*clientv3.Client, error) {
	if g.Routed() {
		return g.routedClient(ctx)
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return nil, err
	}
	user, password, err := g.Credentials()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   g.Endpoints,
		DialTimeout: g.DialTimeout,
		TLS:         tlsCfg,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
		Context:     ctx,
		DialOptions: g.dialOptions,
	})
	if err != nil {
		return nil, g.connectError(ctx, tlsCfg, err)
	}
	pctx, cancel := context.WithTimeout(ctx, g.DialTimeout)
	defer cancel()
	// Any key of the namespace will do: a user granted only the namespace
	// may read it, and CountOnly returns no data.
	probe := keys.NamespacePrefix(g.Namespace)
	if _, err := cli.Get(pctx, probe, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if IsPermissionDenied(err) {
			return nil, g.PermissionDenied("etcd at "+strings.Join(g.Endpoints, ","), "read permission on key "+SafeQ(probe), err)
		}
		return nil, g.connectError(ctx, tlsCfg, err)
	}
	return cli, nil
}

// IsPermissionDenied reports whether etcd authenticated the client and
// then found that its user lacks a permission: the identity was accepted,
// the rights were not.
func IsPermissionDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied)
}

// PermissionDenied says which user lacked which permission on which key,
// and what to run, instead of blaming the credentials etcd accepted.
func (g *Env) PermissionDenied(what, lacks string, err error) error {
	user, how := g.etcdUser()
	if user == "" {
		return WithCode(ExitDenied, fmt.Errorf("%s: etcd refused %s: %w", what, g.who(), err))
	}
	return WithCode(ExitDenied, fmt.Errorf("%s: etcd accepted %s, but user %s lacks %s (no role of the user grants it, or there is no such user): %w; "+
		"see each user's grants with baton rbac show (as root), and grant them with baton rbac apply -f POLICY",
		what, how, SafeQ(user), lacks, err))
}

// etcdUser is the etcd user the client acts as, and how it authenticated:
// --user's name, else the CN of the client certificate (etcd's
// --client-cert-auth takes the user from it).
func (g *Env) etcdUser() (user, how string) {
	if name, _, _ := strings.Cut(g.User, ":"); name != "" {
		return name, "the password of user " + SafeQ(name)
	}
	if g.cert == "" {
		return "", ""
	}
	data, err := os.ReadFile(g.cert)
	if err != nil {
		return "", ""
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return "", ""
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil || c.Subject.CommonName == "" {
			return "", ""
		}
		return c.Subject.CommonName, "the client certificate " + SafeQ(g.cert) + " (CN " + SafeQ(c.Subject.CommonName) + ")"
	}
}

// who names the identity this client presents, for refusals.
func (g *Env) who() string {
	if name, _, _ := strings.Cut(g.User, ":"); name != "" {
		return "user " + SafeQ(name)
	}
	if g.cert != "" {
		return "the client certificate " + SafeQ(g.cert)
	}
	return "this client (no --user, no --cert)"
}

func (g *Env) connectError(ctx context.Context, tlsCfg *tls.Config, err error) error {
	eps := strings.Join(g.Endpoints, ",")
	if errors.Is(err, router.ErrIdentity) {
		// The map names another cluster than the one answering: a
		// configuration error, which retrying does not mend.
		return WithCode(ExitDenied, fmt.Errorf("etcd at %s: %w", eps, err))
	}
	if IsDenied(err) {
		return WithCode(ExitDenied, fmt.Errorf("etcd at %s refused %s: %w", eps, g.who(), err))
	}
	// etcd's client reports every failure to connect as a timeout: ask
	// the endpoints directly what is wrong.
	if !isUnavailable(err) {
		return WithCode(ExitError, fmt.Errorf("etcd at %s: %w", eps, err))
	}
	for _, ep := range g.Endpoints {
		if derr := diagnose(ctx, ep, tlsCfg, g.DialTimeout); derr != nil {
			return derr
		}
	}
	return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s within %v: %w", eps, g.DialTimeout, err))
}

// diagnose says why endpoint ep cannot be used, with the exit code that
// fits, or nil when it finds nothing wrong.
func diagnose(ctx context.Context, ep string, tlsCfg *tls.Config, timeout time.Duration) error {
	network, addr, secure := "tcp", ep, tlsCfg != nil
	if scheme, rest, ok := strings.Cut(ep, "://"); ok {
		switch scheme {
		case "unix", "unixs":
			network, addr = "unix", rest
		default:
			if u, err := url.Parse(ep); err == nil {
				addr = u.Host
			}
		}
		secure = scheme == "https" || scheme == "unixs"
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, network, addr)
	if err != nil {
		var dns *net.DNSError
		switch {
		case errors.As(err, &dns):
			return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: no such host %s", ep, SafeQ(dns.Name)))
		case errors.Is(err, syscall.ECONNREFUSED):
			return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: connection refused (nothing listens there)", ep))
		case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
			return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: no answer within %v (host down, filtered, or wrong address)", ep, timeout))
		case errors.Is(err, syscall.ENOENT):
			return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: no such socket", ep))
		}
		return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: %w", ep, err))
	}
	_ = conn.Close()
	if secure && network == "tcp" {
		if perr := rbac.ProbeTLS(dctx, ep, tlsCfg); perr != nil {
			return WithCode(ExitDenied, fmt.Errorf("cannot connect to etcd at %s: %w", ep, perr))
		}
		return nil
	}
	if !secure {
		return WithCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: the port accepts connections but etcd did not answer within %v over plaintext; if it serves TLS, use https:// and --cacert", ep, timeout))
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
