package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/rbac"
)

// Defaults of the global flags: they reach `baton dev` as it starts
// without flags.
const (
	defaultEndpoint       = "127.0.0.1:2379"
	defaultDialTimeout    = 2 * time.Second
	defaultCommandTimeout = 5 * time.Second
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
)

// globals holds the global flags and what every command shares.
type globals struct {
	io IO

	endpoints      []string
	cacert         string
	cert           string
	key            string
	user           string
	namespace      string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	output         string

	ran bool // PersistentPreRunE ran: later errors are not usage errors

	cl *clusterState // --clusters (clusters.go)
}

func newGlobals(io IO) *globals {
	if io.Getenv == nil {
		io.Getenv = func(string) string { return "" }
	}
	if io.Now == nil {
		io.Now = time.Now
	}
	if io.In == nil {
		io.In = strings.NewReader("")
	}
	return &globals{io: io}
}

func (g *globals) register(fs *pflag.FlagSet) {
	endpoints := []string{defaultEndpoint}
	if env := g.io.Getenv("BATON_ENDPOINTS"); env != "" {
		endpoints = splitList(env)
	}
	fs.StringSliceVar(&g.endpoints, "endpoints", endpoints, "etcd endpoints, comma-separated (env BATON_ENDPOINTS)")
	fs.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle")
	fs.StringVar(&g.cert, "cert", "", "client certificate for TLS client authentication")
	fs.StringVar(&g.key, "key", "", "client key for TLS client authentication")
	fs.StringVar(&g.user, "user", "", "etcd user, as NAME or NAME:PASSWORD; the password is read from BATON_PASSWORD or prompted for")
	fs.StringVar(&g.namespace, "namespace", keys.DefaultNamespace, "namespace: the first segment of every key")
	fs.DurationVar(&g.dialTimeout, "dial-timeout", defaultDialTimeout, "how long to try to reach etcd")
	fs.DurationVar(&g.commandTimeout, "command-timeout", defaultCommandTimeout, "bound of each one-shot request")
	fs.StringVarP(&g.output, "output", "o", formatTable, "output format: table or json")
	g.registerClusters(fs)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (g *globals) validate() error {
	switch {
	case g.output != formatTable && g.output != formatJSON:
		return usageErrorf("-o %q: the output format must be table or json", g.output)
	case len(g.endpoints) == 0:
		return usageErrorf("--endpoints: at least one endpoint is needed")
	case g.dialTimeout <= 0:
		return usageErrorf("--dial-timeout %v: must be positive", g.dialTimeout)
	case g.commandTimeout <= 0:
		return usageErrorf("--command-timeout %v: must be positive", g.commandTimeout)
	case (g.cert == "") != (g.key == ""):
		return usageErrorf("--cert and --key go together")
	}
	if err := keys.ValidateNamespace(g.namespace); err != nil {
		return withCode(ExitUsage, fmt.Errorf("--namespace: %w", err))
	}
	return nil
}

func (g *globals) json() bool { return g.output == formatJSON }

// tlsConfig is nil when no TLS flag is set.
func (g *globals) tlsConfig() (*tls.Config, error) {
	if g.cacert == "" && g.cert == "" {
		for _, ep := range g.endpoints {
			if !strings.HasPrefix(ep, "https://") {
				return nil, nil
			}
		}
	}
	info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("TLS flags: %w", err))
	}
	return cfg, nil
}

// credentials splits --user and finds the password.
func (g *globals) credentials() (user, password string, err error) {
	if g.user == "" {
		return "", "", nil
	}
	user, password, found := strings.Cut(g.user, ":")
	if user == "" {
		return "", "", usageErrorf("--user: the user name is empty")
	}
	if found {
		return user, password, nil
	}
	if p := g.io.Getenv("BATON_PASSWORD"); p != "" {
		return user, p, nil
	}
	password, err = g.prompt(fmt.Sprintf("Password for %s: ", user))
	if err != nil {
		return "", "", withCode(ExitUsage, fmt.Errorf("--user %s: no BATON_PASSWORD and no password read: %w", user, err))
	}
	return user, password, nil
}

// prompt reads one line from the input, without echo on a terminal.
func (g *globals) prompt(text string) (string, error) {
	fmt.Fprint(g.io.Err, text)
	if f, ok := g.io.In.(*os.File); ok {
		if restore, err := noEcho(int(f.Fd())); err == nil {
			defer func() {
				restore()
				fmt.Fprintln(g.io.Err)
			}()
		}
	}
	line, err := bufio.NewReader(g.io.In).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// noEcho turns echo off on a terminal; it fails on anything else.
func noEcho(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// client connects to etcd and checks, within --dial-timeout, that it
// answers, so that an unreachable cluster fails fast with ExitUnavailable.
func (g *globals) client(ctx context.Context) (*clientv3.Client, error) {
	if g.routed() {
		return g.routedClient(ctx)
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return nil, err
	}
	user, password, err := g.credentials()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   g.endpoints,
		DialTimeout: g.dialTimeout,
		TLS:         tlsCfg,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return nil, g.connectError(err)
	}
	pctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	// Any key of the namespace will do: a user granted only the namespace
	// may read it, and CountOnly returns no data.
	if _, err := cli.Get(pctx, keys.NamespacePrefix(g.namespace), clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, g.connectError(err)
	}
	return cli, nil
}

func (g *globals) connectError(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrPermissionDenied),
		errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return withCode(ExitError, fmt.Errorf("etcd at %s: %w", strings.Join(g.endpoints, ","), err))
	}
	// etcd's client reports a refused TLS handshake only as a timeout: ask
	// the endpoints directly which side refused and why.
	if tlsCfg, terr := g.tlsConfig(); terr == nil && tlsCfg != nil && errors.Is(err, context.DeadlineExceeded) {
		for _, ep := range g.endpoints {
			pctx, cancel := context.WithTimeout(context.Background(), g.dialTimeout)
			perr := rbac.ProbeTLS(pctx, ep, tlsCfg)
			cancel()
			if perr != nil {
				return withCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s: %w", ep, perr))
			}
		}
	}
	return withCode(ExitUnavailable, fmt.Errorf("cannot connect to etcd at %s within %v: %w",
		strings.Join(g.endpoints, ","), g.dialTimeout, err))
}

// opContext bounds one request by --command-timeout.
func (g *globals) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.commandTimeout)
}

// failed names what failed and gives the error its exit code.
func (g *globals) failed(what string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if isUnavailable(err) {
		return withCode(ExitUnavailable, fmt.Errorf("%s: etcd did not answer within %v: %w", what, g.commandTimeout, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// openElection connects and opens election name in the namespace, for the
// read-only commands; done closes both.
func (g *globals) openElection(ctx context.Context, name string) (*clientv3.Client, *election.Election, func(), error) {
	cli, err := g.client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := election.New(cli, name, election.WithNamespace(g.namespace))
	if err != nil {
		_ = cli.Close()
		return nil, nil, nil, withCode(ExitUsage, err)
	}
	return cli, e, func() {
		_ = e.Close()
		_ = cli.Close()
	}, nil
}
