package rbac_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/batonhq/baton/rbac"
)

func TestParseAcceptsYAMLAndJSON(t *testing.T) {
	want := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "payments", Contenders: []string{"payments-api", "payments-batch"}, Observers: []string{"oncall"}},
		{Name: "jobs", Contenders: []string{"scheduler"}, Requesters: []string{"migrate", "reindex"}},
	}}
	for name, doc := range map[string]string{
		"yaml": `
namespaces:
  - name: payments
    contenders: [payments-api, payments-batch]
    observers:
      - oncall
  - name: jobs
    contenders: [scheduler]
    requesters: [migrate, reindex]
`,
		"json": `{"namespaces": [
  {"name": "payments", "contenders": ["payments-api", "payments-batch"], "observers": ["oncall"]},
  {"name": "jobs", "contenders": ["scheduler"], "requesters": ["migrate", "reindex"]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := rbac.Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseRejectsBadPolicies(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		// wants are substrings the message must hold, so that it points at
		// the mistake.
		wants []string
	}{
		{"unknown top-level field", "namespace:\n  - name: a\n", []string{`unknown field "namespace"`}},
		{"misspelt list", "namespaces:\n  - name: a\n    contender: [x]\n", []string{`unknown field "contender"`}},
		{"duplicate key", "namespaces:\n  - name: a\n    name: b\n", []string{`"name" already set`}},
		{"wrong type", "namespaces:\n  - name: a\n    contenders: x\n", []string{"contenders"}},
		{"not yaml", "namespaces: [\n", []string{"yaml"}},
		{"json unknown field", `{"namespaces": [{"name": "a", "readers": ["x"]}]}`, []string{`unknown field "readers"`}},
		{"empty namespace", "namespaces:\n  - contenders: [x]\n", []string{"namespaces[0]", "namespace must not be empty"}},
		{"bad namespace", "namespaces:\n  - name: a/b\n", []string{"namespaces[0]", `"a/b"`}},
		{"namespace twice", "namespaces:\n  - name: a\n  - name: a\n", []string{`namespace "a" is listed twice`}},
		{"bad user", "namespaces:\n  - name: a\n    observers: [\"bob smith\"]\n", []string{`namespace "a" observers[0]`, `"bob smith"`}},
		{"empty user", "namespaces:\n  - name: a\n    contenders: [\"\"]\n", []string{`contenders[0]`, "must not be empty"}},
		{"long user", "namespaces:\n  - name: a\n    contenders: [" + strings.Repeat("u", rbac.MaxUserBytes+1) + "]\n", []string{"129 bytes, at most 128"}},
		{"root", "namespaces:\n  - name: a\n    contenders: [root]\n", []string{`user "root" has every permission`}},
		{"contender and observer", "namespaces:\n  - name: a\n    contenders: [x]\n    observers: [x]\n", []string{`user "x" is in both contenders and observers`}},
		{"listed twice", "namespaces:\n  - name: a\n    observers: [x, x]\n", []string{`user "x" is listed twice in observers`}},
		{"contender and operator", "namespaces:\n  - name: a\n    contenders: [x]\n    operators: [x]\n", []string{`user "x" is in both contenders and operators`}},
		{"bad operator", "namespaces:\n  - name: a\n    operators: [\"a b\"]\n", []string{`namespace "a" operators[0]`}},
		{"misspelt requesters", "namespaces:\n  - name: a\n    requester: [x]\n", []string{`namespaces[0]: unknown field "requester"`}},
		{"requesters not a list", "namespaces:\n  - name: a\n    requesters: x\n", []string{"requesters"}},
		{"bad requester", "namespaces:\n  - name: a\n    requesters: [ok, \"a;b\"]\n", []string{`namespace "a" requesters[1]`, `"a;b"`}},
		{"empty requester", "namespaces:\n  - name: a\n    requesters: [\"\"]\n", []string{`requesters[0]`, "must not be empty"}},
		{"root requester", "namespaces:\n  - name: a\n    requesters: [root]\n", []string{`requesters[0]: user "root" has every permission`}},
		{"requester listed twice", "namespaces:\n  - name: a\n    requesters: [x, x]\n", []string{`user "x" is listed twice in requesters`}},
		{"contender and requester", "namespaces:\n  - name: a\n    contenders: [x]\n    requesters: [x]\n", []string{`user "x" is in both contenders and requesters`, "requesters can also contend"}},
		{"requester and observer", "namespaces:\n  - name: a\n    requesters: [x]\n    observers: [x]\n", []string{`user "x" is in both requesters and observers`}},
		{"requester and operator", "namespaces:\n  - name: a\n    requesters: [x]\n    operators: [x]\n", []string{`user "x" is in both requesters and operators`, "operators can also request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rbac.Parse([]byte(tc.doc))
			if !errors.Is(err, rbac.ErrInvalidPolicy) {
				t.Fatalf("err = %v, want one wrapping ErrInvalidPolicy", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	p := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "", Contenders: []string{"a"}},
		{Name: "ok", Contenders: []string{"b c", "d"}, Observers: []string{"d"}},
	}}
	err := p.Validate()
	if !errors.Is(err, rbac.ErrInvalidPolicy) {
		t.Fatalf("err = %v", err)
	}
	if n := len(strings.Split(err.Error(), "\n")); n != 3 {
		t.Fatalf("want 3 problems, one per line, got %d: %v", n, err)
	}
}

func TestUserInTwoNamespacesIsAllowed(t *testing.T) {
	p := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "a", Contenders: []string{"u"}},
		{Name: "b", Observers: []string{"u"}},
		{Name: "c", Requesters: []string{"u"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeRoundTrips(t *testing.T) {
	p := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "z", Contenders: []string{"b", "a"}, Requesters: []string{"r2", "r1"}},
		{Name: "a", Observers: []string{"x"}},
	}}
	data, err := rbac.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rbac.Parse(data)
	if err != nil {
		t.Fatalf("Parse(Encode(p)): %v\n%s", err, data)
	}
	want := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "a", Observers: []string{"x"}},
		{Name: "z", Contenders: []string{"a", "b"}, Requesters: []string{"r1", "r2"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v (sorted)", got, want)
	}
}

func TestLoadFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("namespaces:\n  - name: a\n    contendrs: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := rbac.LoadFile(path)
	if !errors.Is(err, rbac.ErrInvalidPolicy) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrInvalidPolicy naming %s", err, path)
	}
	if _, err := rbac.LoadFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestValidateUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"payments-api", true},
		{"svc.payments_v2@prod", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
		{strings.Repeat("x", rbac.MaxUserBytes), true},
		{strings.Repeat("x", rbac.MaxUserBytes+1), false},
	} {
		err := rbac.ValidateUser(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateUser(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, rbac.ErrInvalid) {
			t.Errorf("ValidateUser(%q) = %v, want ErrInvalid", tc.name, err)
		}
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts is
// valid, and that Encode of it parses back to the same policy.
func FuzzParse(f *testing.F) {
	f.Add([]byte("namespaces:\n  - name: a\n    contenders: [x]\n    observers: [y]\n"))
	f.Add([]byte("namespaces:\n  - name: a\n    requesters: [r]\n    operators: [o]\n"))
	f.Add([]byte(`{"namespaces":[{"name":"jobs","contenders":["s"]}]}`))
	f.Add([]byte("namespaces: []\n"))
	f.Add([]byte("namespaces:\n  - name: a\n    name: a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := rbac.Parse(data)
		if err != nil {
			if !errors.Is(err, rbac.ErrInvalidPolicy) {
				t.Fatalf("error does not wrap ErrInvalidPolicy: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid policy: %v", err)
		}
		out, err := rbac.Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := rbac.Parse(out)
		if err != nil {
			t.Fatalf("Parse(Encode(p)) = %v\n%s", err, out)
		}
		again, _ := rbac.Encode(q)
		if string(again) != string(out) {
			t.Fatalf("Encode not stable:\n%s\n---\n%s", out, again)
		}
	})
}

func TestParseRefusesWhatWouldBeSilentlyMisread(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		wants     []string
	}{
		{"zero bytes", "", []string{"the policy is empty"}},
		{"only a comment", "# to do\n", []string{"the policy is empty"}},
		{"second yaml document", "namespaces:\n  - name: a\n---\nnamespaces:\n  - name: b\n", []string{"2 YAML documents"}},
		{"json trailing comma", `{"namespaces": [{"name": "a", "contenders": ["x"]},]}`, []string{"json:", "invalid character ']'"}},
		{"json trailing data", `{"namespaces": [{"name": "a"}]} {}`, []string{"json: data after the policy object"}},
		{"every unknown field and problem at once",
			"namespace: x\nnamespaces:\n  - name: a\n    contender: [x]\n  - name: b/c\n    reader: [y]\n",
			[]string{`unknown field "namespace"`, `namespaces[0]: unknown field "contender"`, `namespaces[1]: unknown field "reader"`, `namespaces[1]: namespace "b/c"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rbac.Parse([]byte(tc.doc))
			if !errors.Is(err, rbac.ErrInvalidPolicy) {
				t.Fatalf("err = %v, want one wrapping ErrInvalidPolicy", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
