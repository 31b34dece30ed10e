package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/batonhq/baton/internal/keys"
)

// Map is a cluster map: which etcd cluster serves which namespaces. Its
// file form, YAML (or JSON, which is YAML):
//
//	default: jobs-etcd            # optional: serves every namespace not listed
//	clusters:
//	  - name: payments-etcd
//	    endpoints: [https://10.0.1.1:2379, https://10.0.1.2:2379, https://10.0.1.3:2379]
//	    tls: {ca: ca.pem, cert: payments-api.pem, key: payments-api-key.pem}
//	    epoch: 1
//	    namespaces: [payments, ledger]
//	  - name: jobs-etcd
//	    endpoints: [10.0.2.1:2379]
//	    credentials: {user: jobs, passwordEnv: JOBS_ETCD_PASSWORD}
//	    namespaces: [jobs]
//
// Relative file names (tls, passwordFile) are relative to the map file's
// directory when it is read with Load, to the working directory otherwise.
type Map struct {
	// Default, when set, names the cluster that serves every namespace no
	// cluster lists. Without it such a namespace is an error (ErrUnserved).
	Default string `json:"default,omitempty"`
	// Clusters are the clusters, each with a unique name.
	Clusters []Cluster `json:"clusters"`
	// Retired remembers the namespaces (and the default) the map no longer
	// serves, with the last cluster and epoch that served them, so that
	// CheckMove refuses to serve them again at a lower epoch. CheckMove
	// requires a map that stops serving a namespace to add it here, and
	// later maps to keep it until the namespace is served again.
	Retired []Retired `json:"retired,omitempty"`
}

// Retired is a namespace, or the default, that a map no longer serves.
type Retired struct {
	// Namespace is the namespace; empty when Default is set.
	Namespace string `json:"namespace,omitempty"`
	// Default, instead of a namespace, stands for every namespace the
	// former default cluster served without listing it.
	Default bool `json:"default,omitempty"`
	// Cluster, ID and Epoch are those of the last cluster that served it.
	Cluster string `json:"cluster"`
	ID      string `json:"id,omitempty"`
	Epoch   uint16 `json:"epoch"`
}

// Cluster is one independent etcd cluster of a map.
type Cluster struct {
	// Name identifies the cluster: 1 to MaxClusterNameBytes bytes of ASCII
	// letters, digits, '.', '_' and '-'. CheckMove compares clusters by
	// name: a renamed cluster counts as another cluster.
	Name string `json:"name"`
	// Endpoints are the cluster's client URLs (http://host:port,
	// https://host:port) or host:port. An endpoint belongs to one cluster
	// only.
	Endpoints []string `json:"endpoints"`
	// TLS, when set, names the files of a TLS client configuration. An
	// https endpoint without it verifies the server with the system's
	// roots.
	TLS *TLSFiles `json:"tls,omitempty"`
	// Credentials, when set, name the etcd user and where its password is
	// read. A password is never written in the map itself.
	Credentials *Credentials `json:"credentials,omitempty"`
	// Epoch, 0 to MaxEpoch, is the high part of the fencing tokens that
	// Router.Token composes for the cluster's namespaces. A namespace moves
	// only to a cluster with a greater epoch (see CheckMove), so tokens
	// issued after a move are greater than any issued before it.
	Epoch uint16 `json:"epoch,omitempty"`
	// Namespaces are the namespaces the cluster serves. A namespace is
	// served by one cluster only.
	Namespaces []string `json:"namespaces,omitempty"`
	// ID, when set, pins the etcd cluster behind the name: its cluster ID
	// (1 to 16 hex digits) as every etcd response header carries it and
	// `baton clusters pin` writes it. The Router refuses a connection
	// whose endpoints answer as another cluster (ErrIdentity), and
	// CheckMove treats a new ID as a move to another cluster.
	ID string `json:"id,omitempty"`
	// Revision, with ID, is the revision the cluster had reached when it
	// was pinned. A cluster below it was rebuilt (a cluster rebuilt with
	// the same peer URLs and token has the same ID) or restored from a
	// backup: its tokens restart lower, so the Router refuses it too. One
	// rebuilt or restored above it is not caught: pin again now and then.
	Revision int64 `json:"revision,omitempty"`
}

// TLSFiles are PEM files for a TLS client configuration.
type TLSFiles struct {
	// CA verifies the server's certificate; empty means the system's roots.
	CA string `json:"ca,omitempty"`
	// Cert and Key, together or not at all, authenticate the client (with
	// etcd's --client-cert-auth, the certificate's CN is the etcd user).
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Credentials are an etcd user and the source of its password: exactly one
// of PasswordEnv and PasswordFile.
type Credentials struct {
	User string `json:"user"`
	// PasswordEnv names the environment variable holding the password,
	// read when the connection is opened.
	PasswordEnv string `json:"passwordEnv,omitempty"`
	// PasswordFile names a file holding the password (one trailing newline
	// is dropped), read when the connection is opened.
	PasswordFile string `json:"passwordFile,omitempty"`
}

// Bounds of a map.
const (
	// MaxClusterNameBytes is the longest cluster name.
	MaxClusterNameBytes = 63
	// MaxEpoch is the greatest epoch: tokens keep 47 bits for the
	// revision and 16 for the epoch.
	MaxEpoch = 1<<16 - 1
	// MaxMapBytes is the largest map Parse and Load read.
	MaxMapBytes = 1 << 20
)

// ParseMap reads a cluster map from YAML or JSON and validates it.
// Decoding is strict and every problem is reported at once, joined, each
// wrapping ErrInvalidMap and naming its place (clusters[1].tls.cert): an
// unknown field, a duplicate key, a value of the wrong type, and every
// problem Validate finds. A syntax error alone stops the reading.
func ParseMap(data []byte) (Map, error) {
	if len(data) > MaxMapBytes {
		return Map{}, fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidMap, len(data), MaxMapBytes)
	}
	if err := oneDocument(data); err != nil {
		return Map{}, err
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Map{}, fmt.Errorf("%w: %v", ErrInvalidMap, err)
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return Map{}, fmt.Errorf("%w: %v", ErrInvalidMap, err)
	}
	d := &decoder{bad: map[string]bool{}}
	m := d.top(tree)
	problems := append(d.problems, m.validate(d.bad)...)
	if len(problems) > 0 {
		return Map{}, errors.Join(problems...)
	}
	return m, nil
}

// Encode writes m as YAML in the form ParseMap reads.
func (m Map) Encode() ([]byte, error) {
	return yaml.Marshal(m)
}

// Validate reports every problem of m at once, joined, each wrapping
// ErrInvalidMap: bad or duplicate cluster names, no or bad endpoints, an
// endpoint in two clusters, a TLS certificate without its key, credentials
// without a user or with other than one password source, a bad namespace,
// a namespace served twice, a default that names no cluster.
func (m Map) Validate() error { return errors.Join(m.validate(nil)...) }

// validate skips the fields whose decoding already failed.
func (m Map) validate(skip map[string]bool) []error {
	var problems []error
	bad := func(path, format string, args ...any) {
		if skip[path] {
			return
		}
		problems = append(problems, fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidMap, path}, args...)...))
	}
	if len(m.Clusters) == 0 && !skip["clusters"] {
		bad("clusters", "at least one cluster is needed")
	}
	names := map[string]int{}
	ids := map[string]string{}
	endpoints := map[string]string{}
	served := map[string]string{}
	for i, c := range m.Clusters {
		p := fmt.Sprintf("clusters[%d]", i)
		if err := ValidateClusterName(c.Name); err != nil {
			bad(p+".name", "%v", err)
		} else if j, dup := names[c.Name]; dup {
			bad(p+".name", "cluster %q is also clusters[%d]", c.Name, j)
		} else {
			names[c.Name] = i
		}
		if len(c.Endpoints) == 0 {
			bad(p+".endpoints", "at least one endpoint is needed")
		}
		for j, ep := range c.Endpoints {
			ep := ep
			pe := fmt.Sprintf("%s.endpoints[%d]", p, j)
			norm, _, err := normalizeEndpoint(ep)
			if err != nil {
				bad(pe, "%v", err)
				continue
			}
			if other, dup := endpoints[norm]; dup {
				bad(pe, "endpoint %q is also %s: an endpoint belongs to one cluster", ep, other)
				continue
			}
			endpoints[norm] = pe
			if c.TLS != nil && strings.HasPrefix(ep, "http://") {
				bad(pe, "endpoint %q is plain http but the cluster has tls", ep)
			}
		}
		if t := c.TLS; t != nil {
			if (t.Cert == "") != (t.Key == "") {
				bad(p+".tls", "cert and key go together")
			}
			if *t == (TLSFiles{}) {
				bad(p+".tls", "names no file; leave it out to use the system's roots")
			}
		}
		if cr := c.Credentials; cr != nil {
			if err := validateUser(cr.User); err != nil {
				bad(p+".credentials.user", "%v", err)
			}
			switch {
			case cr.PasswordEnv == "" && cr.PasswordFile == "":
				bad(p+".credentials", "needs passwordEnv or passwordFile")
			case cr.PasswordEnv != "" && cr.PasswordFile != "":
				bad(p+".credentials", "passwordEnv and passwordFile exclude each other")
			case cr.PasswordEnv != "" && !validEnvName(cr.PasswordEnv):
				bad(p+".credentials.passwordEnv", "%q is not an environment variable name", cr.PasswordEnv)
			}
		}
		if c.ID != "" {
			if _, err := ParseClusterID(c.ID); err != nil {
				bad(p+".id", "%v", err)
			} else if other, dup := ids[canonID(c.ID)]; dup {
				bad(p+".id", "cluster id %s is also %s: two names for one etcd cluster", c.ID, other)
			} else {
				ids[canonID(c.ID)] = p
			}
		}
		if c.Revision < 0 {
			bad(p+".revision", "must not be negative, got %d", c.Revision)
		} else if c.Revision > 0 && c.ID == "" {
			bad(p+".revision", "goes with the id it was read with")
		}
		for j, ns := range c.Namespaces {
			pn := fmt.Sprintf("%s.namespaces[%d]", p, j)
			if err := keys.ValidateNamespace(ns); err != nil {
				bad(pn, "%s", strings.TrimPrefix(err.Error(), keys.ErrInvalid.Error()+": "))
				continue
			}
			if other, dup := served[ns]; dup {
				bad(pn, "namespace %q is also served by %s: a namespace is served by one cluster", ns, other)
				continue
			}
			served[ns] = fmt.Sprintf("%s (%q)", p, c.Name)
		}
	}
	if m.Default != "" {
		if _, ok := names[m.Default]; !ok {
			bad("default", "%q is not the name of a cluster", m.Default)
		}
	}
	retired := map[string]bool{}
	for i, r := range m.Retired {
		p := fmt.Sprintf("retired[%d]", i)
		if err := ValidateClusterName(r.Cluster); err != nil {
			bad(p+".cluster", "%v", err)
		}
		if r.ID != "" {
			if _, err := ParseClusterID(r.ID); err != nil {
				bad(p+".id", "%v", err)
			}
		}
		switch {
		case r.Default && r.Namespace != "":
			bad(p, "names a namespace and the default: one or the other")
		case r.Default && m.Default != "":
			bad(p, "retires the default, but the map has a default cluster")
		case r.Default && retired[""]:
			bad(p, "the default is retired twice")
		case r.Default:
			retired[""] = true
		case r.Namespace == "":
			bad(p, "names no namespace (or default: true)")
		default:
			if err := keys.ValidateNamespace(r.Namespace); err != nil {
				bad(p+".namespace", "%s", strings.TrimPrefix(err.Error(), keys.ErrInvalid.Error()+": "))
			} else if other, ok := served[r.Namespace]; ok {
				bad(p+".namespace", "namespace %q is served by %s: drop it from retired", r.Namespace, other)
			} else if m.Default != "" {
				bad(p+".namespace", "namespace %q is served by the default cluster %q: drop it from retired", r.Namespace, m.Default)
			} else if retired[r.Namespace] {
				bad(p+".namespace", "namespace %q is retired twice", r.Namespace)
			}
			retired[r.Namespace] = true
		}
	}
	return problems
}

// ValidateClusterName reports whether name can name a cluster.
func ValidateClusterName(name string) error {
	if name == "" {
		return errors.New("cluster name must not be empty")
	}
	if len(name) > MaxClusterNameBytes {
		return fmt.Errorf("cluster name is %d bytes, at most %d allowed", len(name), MaxClusterNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("cluster name %q may hold only letters, digits, '.', '_' and '-' (byte %d is %q)", name, i, c)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("cluster name %q is reserved", name)
	}
	return nil
}

func validateUser(u string) error {
	if u == "" {
		return errors.New("user must not be empty")
	}
	if len(u) > 128 {
		return fmt.Errorf("user is %d bytes, at most 128 allowed", len(u))
	}
	for i, r := range u {
		if r < 0x20 || r == 0x7f || r == ':' {
			return fmt.Errorf("user %q has %q at byte %d", u, r, i)
		}
	}
	return nil
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// DefaultPort is the port of an endpoint written without one: etcd's
// client port.
const DefaultPort = "2379"

// normalizeEndpoint checks an endpoint and returns the form two spellings
// of one endpoint share (the host lower-cased without a trailing dot, an
// IP address in its canonical form, IPv4-mapped IPv6 as IPv4, the port
// as a number, DefaultPort when none), so that "a:1", "http://A:1" and
// "[::1]:1", "[0:0:0:0:0:0:0:1]:1" compare equal; and the endpoint as
// the etcd client dials it, with the port made explicit.
func normalizeEndpoint(ep string) (key, dial string, err error) {
	hostport := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return "", "", fmt.Errorf("endpoint %q is not a URL", ep)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", "", fmt.Errorf("endpoint %q: scheme must be http or https", ep)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return "", "", fmt.Errorf("endpoint %q must be scheme://host:port and nothing else", ep)
		}
		hostport = u.Host
	}
	dial = strings.TrimSuffix(ep, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: etcd's own. A bare IPv6 address needs brackets.
		host, port = hostport, DefaultPort
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		} else if strings.Contains(host, ":") {
			return "", "", fmt.Errorf("endpoint %q is not host:port (an IPv6 address goes in brackets: [::1]:2379)", ep)
		}
		dial += ":" + DefaultPort
	}
	if host == "" {
		return "", "", fmt.Errorf("endpoint %q is not host:port", ep)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return "", "", fmt.Errorf("endpoint %q: port must be 1 to 65535", ep)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	} else {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if host == "" || strings.ContainsAny(host, "[]/ \t@%") {
			return "", "", fmt.Errorf("endpoint %q is not host:port", ep)
		}
		if numericHost(host) {
			return "", "", fmt.Errorf("endpoint %q: %q is not a canonical IP address (write it as four decimal numbers without leading zeros, or an IPv6 address in brackets), nor a name", ep, host)
		}
	}
	key = net.JoinHostPort(host, strconv.Itoa(n))
	return key, dial, nil
}

// numericHost reports whether a host that is not an IP in canonical form
// still reads as a number: its last label all decimal digits or 0x and hex
// digits. No top-level domain is all digits, and inet_aton, which some
// resolvers use, reads "127.1", "127.000.000.001", "2130706433" and
// "0x7f000001" as 127.0.0.1, so two spellings of one address would escape
// the one-cluster check.
func numericHost(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		last = h
		return strings.Trim(last, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// ClientEndpoints are the cluster's endpoints as the etcd client dials
// them: as written, with DefaultPort added where the map leaves the port
// out. The Router and the baton CLI dial these.
func (c Cluster) ClientEndpoints() []string {
	out := make([]string, 0, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		if _, dial, err := normalizeEndpoint(ep); err == nil {
			out = append(out, dial)
		} else {
			out = append(out, ep)
		}
	}
	return out
}

// oneDocument refuses a map file holding more than one YAML document: the
// parser would read the first and drop the others silently, so that a
// second document routing namespaces elsewhere would be ignored.
func oneDocument(data []byte) error {
	n, err := yamlDocuments(data)
	if err != nil || n <= 1 {
		return nil // a syntax error is reported by the strict reading
	}
	return fmt.Errorf("%w: a second YAML document begins at line %d: a cluster map is one document", ErrInvalidMap, secondDocumentLine(data))
}

// yamlDocuments counts the YAML documents in data, up to 2.
func yamlDocuments(data []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	n := 0
	for n < 2 {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			if n >= 1 {
				// The first document was whole: what the parser cannot
				// read is a second one, which the strict reading of the
				// first alone would drop.
				return 2, nil
			}
			return n, err
		}
		n++
	}
	return n, nil
}

// secondDocumentLine finds the line where the second document starts: the
// first document marker ("---" or "..." at the start of a line) such that
// the text before it already holds a whole document.
func secondDocumentLine(data []byte) int {
	line := 1
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		l := data[off:next]
		if isMarker(l, "---") || isMarker(l, "...") {
			at := next // after "...", the next document starts after the marker
			if isMarker(l, "---") {
				at = off
			}
			if n, err := yamlDocuments(data[:at]); err == nil && n >= 1 {
				if isMarker(l, "...") {
					return line + 1
				}
				return line
			}
		}
		off = next
		line++
	}
	return line
}

func isMarker(l []byte, m string) bool {
	if !bytes.HasPrefix(l, []byte(m)) {
		return false
	}
	rest := l[len(m):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r'
}

// resolve makes the map's relative file names relative to dir.
func (m *Map) resolve(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range m.Clusters {
		c := &m.Clusters[i]
		if c.TLS != nil {
			t := *c.TLS
			abs(&t.CA)
			abs(&t.Cert)
			abs(&t.Key)
			c.TLS = &t
		}
		if c.Credentials != nil {
			cr := *c.Credentials
			abs(&cr.PasswordFile)
			c.Credentials = &cr
		}
	}
}

// checkFiles reports every file the map names that cannot be read.
func (m Map) checkFiles() []error {
	var problems []error
	check := func(path, file string) {
		if file == "" {
			return
		}
		f, err := os.Open(file)
		if err != nil {
			problems = append(problems, fmt.Errorf("%w: %s: %v", ErrInvalidMap, path, err))
			return
		}
		_ = f.Close()
	}
	for i, c := range m.Clusters {
		p := fmt.Sprintf("clusters[%d]", i)
		if c.TLS != nil {
			check(p+".tls.ca", c.TLS.CA)
			check(p+".tls.cert", c.TLS.Cert)
			check(p+".tls.key", c.TLS.Key)
		}
		if c.Credentials != nil {
			check(p+".credentials.passwordFile", c.Credentials.PasswordFile)
		}
	}
	return problems
}

// clone returns a deep copy, so that what a Router hands out cannot
// change it.
func (c Cluster) clone() Cluster {
	c.Endpoints = slices.Clone(c.Endpoints)
	c.Namespaces = slices.Clone(c.Namespaces)
	if c.TLS != nil {
		t := *c.TLS
		c.TLS = &t
	}
	if c.Credentials != nil {
		cr := *c.Credentials
		c.Credentials = &cr
	}
	return c
}
