package rbac

import "errors"

var (
	// ErrInvalidPolicy is wrapped by every error of Parse, LoadFile and
	// Policy.Validate, and by Apply's refusal to prune with a policy that
	// lists no namespace: an empty file, more than one YAML document,
	// malformed YAML or JSON (a trailing comma too), an unknown or duplicate
	// field, a bad namespace or user name, a namespace listed twice, or a
	// user listed twice in one namespace (as contender and observer, or
	// twice in one list). The message names the namespace and the user.
	ErrInvalidPolicy = errors.New("rbac: invalid policy")

	// ErrInvalid is wrapped by errors for bad arguments outside a policy:
	// a bad user name, host or validity for the development CA, a missing
	// file name in TLSFiles, an unknown KeyType. The message names the
	// field and the bound.
	ErrInvalid = errors.New("rbac: invalid argument")

	// ErrCertificate is wrapped by the errors of TLSFiles' methods and of
	// OpenDevCA when a file holds no usable certificate or key, a key does
	// not match its certificate, or a certificate is expired or not yet
	// valid. The message names the file.
	ErrCertificate = errors.New("rbac: bad certificate")

	// ErrTLSRefused is wrapped by ProbeTLS when the TLS session is refused
	// by either side; the message says which side and why (no client
	// certificate, a certificate of another CA, an expired certificate, a
	// server certificate for another host).
	ErrTLSRefused = errors.New("rbac: TLS refused")
)
