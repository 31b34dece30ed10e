package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// decoder builds a Map from the generic tree of a YAML document, noting
// every problem instead of stopping at the first, and which paths were bad
// so that validation does not report them twice.
type decoder struct {
	problems []error
	bad      map[string]bool
}

func (d *decoder) fail(path, format string, args ...any) {
	d.bad[path] = true
	d.problems = append(d.problems, fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidMap, path}, args...)...))
}

// object checks that v is a mapping with only the given fields.
func (d *decoder) object(path string, v any, fields ...string) (map[string]any, bool) {
	o, ok := v.(map[string]any)
	if !ok {
		d.fail(path, "want a mapping, got %s", kind(v))
		return nil, false
	}
	var unknown []string
	for k := range o {
		if !slices.Contains(fields, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		d.fail(join(path, k), "unknown field (known: %v)", fields)
	}
	return o, true
}

func (d *decoder) str(path string, v any) string {
	s, ok := v.(string)
	if !ok {
		d.fail(path, "want a string, got %s", kind(v))
	}
	return s
}

func (d *decoder) strs(path string, v any) []string {
	l, ok := v.([]any)
	if !ok {
		d.fail(path, "want a list of strings, got %s", kind(v))
		return nil
	}
	var out []string // nil when empty, as Encode leaves it out
	for i, e := range l {
		p := fmt.Sprintf("%s[%d]", path, i)
		if s, ok := e.(string); ok {
			out = append(out, s)
		} else {
			d.fail(p, "want a string, got %s", kind(e))
		}
	}
	return out
}

func (d *decoder) top(v any) Map {
	var m Map
	if v == nil {
		d.fail("clusters", "the map is empty")
		return m
	}
	o, ok := d.object("(top)", v, "default", "clusters", "retired")
	if !ok {
		d.bad["clusters"] = true
		return m
	}
	field(o, "(top)", "default", d.str, &m.Default)
	if v, ok := o["retired"]; ok {
		if l, ok := v.([]any); ok {
			for i, e := range l {
				m.Retired = append(m.Retired, d.retired(fmt.Sprintf("retired[%d]", i), e))
			}
		} else {
			d.fail("retired", "want a list, got %s", kind(v))
		}
	}
	cs, ok := o["clusters"]
	if !ok {
		return m
	}
	l, ok := cs.([]any)
	if !ok {
		d.fail("clusters", "want a list of clusters, got %s", kind(cs))
		return m
	}
	for i, c := range l {
		m.Clusters = append(m.Clusters, d.cluster(fmt.Sprintf("clusters[%d]", i), c))
	}
	return m
}

func (d *decoder) cluster(path string, v any) Cluster {
	var c Cluster
	o, ok := d.object(path, v, "name", "endpoints", "tls", "credentials", "epoch", "namespaces", "id", "revision")
	if !ok {
		for _, f := range []string{"name", "endpoints"} {
			d.bad[join(path, f)] = true
		}
		return c
	}
	field(o, path, "name", d.str, &c.Name)
	field(o, path, "endpoints", d.strs, &c.Endpoints)
	field(o, path, "namespaces", d.strs, &c.Namespaces)
	field(o, path, "epoch", d.epoch, &c.Epoch)
	field(o, path, "id", d.str, &c.ID)
	field(o, path, "revision", d.revision, &c.Revision)
	if v, ok := o["tls"]; ok {
		p := join(path, "tls")
		if t, ok := d.object(p, v, "ca", "cert", "key"); ok {
			f := &TLSFiles{}
			d.fields(p, t, []string{"ca", "cert", "key"}, []*string{&f.CA, &f.Cert, &f.Key})
			c.TLS = f
		}
	}
	if v, ok := o["credentials"]; ok {
		p := join(path, "credentials")
		if t, ok := d.object(p, v, "user", "passwordEnv", "passwordFile"); ok {
			cr := &Credentials{}
			d.fields(p, t, []string{"user", "passwordEnv", "passwordFile"}, []*string{&cr.User, &cr.PasswordEnv, &cr.PasswordFile})
			c.Credentials = cr
		}
	}
	return c
}

func (d *decoder) retired(path string, v any) Retired {
	var r Retired
	o, ok := d.object(path, v, "namespace", "default", "cluster", "id", "epoch")
	if !ok {
		return r
	}
	d.fields(path, o, []string{"namespace", "cluster", "id"}, []*string{&r.Namespace, &r.Cluster, &r.ID})
	if v, ok := o["default"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			d.fail(join(path, "default"), "want true or false, got %s", kind(v))
		}
		r.Default = b
	}
	field(o, path, "epoch", d.epoch, &r.Epoch)
	return r
}

func (d *decoder) revision(path string, v any) int64 {
	n, ok := v.(json.Number)
	var i int64
	var err error
	if ok {
		i, err = n.Int64()
	}
	if !ok || err != nil || i < 0 {
		d.fail(path, "want a revision, an integer from 0, got %v", v)
		return 0
	}
	return i
}

// fields reads string fields of o, in order, into dst.
func (d *decoder) fields(path string, o map[string]any, names []string, dst []*string) {
	for i, k := range names {
		field(o, path, k, d.str, dst[i])
	}
}

// field decodes o's field name at path, if o has it, into *dst.
func field[T any](o map[string]any, path, name string, decode func(path string, v any) T, dst *T) {
	if v, ok := o[name]; ok {
		*dst = decode(join(path, name), v)
	}
}

func (d *decoder) epoch(path string, v any) uint16 {
	n, ok := v.(json.Number)
	if !ok {
		d.fail(path, "want an integer from 0 to %d, got %s", MaxEpoch, kind(v))
		return 0
	}
	i, err := n.Int64()
	if err != nil || i < 0 || i > MaxEpoch {
		d.fail(path, "want an integer from 0 to %d, got %s", MaxEpoch, n)
		return 0
	}
	return uint16(i)
}

func join(path, field string) string {
	if path == "(top)" {
		return field
	}
	return path + "." + field
}

func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}
