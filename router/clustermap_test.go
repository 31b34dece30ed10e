package router_test

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/router"
)

const fullMap = `
default: jobs-etcd
clusters:
  - name: payments-etcd
    endpoints: [https://10.0.1.1:2379, https://10.0.1.2:2379]
    tls: {ca: ca.pem, cert: client.pem, key: client-key.pem}
    epoch: 2
    namespaces: [payments, ledger]
  - name: jobs-etcd
    endpoints: [10.0.2.1:2379]
    credentials: {user: jobs, passwordEnv: JOBS_ETCD_PASSWORD}
    namespaces: [jobs]
`

func TestParseMapReadsEveryField(t *testing.T) {
	m, err := router.ParseMap([]byte(fullMap))
	if err != nil {
		t.Fatal(err)
	}
	want := router.Map{Default: "jobs-etcd", Clusters: []router.Cluster{
		{Name: "payments-etcd", Endpoints: []string{"https://10.0.1.1:2379", "https://10.0.1.2:2379"},
			TLS: &router.TLSFiles{CA: "ca.pem", Cert: "client.pem", Key: "client-key.pem"}, Epoch: 2,
			Namespaces: []string{"payments", "ledger"}},
		{Name: "jobs-etcd", Endpoints: []string{"10.0.2.1:2379"},
			Credentials: &router.Credentials{User: "jobs", PasswordEnv: "JOBS_ETCD_PASSWORD"},
			Namespaces:  []string{"jobs"}},
	}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("ParseMap =\n%+v\nwant\n%+v", m, want)
	}
}

func TestEncodeIsReadBackUnchanged(t *testing.T) {
	m, err := router.ParseMap([]byte(fullMap))
	if err != nil {
		t.Fatal(err)
	}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := router.ParseMap(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back, m)
	}
}

// One map with many problems: each is reported, in one error.
func TestParseMapReportsEveryProblemAtOnce(t *testing.T) {
	const bad = `
default: nowhere
colour: blue
clusters:
  - name: a
    endpoints: [127.0.0.1:1, "ftp://x:2", "::1"]
    namespaces: [payments, "bad/ns"]
    tsl: {ca: x}
  - name: a
    endpoints: ["http://127.0.0.1:1"]
    namespaces: [payments]
    epoch: 70000
    tls: {cert: c.pem}
  - name: "c d"
    endpoints: "127.0.0.1:3"
    credentials: {user: u}
  - name: e
    endpoints: []
    credentials: {passwordEnv: "1BAD", passwordFile: f}
    namespaces: [7]
`
	_, err := router.ParseMap([]byte(bad))
	if err == nil {
		t.Fatal("ParseMap accepted a bad map")
	}
	if !errors.Is(err, router.ErrInvalidMap) {
		t.Fatalf("error %v does not wrap ErrInvalidMap", err)
	}
	for _, want := range []string{
		`colour: unknown field`,
		`clusters[0].tsl: unknown field`,
		`clusters[0].endpoints[1]: endpoint "ftp://x:2": scheme must be http or https`,
		`clusters[0].endpoints[2]: endpoint "::1" is not host:port`,
		`clusters[0].namespaces[1]: namespace "bad/ns" may hold only`,
		`clusters[1].name: cluster "a" is also clusters[0]`,
		`clusters[1].endpoints[0]: endpoint "http://127.0.0.1:1" is also clusters[0].endpoints[0]`,
		`clusters[1].namespaces[0]: namespace "payments" is also served by clusters[0] ("a")`,
		`clusters[1].epoch: want an integer from 0 to 65535, got 70000`,
		`clusters[1].tls: cert and key go together`,
		`clusters[2].name: cluster name "c d" may hold only`,
		`clusters[2].endpoints: want a list of strings, got a string`,
		`clusters[2].credentials: needs passwordEnv or passwordFile`,
		`clusters[3].endpoints: at least one endpoint is needed`,
		`clusters[3].credentials.user: user must not be empty`,
		`clusters[3].credentials: passwordEnv and passwordFile exclude each other`,
		`clusters[3].namespaces[0]: want a string, got a number`,
		`default: "nowhere" is not the name of a cluster`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	// Decoding problems are not reported again by validation.
	if n := strings.Count(err.Error(), "clusters[2].endpoints"); n != 1 {
		t.Errorf("clusters[2].endpoints reported %d times:\n%v", n, err)
	}
}

func TestParseMapRefuses(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"empty", ``, "the map is empty"},
		{"no clusters", `clusters: []`, "at least one cluster is needed"},
		{"not a mapping", `[1, 2]`, "want a mapping"},
		{"syntax", "clusters: [", "invalid cluster map"},
		{"duplicate key", "clusters: []\nclusters: []", "invalid cluster map"},
		{"tls with plain http", "clusters: [{name: a, endpoints: ['http://h:1'], tls: {ca: x}}]", "is plain http but the cluster has tls"},
		{"empty tls", "clusters: [{name: a, endpoints: ['h:1'], tls: {}}]", "names no file"},
		{"endpoint with a path", "clusters: [{name: a, endpoints: ['http://h:1/x']}]", "scheme://host:port and nothing else"},
		{"port out of range", "clusters: [{name: a, endpoints: ['h:70000']}]", "port must be 1 to 65535"},
		{"signed port", "clusters: [{name: a, endpoints: ['h:+2379']}]", "port must be 1 to 65535"},
		// Numbers that are not an IP's canonical form are not names
		// either (no top-level domain is all digits): a resolver that
		// reads them as inet_aton does would reach 127.0.0.1, which the
		// one-cluster check could not see.
		{"IPv4 with leading zeros", "clusters: [{name: a, endpoints: ['127.000.000.001:2379']}]", "not a canonical IP address"},
		{"short IPv4", "clusters: [{name: a, endpoints: ['127.1:2379']}]", "not a canonical IP address"},
		{"IPv4 as one number", "clusters: [{name: a, endpoints: ['2130706433:2379']}]", "not a canonical IP address"},
		{"hex IPv4", "clusters: [{name: a, endpoints: ['0x7f.0.0.1:2379']}]", "not a canonical IP address"},
		{"hex IPv4 as one number", "clusters: [{name: a, endpoints: ['http://0x7F000001:2379']}]", "not a canonical IP address"},
		{"negative epoch", "clusters: [{name: a, endpoints: ['h:1'], epoch: -1}]", "want an integer"},
		{"fractional epoch", "clusters: [{name: a, endpoints: ['h:1'], epoch: 1.5}]", "want an integer"},
		{"user with a colon", "clusters: [{name: a, endpoints: ['h:1'], credentials: {user: 'u:p', passwordEnv: P}}]", `has ':'`},
		{"too large", "#" + strings.Repeat("x", router.MaxMapBytes), "at most"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := router.ParseMap([]byte(tt.in))
			if err == nil || !errors.Is(err, router.ErrInvalidMap) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseMap(%q) = %v, want ErrInvalidMap with %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	m := router.Map{Clusters: []router.Cluster{{Name: "a", Endpoints: []string{"h:1"}}}}
	for _, tt := range []struct {
		opt  router.Option
		want string
	}{
		{router.WithDialTimeout(0), "WithDialTimeout(0s): must be more than 0 and at most 1m0s"},
		{router.WithDialTimeout(2 * router.MaxDialTimeout), "at most 1m0s"},
		{router.WithLogger(nil), "WithLogger(nil)"},
		{router.WithGetenv(nil), "WithGetenv(nil)"},
	} {
		if _, err := router.New(m, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New = %v, want an error with %q", err, tt.want)
		}
	}
}

func TestLoadResolvesFilesAgainstTheMapsDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ca.pem", "pw"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "clusters.yaml")
	const text = `
clusters:
  - name: a
    endpoints: [https://h:1]
    tls: {ca: ca.pem}
    credentials: {user: u, passwordFile: pw}
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := router.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.Clusters()[0]
	if c.TLS.CA != filepath.Join(dir, "ca.pem") || c.Credentials.PasswordFile != filepath.Join(dir, "pw") {
		t.Fatalf("files not resolved against %s: %+v %+v", dir, c.TLS, c.Credentials)
	}

	// Missing files are all reported, with the map's path.
	const missing = `
clusters:
  - name: a
    endpoints: [https://h:1]
    tls: {ca: nope-ca.pem, cert: nope.pem, key: nope-key.pem}
`
	if err := os.WriteFile(path, []byte(missing), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = router.Load(path)
	if err == nil || !errors.Is(err, router.ErrInvalidMap) {
		t.Fatalf("Load = %v, want ErrInvalidMap", err)
	}
	for _, want := range []string{path + ":", "clusters[0].tls.ca", "clusters[0].tls.cert", "clusters[0].tls.key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

func TestRouterServesTheMapsNamespaces(t *testing.T) {
	m, err := router.ParseMap([]byte(fullMap))
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(t, m)
	if got, want := r.Namespaces(), []string{"jobs", "ledger", "payments"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Namespaces = %v, want %v", got, want)
	}
	for ns, want := range map[string]string{"payments": "payments-etcd", "ledger": "payments-etcd", "jobs": "jobs-etcd", "other": "jobs-etcd"} {
		c, err := r.Cluster(ns)
		if err != nil || c.Name != want {
			t.Errorf("Cluster(%q) = %q, %v; want %q", ns, c.Name, err, want)
		}
	}
	if _, err := r.Cluster("no/such"); !errors.Is(err, router.ErrInvalidNamespace) {
		t.Errorf("Cluster of an invalid namespace = %v, want ErrInvalidNamespace", err)
	}
	// What Clusters returns is a copy.
	r.Clusters()[0].Namespaces[0] = "changed"
	if r.Clusters()[0].Namespaces[0] != "payments" {
		t.Error("Clusters returned the Router's own slices")
	}
}

func TestUnservedNamespaceIsAClearError(t *testing.T) {
	m := router.Map{Clusters: []router.Cluster{{Name: "a", Endpoints: []string{"h:1"}, Namespaces: []string{"payments"}}}}
	r := newRouter(t, m)
	_, err := r.Client(t.Context(), "jobs")
	if !errors.Is(err, router.ErrUnserved) {
		t.Fatalf("Client(jobs) = %v, want ErrUnserved", err)
	}
	if want := `namespace "jobs" is listed by none of the clusters ["a"] and the map has no default`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func FuzzParseMap(f *testing.F) {
	f.Add([]byte(fullMap))
	f.Add([]byte("clusters: [{name: a, endpoints: ['h:1'], namespaces: [x]}]"))
	f.Add([]byte("default: a\nclusters: [{name: a, endpoints: ['http://h:1']}]"))
	f.Add([]byte("clusters: [{name: a, endpoints: ['h:1'], namespaces: [x]}, {name: b, endpoints: ['h:2'], namespaces: [x]}]"))
	f.Add([]byte("clusters: [{name: a, endpoints: ['[::1]:2379']}, {name: b, endpoints: ['http://[0::0:1]']}]"))
	f.Add([]byte("clusters: [{name: a, endpoints: ['h:1']}]\n---\nclusters: [{name: b, endpoints: ['h:2']}]"))
	f.Add([]byte("clusters: [{name: a, endpoints: ['h:1'], id: 'cdf818194e3a8c32', revision: 7, namespaces: [x]}]\nretired: [{namespace: y, cluster: b, id: '1', epoch: 2}]"))
	f.Add([]byte("clusters: [{name: a, endpoints: ['h:1']}]\nretired: [{default: true, cluster: z, epoch: 9}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := router.ParseMap(data)
		if err != nil {
			if !errors.Is(err, router.ErrInvalidMap) {
				t.Fatalf("error %v does not wrap ErrInvalidMap", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseMap accepted a map Validate refuses: %v", err)
		}
		// Every namespace is served by exactly one cluster.
		owner := map[string]string{}
		for _, c := range m.Clusters {
			for _, ns := range c.Namespaces {
				if o, dup := owner[ns]; dup {
					t.Fatalf("namespace %q served by %q and %q", ns, o, c.Name)
				}
				owner[ns] = c.Name
			}
		}
		// No address is reachable through two clusters, however spelled.
		addrs := map[string]string{}
		for _, c := range m.Clusters {
			for _, ep := range c.ClientEndpoints() {
				a := endpointAddr(t, ep)
				if o, dup := addrs[a]; dup && o != c.Name {
					t.Fatalf("address %s is in clusters %q and %q", a, o, c.Name)
				}
				addrs[a] = c.Name
			}
		}
		r, err := router.New(m)
		if err != nil {
			t.Fatalf("New refused a parsed map: %v", err)
		}
		defer r.Close()
		for ns, name := range owner {
			if c, err := r.Cluster(ns); err != nil || c.Name != name {
				t.Fatalf("Cluster(%q) = %q, %v; want %q", ns, c.Name, err, name)
			}
		}
		data2, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := router.ParseMap(data2)
		if err != nil {
			t.Fatalf("the encoding of a parsed map is refused: %v\n%s", err, data2)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("encoding changed the map:\n%+v\n%+v", m, m2)
		}
	})
}

func TestParseMapRefusesASecondDocument(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"second map", "clusters: [{name: a, endpoints: ['h:1'], namespaces: [x]}]\n---\nclusters: [{name: b, endpoints: ['h:2'], namespaces: [x]}]\n", "line 2"},
		{"after a leading marker", "---\n# the map\nclusters: [{name: a, endpoints: ['h:1']}]\n\n--- # more\nclusters: []\n", "line 5"},
		{"empty second", "clusters: [{name: a, endpoints: ['h:1']}]\n---\n", "line 2"},
		{"after an end marker", "clusters: [{name: a, endpoints: ['h:1']}]\n...\n---\nx: 1\n", "line 3"},
		// A second document the parser cannot read is still a second
		// document: read alone, the first would be served without it.
		{"broken second", "clusters: [{name: a, endpoints: ['h:1'], namespaces: [x]}]\n---\nclusters: [{name: b\n", "line 2"},
		{"tab in second", "clusters: [{name: a, endpoints: ['h:1']}]\n---\n\tclusters: x\n", "line 2"},
		{"broken after an end marker", "clusters: [{name: a, endpoints: ['h:1']}]\r\n...\r\nclusters: [\r\n", "line 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := router.ParseMap([]byte(tt.in))
			if !errors.Is(err, router.ErrInvalidMap) || !strings.Contains(err.Error(), "second YAML document") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseMap = %v, want ErrInvalidMap naming a second YAML document at %s", err, tt.want)
			}
		})
	}
	// One document with an explicit start, or a comment of dashes, is fine.
	for _, in := range []string{
		"---\nclusters: [{name: a, endpoints: ['h:1']}]\n",
		"clusters: [{name: a, endpoints: ['h:1']}]\n# ---\n",
		"clusters: [{name: a, endpoints: ['h:1']}]\n...\n",
	} {
		if _, err := router.ParseMap([]byte(in)); err != nil {
			t.Errorf("ParseMap(%q) = %v", in, err)
		}
	}
}

func TestAnEndpointInTwoClustersIsFoundWhateverItsSpelling(t *testing.T) {
	for _, pair := range [][2]string{
		{"[::1]:2379", "[0:0:0:0:0:0:0:1]:2379"},
		{"[::1]:2379", "[::0:1]:2379"},
		{"http://[::1]:2379", "https://[0::1]:2379"},
		{"[::ffff:127.0.0.1]:2379", "127.0.0.1:2379"},
		{"LocalHost:2379", "http://localhost:2379"},
		{"etcd.example.com.:2379", "etcd.example.com:2379"},
		{"http://etcd-1", "etcd-1:2379"},
		{"https://[::1]", "[::1]:2379"},
		{"h:02379", "h:2379"},
	} {
		in := "clusters:\n  - {name: a, endpoints: ['" + pair[0] + "']}\n  - {name: b, endpoints: ['" + pair[1] + "']}\n"
		_, err := router.ParseMap([]byte(in))
		if !errors.Is(err, router.ErrInvalidMap) || !strings.Contains(err.Error(), "an endpoint belongs to one cluster") {
			t.Errorf("%s and %s in two clusters: ParseMap = %v", pair[0], pair[1], err)
		}
	}
}

// endpointAddr is the fuzz test's own reading of a dialled endpoint: the
// address it reaches, IPs in canonical form, names in lower case.
func endpointAddr(t *testing.T, ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		ep = u.Host
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		t.Fatalf("dialled endpoint %q has no port: %v", ep, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("dialled endpoint %q: port %q", ep, port)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".") + ":" + strconv.Itoa(p)
}
