package rbac

import (
	"reflect"
	"strings"
	"testing"
)

// perms is what Apply grants the role of access level a.
func perms(ns string, a Access) []*Permission {
	var out []*Permission
	for _, p := range RolePermissions(ns, a) {
		out = append(out, &p)
	}
	return out
}

// applied is the roles of namespaces pay and jobs as Apply leaves them.
func applied(extra map[string][]*Permission) map[string][]*Permission {
	out := map[string][]*Permission{}
	for _, ns := range []string{"pay"} {
		for _, a := range []Access{ReadWrite, Read, Operate, Request} {
			out[RoleName(ns, a)] = perms(ns, a)
		}
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// withRequesters is p with users as the requesters of its first namespace.
func withRequesters(p Policy, users ...string) Policy {
	ns := p.Namespaces[0]
	ns.Requesters = users
	return Policy{Namespaces: append([]Namespace{ns}, p.Namespaces[1:]...)}
}

func TestPlan(t *testing.T) {
	rw, r, rq := RoleName("pay", ReadWrite), RoleName("pay", Read), RoleName("pay", Request)
	pol := Policy{Namespaces: []Namespace{{Name: "pay", Contenders: []string{"api"}, Observers: []string{"ops"}}}}
	for _, tc := range []struct {
		name  string
		st    state
		pol   Policy
		prune bool
		want  []string
	}{
		{
			name: "empty cluster",
			st:   state{},
			pol:  pol,
			want: []string{
				"add-role baton:pay:readwrite",
				`grant-permission readwrite ["/pay/v1/", "/pay/v10") on role baton:pay:readwrite`,
				`grant-permission read ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:readwrite`,
				"add-user api",
				"grant-role baton:pay:readwrite to user api",
				"add-role baton:pay:read",
				`grant-permission read ["/pay/v1/", "/pay/v10") on role baton:pay:read`,
				`grant-permission read ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:read`,
				"add-user ops",
				"grant-role baton:pay:read to user ops",
				"add-role baton:pay:operate",
				`grant-permission readwrite ["/pay/v1/", "/pay/v10") on role baton:pay:operate`,
				`grant-permission readwrite ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:operate`,
				"add-role baton:pay:request",
				`grant-permission readwrite ["/pay/v1/", "/pay/v10") on role baton:pay:request`,
				`grant-permission read ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:request`,
				`grant-permission readwrite ["/pay/audit/v1/request/", "/pay/audit/v1/request0") on role baton:pay:request`,
			},
		},
		{
			name: "already applied",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol:  pol,
			want: nil,
		},
		{
			name: "user removed from the policy loses the role, keeps the account",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}, "old": {rw, "other"}},
			},
			pol:  pol,
			want: []string{"revoke-role baton:pay:readwrite from user old"},
		},
		{
			name: "permissions edited by hand are put back",
			st: state{
				roles: applied(map[string][]*Permission{
					rw: {perms("pay", Read)[0], perms("pay", Read)[1], {Key: "/", RangeEnd: "\x00", Access: ReadWrite}},
				}),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol: pol,
			want: []string{
				`revoke-permission readwrite ["/", "\x00") on role baton:pay:readwrite`,
				`grant-permission readwrite ["/pay/v1/", "/pay/v10") on role baton:pay:readwrite`,
			},
		},
		{
			name: "unlisted namespace left alone",
			st: state{
				roles: applied(map[string][]*Permission{RoleName("jobs", ReadWrite): perms("jobs", ReadWrite), "custom": nil}),
				users: map[string][]string{"api": {rw}, "ops": {r}, "sched": {RoleName("jobs", ReadWrite), "custom"}},
			},
			pol:  pol,
			want: nil,
		},
		{
			name: "prune removes unlisted namespaces only",
			st: state{
				roles: applied(map[string][]*Permission{RoleName("jobs", ReadWrite): perms("jobs", ReadWrite), "custom": nil, "baton:bad": nil}),
				users: map[string][]string{"api": {rw}, "ops": {r}, "sched": {RoleName("jobs", ReadWrite), "custom"}},
			},
			pol:   pol,
			prune: true,
			want: []string{
				"revoke-role baton:jobs:readwrite from user sched",
				"delete-role baton:jobs:readwrite",
			},
		},
		{
			name: "user in two namespaces is added once",
			st:   state{},
			pol:  Policy{Namespaces: []Namespace{{Name: "b", Observers: []string{"u"}}, {Name: "a", Contenders: []string{"u"}}}},
			want: []string{
				"add-role baton:a:readwrite",
				`grant-permission readwrite ["/a/v1/", "/a/v10") on role baton:a:readwrite`,
				`grant-permission read ["/a/audit/v1/", "/a/audit/v10") on role baton:a:readwrite`,
				"add-user u",
				"grant-role baton:a:readwrite to user u",
				"add-role baton:a:read",
				`grant-permission read ["/a/v1/", "/a/v10") on role baton:a:read`,
				`grant-permission read ["/a/audit/v1/", "/a/audit/v10") on role baton:a:read`,
				"add-role baton:a:operate",
				`grant-permission readwrite ["/a/v1/", "/a/v10") on role baton:a:operate`,
				`grant-permission readwrite ["/a/audit/v1/", "/a/audit/v10") on role baton:a:operate`,
				"add-role baton:a:request",
				`grant-permission readwrite ["/a/v1/", "/a/v10") on role baton:a:request`,
				`grant-permission read ["/a/audit/v1/", "/a/audit/v10") on role baton:a:request`,
				`grant-permission readwrite ["/a/audit/v1/request/", "/a/audit/v1/request0") on role baton:a:request`,
				"add-role baton:b:readwrite",
				`grant-permission readwrite ["/b/v1/", "/b/v10") on role baton:b:readwrite`,
				`grant-permission read ["/b/audit/v1/", "/b/audit/v10") on role baton:b:readwrite`,
				"add-role baton:b:read",
				`grant-permission read ["/b/v1/", "/b/v10") on role baton:b:read`,
				`grant-permission read ["/b/audit/v1/", "/b/audit/v10") on role baton:b:read`,
				"grant-role baton:b:read to user u",
				"add-role baton:b:operate",
				`grant-permission readwrite ["/b/v1/", "/b/v10") on role baton:b:operate`,
				`grant-permission readwrite ["/b/audit/v1/", "/b/audit/v10") on role baton:b:operate`,
				"add-role baton:b:request",
				`grant-permission readwrite ["/b/v1/", "/b/v10") on role baton:b:request`,
				`grant-permission read ["/b/audit/v1/", "/b/audit/v10") on role baton:b:request`,
				`grant-permission readwrite ["/b/audit/v1/request/", "/b/audit/v1/request0") on role baton:b:request`,
			},
		},
		{
			name: "requester listed: the request role granted, nothing else",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}, "job": nil},
			},
			pol:  withRequesters(pol, "job"),
			want: []string{"grant-role baton:pay:request to user job"},
		},
		{
			name: "new requester is added as a user",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol:  withRequesters(pol, "job"),
			want: []string{"add-user job", "grant-role baton:pay:request to user job"},
		},
		{
			name: "contender made a requester moves from one role to the other",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol: Policy{Namespaces: []Namespace{{Name: "pay", Requesters: []string{"api"}, Observers: []string{"ops"}}}},
			want: []string{
				"revoke-role baton:pay:readwrite from user api",
				"grant-role baton:pay:request to user api",
			},
		},
		{
			name: "requester removed from the policy loses the role",
			st: state{
				roles: applied(nil),
				users: map[string][]string{"api": {rw}, "ops": {r}, "job": {rq}},
			},
			pol:  pol,
			want: []string{"revoke-role baton:pay:request from user job"},
		},
		{
			name: "namespace applied before the request role existed gains it",
			st: state{
				roles: func() map[string][]*Permission {
					m := applied(nil)
					delete(m, rq)
					return m
				}(),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol: pol,
			want: []string{
				"add-role baton:pay:request",
				`grant-permission readwrite ["/pay/v1/", "/pay/v10") on role baton:pay:request`,
				`grant-permission read ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:request`,
				`grant-permission readwrite ["/pay/audit/v1/request/", "/pay/audit/v1/request0") on role baton:pay:request`,
			},
		},
		{
			name: "request role widened to the whole audit trail is put back",
			st: state{
				roles: applied(map[string][]*Permission{rq: {
					perms("pay", Request)[0],
					{Key: "/pay/audit/v1/", RangeEnd: "/pay/audit/v10", Access: ReadWrite},
					perms("pay", Request)[2],
				}}),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol:  pol,
			want: []string{`grant-permission read ["/pay/audit/v1/", "/pay/audit/v10") on role baton:pay:request`},
		},
		{
			name: "request role without its request records range gets it",
			st: state{
				roles: applied(map[string][]*Permission{rq: {perms("pay", Request)[0], perms("pay", Request)[1]}}),
				users: map[string][]string{"api": {rw}, "ops": {r}},
			},
			pol:  pol,
			want: []string{`grant-permission readwrite ["/pay/audit/v1/request/", "/pay/audit/v1/request0") on role baton:pay:request`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range plan(tc.st, tc.pol, tc.prune) {
				got = append(got, c.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		role   string
		ns     string
		access Access
		ok     bool
	}{
		{"baton:payments:readwrite", "payments", ReadWrite, true},
		{"baton:a.b_c-d:read", "a.b_c-d", Read, true},
		{"baton:payments:operate", "payments", Operate, true},
		{"baton:payments:request", "payments", Request, true},
		{"baton:payments:requests", "", "", false},
		{"baton:payments:Request", "", "", false},
		{"baton:payments:write", "", "", false},
		{"baton:payments", "", "", false},
		{"baton::read", "", "", false},
		{"root", "", "", false},
		{"payments:read", "", "", false},
	} {
		ns, a, ok := parseRole(tc.role)
		if ns != tc.ns || a != tc.access || ok != tc.ok {
			t.Errorf("parseRole(%q) = %q, %q, %v", tc.role, ns, a, ok)
		}
		if tc.ok && RoleName(ns, a) != tc.role {
			t.Errorf("RoleName does not invert parseRole for %q", tc.role)
		}
	}
}
