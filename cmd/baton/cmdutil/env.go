package cmdutil

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
	DefaultEndpoint       = "127.0.0.1:2379"
	defaultDialTimeout    = 2 * time.Second
	defaultCommandTimeout = 5 * time.Second
)

// Output formats of -o.
const (
	FormatTable = "table"
	FormatJSON  = "json"
)

// Env holds the global flags and what every command shares.
type Env struct {
	IO IO

	Endpoints      []string
	cacert         string
	cert           string
	key            string
	User           string
	Namespace      string
	DialTimeout    time.Duration
	CommandTimeout time.Duration
	Output         string
	PasswordStdin  bool
	PasswordFile   string
	insecure       bool

	envErr error // a BATON_* variable that does not parse
	Ran    bool  // PersistentPreRunE ran: later errors are not usage errors

	Clusters *clusterState // --clusters (clusters.go)

	// dialOptions, with a cluster map, make the client refuse an etcd
	// cluster other than the one the map pins (router.Cluster.DialOptions).
	dialOptions []grpc.DialOption
}

func NewEnv(io IO) *Env {
	if io.Getenv == nil {
		io.Getenv = func(string) string { return "" }
	}
	if io.Now == nil {
		io.Now = time.Now
	}
	if io.In == nil {
		io.In = strings.NewReader("")
	}
	return &Env{IO: io}
}

func (g *Env) Register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&g.Endpoints, "endpoints", []string{DefaultEndpoint}, "etcd endpoints, comma-separated: host:port, http://host:port, https://host:port")
	fs.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle")
	fs.StringVar(&g.cert, "cert", "", "client certificate for TLS client authentication")
	fs.StringVar(&g.key, "key", "", "client key for TLS client authentication")
	fs.StringVar(&g.User, "user", "", "etcd user NAME; the password comes from --password-stdin, --password-file, BATON_PASSWORD or a prompt (NAME:PASSWORD works but shows it in the process list)")
	fs.BoolVar(&g.PasswordStdin, "password-stdin", false, "read the --user password from the first line of standard input")
	fs.StringVar(&g.PasswordFile, "password-file", "", "read the --user password from the first line of this file")
	fs.BoolVar(&g.insecure, "insecure-transport", false, "allow a password or client key to be sent to a plaintext (http://) endpoint")
	fs.StringVar(&g.Namespace, "namespace", keys.DefaultNamespace, "namespace: the first segment of every key")
	fs.DurationVar(&g.DialTimeout, "dial-timeout", defaultDialTimeout, "how long to try to reach etcd")
	fs.DurationVar(&g.CommandTimeout, "command-timeout", defaultCommandTimeout, "bound of each one-shot request")
	fs.StringVarP(&g.Output, "output", "o", FormatTable, "output format: table or json")
	fs.StringVarP(&g.Output, "write-out", "w", FormatTable, "the same as --output (etcdctl's spelling)")
	g.envErr = flagsFromEnv(fs, g.IO.Getenv)
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

func (g *Env) Validate() error {
	if g.envErr != nil {
		return g.envErr
	}
	switch {
	case g.Output != FormatTable && g.Output != FormatJSON:
		return UsageErrorf("-o %q: the output format must be table or json", g.Output)
	case len(g.Endpoints) == 0:
		return UsageErrorf("--endpoints: at least one endpoint is needed")
	case g.DialTimeout <= 0:
		return UsageErrorf("--dial-timeout %v: must be positive", g.DialTimeout)
	case g.CommandTimeout <= 0:
		return UsageErrorf("--command-timeout %v: must be positive", g.CommandTimeout)
	case (g.cert == "") != (g.key == ""):
		return UsageErrorf("--cert and --key go together")
	}
	if err := keys.ValidateNamespace(g.Namespace); err != nil {
		return WithCode(ExitUsage, fmt.Errorf("--namespace: %w", err))
	}
	for _, ep := range g.Endpoints {
		if err := validateEndpoint(ep); err != nil {
			return err
		}
	}
	return g.validateSecrets()
}

func (g *Env) JSON() bool { return g.Output == FormatJSON }

// tlsConfig is nil when no TLS flag is set.
func (g *Env) tlsConfig() (*tls.Config, error) {
	if g.cacert == "" && g.cert == "" {
		for _, ep := range g.Endpoints {
			if !strings.HasPrefix(ep, "https://") {
				return nil, nil
			}
		}
	}
	info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, WithCode(ExitUsage, fmt.Errorf("TLS flags: %w", err))
	}
	return cfg, nil
}

// OpContext bounds one request by --command-timeout.
func (g *Env) OpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.CommandTimeout)
}

// OpClient is a client and a context bounded by the command timeout
// (OpContext) for one command's reads and writes; done closes both.
func (g *Env) OpClient(ctx context.Context) (*clientv3.Client, context.Context, func(), error) {
	cli, err := g.Client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	octx, cancel := g.OpContext(ctx)
	return cli, octx, func() { cancel(); _ = cli.Close() }, nil
}

// Failed names what failed and gives the error its exit code.
func (g *Env) Failed(what string, err error) error {
	var ee *CodedError
	if errors.As(err, &ee) {
		return err
	}
	if isUnavailable(err) {
		return WithCode(ExitUnavailable, fmt.Errorf("%s: etcd did not answer within %v: %w", what, g.CommandTimeout, err))
	}
	if errors.Is(err, router.ErrIdentity) {
		return WithCode(ExitDenied, fmt.Errorf("%s: %w", what, err))
	}
	if IsPermissionDenied(err) {
		return g.PermissionDenied(what, "the permission this needs on the keys of namespace "+SafeQ(g.Namespace)+" (prefix "+SafeQ(keys.NamespacePrefix(g.Namespace))+")", err)
	}
	if IsDenied(err) {
		return WithCode(ExitDenied, fmt.Errorf("%s: etcd refused %s: %w", what, g.who(), err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// OpenElection connects and opens election name in the namespace, for the
// read-only commands; done closes both.
func (g *Env) OpenElection(ctx context.Context, name string) (*clientv3.Client, *election.Election, func(), error) {
	cli, err := g.Client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := election.New(cli, name, election.WithNamespace(g.Namespace))
	if err != nil {
		_ = cli.Close()
		return nil, nil, nil, WithCode(ExitUsage, err)
	}
	return cli, e, func() {
		_ = e.Close()
		_ = cli.Close()
	}, nil
}
