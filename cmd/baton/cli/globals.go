package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/router"
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
	passwordStdin  bool
	passwordFile   string
	insecure       bool

	envErr error // a BATON_* variable that does not parse
	ran    bool  // PersistentPreRunE ran: later errors are not usage errors

	cl *clusterState // --clusters (clusters.go)

	// dialOptions, with a cluster map, make the client refuse an etcd
	// cluster other than the one the map pins (router.Cluster.DialOptions).
	dialOptions []grpc.DialOption
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
	fs.StringSliceVar(&g.endpoints, "endpoints", []string{defaultEndpoint}, "etcd endpoints, comma-separated: host:port, http://host:port, https://host:port")
	fs.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle")
	fs.StringVar(&g.cert, "cert", "", "client certificate for TLS client authentication")
	fs.StringVar(&g.key, "key", "", "client key for TLS client authentication")
	fs.StringVar(&g.user, "user", "", "etcd user NAME; the password comes from --password-stdin, --password-file, BATON_PASSWORD or a prompt (NAME:PASSWORD works but shows it in the process list)")
	fs.BoolVar(&g.passwordStdin, "password-stdin", false, "read the --user password from the first line of standard input")
	fs.StringVar(&g.passwordFile, "password-file", "", "read the --user password from the first line of this file")
	fs.BoolVar(&g.insecure, "insecure-transport", false, "allow a password or client key to be sent to a plaintext (http://) endpoint")
	fs.StringVar(&g.namespace, "namespace", keys.DefaultNamespace, "namespace: the first segment of every key")
	fs.DurationVar(&g.dialTimeout, "dial-timeout", defaultDialTimeout, "how long to try to reach etcd")
	fs.DurationVar(&g.commandTimeout, "command-timeout", defaultCommandTimeout, "bound of each one-shot request")
	fs.StringVarP(&g.output, "output", "o", formatTable, "output format: table or json")
	g.envErr = flagsFromEnv(fs, g.io.Getenv)
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
	if g.envErr != nil {
		return g.envErr
	}
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
	for _, ep := range g.endpoints {
		if err := validateEndpoint(ep); err != nil {
			return err
		}
	}
	return g.validateSecrets()
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
	if errors.Is(err, router.ErrIdentity) {
		return withCode(ExitDenied, fmt.Errorf("%s: %w", what, err))
	}
	if isPermissionDenied(err) {
		return g.permissionDenied(what, "the permission this needs on the keys of namespace "+safeQ(g.namespace)+" (prefix "+safeQ(keys.NamespacePrefix(g.namespace))+")", err)
	}
	if isDenied(err) {
		return withCode(ExitDenied, fmt.Errorf("%s: etcd refused %s: %w", what, g.who(), err))
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
