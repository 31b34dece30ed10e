package rbac

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// KeyType is the kind of private key the development CA makes.
type KeyType string

// The key types of the development CA.
const (
	ECDSAP256 KeyType = "ecdsa-p256"
	Ed25519   KeyType = "ed25519"
)

// Bounds of CertOptions.Validity.
const (
	DefaultValidity = 365 * 24 * time.Hour
	MaxValidity     = 10 * 365 * 24 * time.Hour
)

// clockSkew is how far before now a certificate starts by default, so that
// a peer whose clock is a little behind accepts it.
const clockSkew = 5 * time.Minute

// File names in a development CA's directory. A user's certificate is
// client-<user>.crt and its key client-<user>.key (ClientFiles).
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// CertOptions sets how a certificate is made. The zero value is an ECDSA
// P-256 key and a certificate valid from five minutes ago for
// DefaultValidity.
type CertOptions struct {
	// KeyType is ECDSAP256 (default) or Ed25519.
	KeyType KeyType
	// Validity is how long the certificate is valid: more than zero, at
	// most MaxValidity; default DefaultValidity. A leaf never outlives its
	// CA: its end is cut to the CA's.
	Validity time.Duration
	// NotBefore is when validity starts; default five minutes ago.
	NotBefore time.Time
}

func (o CertOptions) withDefaults() (CertOptions, error) {
	switch o.KeyType {
	case "":
		o.KeyType = ECDSAP256
	case ECDSAP256, Ed25519:
	default:
		return o, fmt.Errorf("%w: CertOptions.KeyType %q, want %q or %q", ErrInvalid, o.KeyType, ECDSAP256, Ed25519)
	}
	switch {
	case o.Validity == 0:
		o.Validity = DefaultValidity
	case o.Validity < 0 || o.Validity > MaxValidity:
		return o, fmt.Errorf("%w: CertOptions.Validity %v must be more than 0 and at most %v", ErrInvalid, o.Validity, MaxValidity)
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-clockSkew)
	}
	return o, nil
}

// DevCA is a certificate authority for development and tests, kept as
// files in one directory: not for production, where certificates come
// from the organisation's PKI. Its keys are written with mode 0600 and its
// directory with 0700.
type DevCA struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
}

// OpenDevCA loads the CA in dir, or creates dir and a new CA in it when
// dir has none; opts apply only to a new CA. A dir that holds only one of
// the CA's two files is an error, so that a CA is never silently
// replaced.
func OpenDevCA(dir string, opts CertOptions) (*DevCA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certOK, keyOK := exists(certPath), exists(keyPath)
	if certOK && keyOK {
		return loadCA(dir)
	}
	if certOK || keyOK {
		return nil, fmt.Errorf("%w: %s has only one of %s and %s", ErrCertificate, dir, CACertFile, CAKeyFile)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("rbac: create CA directory: %w", err)
	}
	key, err := newKey(opts.KeyType)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "baton development CA", Organization: []string{"baton development"}},
		NotBefore:             opts.NotBefore,
		NotAfter:              opts.NotBefore.Add(opts.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("rbac: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("rbac: parse CA certificate: %w", err)
	}
	// The key first: a certificate without its key is the state
	// OpenDevCA refuses.
	if err := writeKey(keyPath, key); err != nil {
		return nil, err
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, err
	}
	return &DevCA{dir: dir, cert: cert, key: key}, nil
}

func loadCA(dir string) (*DevCA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	pair, err := loadPair(certPath, keyPath, time.Now())
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCertificate, certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrCertificate, certPath)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a signing key", ErrCertificate, keyPath)
	}
	return &DevCA{dir: dir, cert: cert, key: key}, nil
}

// Dir is the CA's directory.
func (ca *DevCA) Dir() string { return ca.dir }

// CertFile is the path of the CA's certificate, the --cacert of clients
// and the --trusted-ca-file of servers.
func (ca *DevCA) CertFile() string { return filepath.Join(ca.dir, CACertFile) }

// ServerFiles are the server's files in a CA directory.
func ServerFiles(dir string) TLSFiles {
	return TLSFiles{CA: filepath.Join(dir, CACertFile), Cert: filepath.Join(dir, ServerCertFile), Key: filepath.Join(dir, ServerKeyFile)}
}

// ClientFiles are user's files in a CA directory.
func ClientFiles(dir, user string) TLSFiles {
	return TLSFiles{
		CA:   filepath.Join(dir, CACertFile),
		Cert: filepath.Join(dir, "client-"+user+".crt"),
		Key:  filepath.Join(dir, "client-"+user+".key"),
	}
}

// IssueServer writes (or replaces) the server certificate and key, valid
// for the given DNS names and IP addresses (at least one), usable for
// both server and client authentication as etcd members need.
func (ca *DevCA) IssueServer(hosts []string, opts CertOptions) (TLSFiles, error) {
	if err := ValidateHosts(hosts); err != nil {
		return TLSFiles{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "baton development server", Organization: []string{"baton development"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	files := ServerFiles(ca.dir)
	return files, ca.issue(tmpl, files, opts)
}

// IssueClient writes (or replaces) the client certificate and key of an
// etcd user: the CN is the user name, which etcd takes as the user when
// it runs with --client-cert-auth and the client sends no password.
func (ca *DevCA) IssueClient(user string, opts CertOptions) (TLSFiles, error) {
	if err := ValidateUser(user); err != nil {
		return TLSFiles{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: []string{"baton development"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	files := ClientFiles(ca.dir, user)
	return files, ca.issue(tmpl, files, opts)
}

func (ca *DevCA) issue(tmpl *x509.Certificate, files TLSFiles, opts CertOptions) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	key, err := newKey(opts.KeyType)
	if err != nil {
		return err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return err
	}
	tmpl.NotBefore = opts.NotBefore
	tmpl.NotAfter = opts.NotBefore.Add(opts.Validity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("rbac: create certificate %s: %w", files.Cert, err)
	}
	if err := writeKey(files.Key, key); err != nil {
		return err
	}
	return writeCert(files.Cert, der)
}

// ValidateHosts checks the hosts of a server certificate as IssueServer
// does, without writing anything: at least one, each an IP address or a
// DNS name (a leading "*." allowed). Every bad host is reported, joined,
// each wrapping ErrInvalid.
func ValidateHosts(hosts []string) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%w: hosts must name at least one DNS name or IP address", ErrInvalid)
	}
	var bad []error
	for _, h := range hosts {
		if net.ParseIP(h) != nil {
			continue
		}
		if err := validateDNSName(h); err != nil {
			bad = append(bad, err)
		}
	}
	return errors.Join(bad...)
}

// Validate checks the options as a certificate's issue does, so that a
// caller can refuse bad ones before writing anything. Errors wrap
// ErrInvalid and name the field and its bound.
func (o CertOptions) Validate() error {
	_, err := o.withDefaults()
	return err
}

func validateDNSName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("%w: host %q must be an IP address or a DNS name of 1 to 253 bytes", ErrInvalid, h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '*' && i == 0
		if !ok {
			return fmt.Errorf("%w: host %q is neither an IP address nor a DNS name (byte %d is %q)", ErrInvalid, h, i, c)
		}
	}
	if strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..") {
		return fmt.Errorf("%w: host %q has an empty DNS label", ErrInvalid, h)
	}
	return nil
}

func newKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("rbac: generate key: %w", err)
		}
		return k, nil
	default:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("rbac: generate key: %w", err)
		}
		return k, nil
	}
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("rbac: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("rbac: encode key: %w", err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func writeCert(path string, der []byte) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFile replaces path atomically with data and mode: a temp file in
// the same directory, created 0600 so a key is never readable by others,
// even for a moment, then renamed.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("rbac: write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("rbac: write %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
