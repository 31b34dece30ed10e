package rbac

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/batonhq/baton/internal/keys"
)

// Policy says, per namespace, which etcd users may contend (hold locks,
// campaign), which may also ask a holder to let go (request a release),
// which may only observe, and which may operate (force-unlock and write
// the audit trail). It is the whole of baton's access control: one role
// per namespace and access level.
//
// In YAML (JSON has the same fields):
//
//	namespaces:
//	  - name: payments
//	    contenders: [payments-api, payments-batch]
//	    requesters: [payments-migrate]
//	    observers: [oncall]
//	    operators: [oncall-lead]
type Policy struct {
	Namespaces []Namespace `json:"namespaces"`
}

// Namespace is the access to one namespace, the first segment of every
// key of baton's locks and elections (mutex.WithNamespace,
// election.WithNamespace).
type Namespace struct {
	// Name is the namespace, as keys.ValidateNamespace accepts it.
	Name string `json:"name"`
	// Contenders get readwrite on the namespace's prefix: what Lock,
	// Campaign, Unlock, Resign, and the renewal and revocation of a lease
	// whose keys lie there need.
	Contenders []string `json:"contenders,omitempty"`
	// Requesters can do what contenders can and also ask a holder to let
	// go (mutex.RequestRelease, baton unlock --request): readwrite on the
	// namespace's prefix and on its request records (RequestAuditPrefix),
	// read on the rest of the audit trail. They can neither force-unlock
	// nor write or delete another record of the trail.
	Requesters []string `json:"requesters,omitempty"`
	// Observers get read on the prefix: Leader, Candidates, Observe,
	// Holder, Waiters and listing, but no write of any kind.
	Observers []string `json:"observers,omitempty"`
	// Operators get readwrite on the prefix and on the namespace's audit
	// trail (AuditPrefix): what a force-unlock needs, which deletes a
	// holder's key in the same transaction as it writes the audit record.
	// They can also request a release. Contenders and observers may read
	// the audit trail but neither write nor delete it.
	Operators []string `json:"operators,omitempty"`
}

// MaxUserBytes is the longest user name a policy accepts.
const MaxUserBytes = 128

// Parse reads a policy from YAML or JSON and validates it. Decoding is
// strict, and every problem is reported at once, joined, each wrapping
// ErrInvalidPolicy: an empty document (which, applied with WithPrune,
// would delete every baton role), more than one YAML document, JSON that
// is not strictly JSON (a trailing comma, trailing data), every unknown
// field with its path (a misspelt "contender:" is never silently
// ignored), a duplicate key, a value of the wrong type, and every
// validation problem of Validate.
func Parse(data []byte) (Policy, error) {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, args...)...))
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		bad("the policy is empty; list at least one namespace")
		return Policy{}, errors.Join(problems...)
	case trimmed[0] == '{' || trimmed[0] == '[':
		if err := strictJSON(trimmed); err != nil {
			bad("%v", err)
			return Policy{}, errors.Join(problems...)
		}
	default:
		n, err := yamlDocuments(data)
		if err != nil {
			bad("yaml: %v", err)
			return Policy{}, errors.Join(problems...)
		}
		if n == 0 {
			bad("the policy is empty; list at least one namespace")
			return Policy{}, errors.Join(problems...)
		}
		if n > 1 {
			bad("the file holds %d YAML documents; a policy is exactly one", n)
			return Policy{}, errors.Join(problems...)
		}
	}
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		bad("%v", err)
		return Policy{}, errors.Join(problems...)
	}
	if generic == nil {
		bad("the policy is empty; list at least one namespace")
		return Policy{}, errors.Join(problems...)
	}
	unknown := unknownFields(generic)
	for _, u := range unknown {
		bad("%s", u)
	}
	var p Policy
	decode := yaml.UnmarshalStrict
	if len(unknown) > 0 {
		decode = yaml.Unmarshal // the unknown fields are reported above
	}
	if err := decode(data, &p); err != nil {
		bad("%v", err)
		return Policy{}, errors.Join(problems...)
	}
	if err := p.Validate(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return Policy{}, errors.Join(problems...)
	}
	return p, nil
}

// strictJSON refuses what YAML would accept but JSON does not: a trailing
// comma, comments, single quotes, trailing data.
func strictJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("json: %v at byte %d", err, se.Offset)
		}
		return fmt.Errorf("json: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("json: data after the policy object at byte %d", dec.InputOffset())
	}
	return nil
}

// yamlDocuments counts the YAML documents in data.
func yamlDocuments(data []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// unknownFields lists every field of the decoded document that Policy
// does not have, with its path.
func unknownFields(doc any) []string {
	var out []string
	top, ok := doc.(map[string]any)
	if !ok {
		return nil // a type error, reported by the typed decoding
	}
	for _, k := range sortedKeys(top) {
		if k != "namespaces" {
			out = append(out, fmt.Sprintf("unknown field %q", k))
		}
	}
	list, _ := top["namespaces"].([]any)
	for i, item := range list {
		ns, ok := item.(map[string]any)
		if !ok {
			continue
		}
		for _, k := range sortedKeys(ns) {
			if k != "name" && k != "contenders" && k != "requesters" && k != "observers" && k != "operators" {
				out = append(out, fmt.Sprintf("namespaces[%d]: unknown field %q", i, k))
			}
		}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// LoadFile reads and validates a policy file, YAML or JSON.
func LoadFile(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("rbac: read policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return Policy{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Encode writes p as YAML in the form Parse reads, namespaces and users
// sorted, so that the output of Show can be edited and applied.
func Encode(p Policy) ([]byte, error) {
	return yaml.Marshal(p.normalized())
}

// Validate reports every problem of p at once, joined, each wrapping
// ErrInvalidPolicy: bad or duplicate namespaces, bad user names, a user
// listed twice in one namespace (in one list or in two), and "root", which etcd already lets do
// everything.
func (p Policy) Validate() error {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, args...)...))
	}
	seenNS := make(map[string]bool, len(p.Namespaces))
	for i, ns := range p.Namespaces {
		if err := keys.ValidateNamespace(ns.Name); err != nil {
			bad("namespaces[%d]: %v", i, trimInvalid(err))
			continue
		}
		if seenNS[ns.Name] {
			bad("namespace %q is listed twice", ns.Name)
			continue
		}
		seenNS[ns.Name] = true
		role := make(map[string]string)
		for _, list := range []struct {
			field string
			users []string
		}{{"contenders", ns.Contenders}, {"requesters", ns.Requesters}, {"observers", ns.Observers}, {"operators", ns.Operators}} {
			for j, u := range list.users {
				if err := ValidateUser(u); err != nil {
					bad("namespace %q %s[%d]: %v", ns.Name, list.field, j, trimInvalid(err))
					continue
				}
				if u == rootUser {
					bad("namespace %q %s[%d]: user %q has every permission already and cannot be given a baton role", ns.Name, list.field, j, u)
					continue
				}
				if prev, ok := role[u]; ok {
					if prev == list.field {
						bad("namespace %q: user %q is listed twice in %s", ns.Name, u, list.field)
					} else {
						bad("namespace %q: user %q is in both %s and %s; list it once (operators can also request and contend, requesters can also contend, contenders can also observe)", ns.Name, u, prev, list.field)
					}
					continue
				}
				role[u] = list.field
			}
		}
	}
	return errors.Join(problems...)
}

// trimInvalid drops the sentinel's text from a wrapped validation error so
// that a message does not say "invalid" twice.
func trimInvalid(err error) string {
	s := err.Error()
	for _, prefix := range []string{keys.ErrInvalid.Error() + ": ", ErrInvalid.Error() + ": "} {
		s = strings.TrimPrefix(s, prefix)
	}
	return s
}

// ValidateUser reports whether name can be a user of a policy or the CN of
// a development client certificate: 1 to MaxUserBytes bytes of ASCII
// letters, digits, '.', '_', '@' and '-'. The bound is stricter than
// etcd's so that a name is also a safe file name and reads the same in a
// certificate, a log and a shell.
func ValidateUser(name string) error {
	if name == "" {
		return fmt.Errorf("%w: user name must not be empty", ErrInvalid)
	}
	if len(name) > MaxUserBytes {
		return fmt.Errorf("%w: user name is %d bytes, at most %d allowed", ErrInvalid, len(name), MaxUserBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-'
		if !ok {
			return fmt.Errorf("%w: user name %q may hold only letters, digits, '.', '_', '@' and '-' (byte %d is %q)", ErrInvalid, name, i, c)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: user name %q is reserved", ErrInvalid, name)
	}
	return nil
}

// normalized returns a copy with namespaces and users sorted, and nil
// lists where empty.
func (p Policy) normalized() Policy {
	out := Policy{Namespaces: make([]Namespace, len(p.Namespaces))}
	for i, ns := range p.Namespaces {
		out.Namespaces[i] = Namespace{Name: ns.Name, Contenders: sortedCopy(ns.Contenders), Requesters: sortedCopy(ns.Requesters), Observers: sortedCopy(ns.Observers), Operators: sortedCopy(ns.Operators)}
	}
	slices.SortFunc(out.Namespaces, func(a, b Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func sortedCopy(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
