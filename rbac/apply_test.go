package rbac_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rbac"
)

func changeStrings(cs []rbac.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// userRoles reads a user's roles straight from etcd.
func userRoles(t *testing.T, cli *clientv3.Client, user string) []string {
	t.Helper()
	resp, err := cli.UserGet(testCtx(t), user)
	if err != nil {
		t.Fatalf("UserGet %s: %v", user, err)
	}
	return resp.Roles
}

func rolePerms(t *testing.T, cli *clientv3.Client, role string) []rbac.Permission {
	t.Helper()
	resp, err := cli.RoleGet(testCtx(t), role)
	if err != nil {
		t.Fatalf("RoleGet %s: %v", role, err)
	}
	var out []rbac.Permission
	for _, p := range resp.Perm {
		a := rbac.ReadWrite
		switch p.PermType {
		case clientv3.PermRead:
			a = rbac.Read
		case clientv3.PermWrite:
			a = rbac.Write
		}
		out = append(out, rbac.Permission{Key: string(p.Key), RangeEnd: string(p.RangeEnd), Access: a})
	}
	return out
}

func TestApplyCreatesRolesUsersAndGrantsOnce(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	p := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap1", Contenders: []string{"ap1-api"}, Observers: []string{"ap1-ops"}, Requesters: []string{"ap1-job"}}}}

	changes, err := rbac.Apply(ctx, cli, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 19 {
		t.Fatalf("first Apply made %d changes, want 19:\n%s", len(changes), strings.Join(changeStrings(changes), "\n"))
	}
	if got := userRoles(t, cli, "ap1-job"); !reflect.DeepEqual(got, []string{"baton:ap1:request"}) {
		t.Fatalf("requester roles %v", got)
	}
	if got := userRoles(t, cli, "ap1-api"); !reflect.DeepEqual(got, []string{"baton:ap1:readwrite"}) {
		t.Fatalf("contender roles %v", got)
	}
	if got := userRoles(t, cli, "ap1-ops"); !reflect.DeepEqual(got, []string{"baton:ap1:read"}) {
		t.Fatalf("observer roles %v", got)
	}
	audit := func(a rbac.Access) rbac.Permission {
		return rbac.Permission{Key: "/ap1/audit/v1/", RangeEnd: "/ap1/audit/v10", Access: a}
	}
	if got, want := rolePerms(t, cli, "baton:ap1:readwrite"), []rbac.Permission{audit(rbac.Read), {Key: "/ap1/v1/", RangeEnd: "/ap1/v10", Access: rbac.ReadWrite}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("readwrite role perms %v, want %v", got, want)
	}
	if got, want := rolePerms(t, cli, "baton:ap1:read"), []rbac.Permission{audit(rbac.Read), {Key: "/ap1/v1/", RangeEnd: "/ap1/v10", Access: rbac.Read}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("read role perms %v, want %v", got, want)
	}
	if got, want := rolePerms(t, cli, "baton:ap1:operate"), []rbac.Permission{audit(rbac.ReadWrite), {Key: "/ap1/v1/", RangeEnd: "/ap1/v10", Access: rbac.ReadWrite}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("operate role perms %v, want %v", got, want)
	}
	// etcd lists a role's permissions sorted by key; the request records'
	// range lies inside the audit trail's and keeps its own access.
	if got, want := rolePerms(t, cli, "baton:ap1:request"), []rbac.Permission{audit(rbac.Read),
		{Key: "/ap1/audit/v1/request/", RangeEnd: "/ap1/audit/v1/request0", Access: rbac.ReadWrite},
		{Key: "/ap1/v1/", RangeEnd: "/ap1/v10", Access: rbac.ReadWrite}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("request role perms %v, want %v", got, want)
	}

	again, err := rbac.Apply(ctx, cli, p)
	if err != nil {
		t.Fatal(err)
	}
	if again != nil {
		t.Fatalf("second Apply changed %v", changeStrings(again))
	}
}

func TestApplyRevokesWhatThePolicyNoLongerLists(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	before := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap2", Contenders: []string{"ap2-a", "ap2-b"}, Observers: []string{"ap2-o"}}}}
	if _, err := rbac.Apply(ctx, cli, before); err != nil {
		t.Fatal(err)
	}
	// ap2-b is dropped, ap2-o becomes a contender.
	after := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap2", Contenders: []string{"ap2-a", "ap2-o"}}}}
	changes, err := rbac.Apply(ctx, cli, after)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"grant-role baton:ap2:readwrite to user ap2-o",
		"revoke-role baton:ap2:readwrite from user ap2-b",
		"revoke-role baton:ap2:read from user ap2-o",
	}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := userRoles(t, cli, "ap2-b"); len(got) != 0 {
		t.Fatalf("dropped user still has %v", got)
	}
	if got := userRoles(t, cli, "ap2-o"); !reflect.DeepEqual(got, []string{"baton:ap2:readwrite"}) {
		t.Fatalf("moved user has %v", got)
	}
	// The account itself stays: Apply never deletes users.
	if _, err := cli.UserGet(ctx, "ap2-b"); err != nil {
		t.Fatalf("dropped user's account is gone: %v", err)
	}
}

func TestApplyRestoresHandEditedRoleAndLeavesOtherRolesAlone(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	p := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap3", Contenders: []string{"ap3-a"}}}}
	if _, err := rbac.Apply(ctx, cli, p); err != nil {
		t.Fatal(err)
	}
	// Someone widens baton's role by hand, and gives the user a role of
	// their own.
	if _, err := cli.RoleGrantPermission(ctx, "baton:ap3:readwrite", "/", "\x00", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RoleAdd(ctx, "ap3-custom"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "ap3-a", "ap3-custom"); err != nil {
		t.Fatal(err)
	}
	changes, err := rbac.Apply(ctx, cli, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`revoke-permission readwrite ["/", "\x00") on role baton:ap3:readwrite`}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if got := rolePerms(t, cli, "baton:ap3:readwrite"); len(got) != 2 || got[0].Key != "/ap3/audit/v1/" || got[1].Key != "/ap3/v1/" {
		t.Fatalf("role perms after Apply: %v", got)
	}
	if got := userRoles(t, cli, "ap3-a"); !slices.Contains(got, "ap3-custom") {
		t.Fatalf("Apply touched a role it does not manage: %v", got)
	}
}

func TestApplyDryRunChangesNothing(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	p := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap4", Contenders: []string{"ap4-a"}}}}
	planned, err := rbac.Apply(ctx, cli, p, rbac.WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	if len(planned) != 15 {
		t.Fatalf("dry run planned %v", changeStrings(planned))
	}
	if _, err := cli.RoleGet(ctx, "baton:ap4:readwrite"); err == nil {
		t.Fatal("dry run created a role")
	}
	done, err := rbac.Apply(ctx, cli, p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(changeStrings(done), changeStrings(planned)) {
		t.Fatalf("Apply did %v, dry run said %v", changeStrings(done), changeStrings(planned))
	}
}

func TestApplyRejectsInvalidPolicyBeforeAnyChange(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	p := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "ap5", Contenders: []string{"ap5-a"}, Observers: []string{"ap5-a"}}}}
	changes, err := rbac.Apply(ctx, cli, p)
	if !errors.Is(err, rbac.ErrInvalidPolicy) || changes != nil {
		t.Fatalf("Apply = %v, %v; want no change and ErrInvalidPolicy", changes, err)
	}
	if _, err := cli.UserGet(ctx, "ap5-a"); err == nil {
		t.Fatal("an invalid policy created a user")
	}
	if _, err := rbac.Apply(ctx, cli, rbac.Policy{}, nil); !errors.Is(err, rbac.ErrInvalid) {
		t.Fatalf("nil option: err = %v", err)
	}
}

func TestShowReadsBackWhatApplyWrote(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	p := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "ap6b", Contenders: []string{"ap6-z", "ap6-a"}, Observers: []string{"ap6-o"}, Operators: []string{"ap6-p"}, Requesters: []string{"ap6-r2", "ap6-r1"}},
		{Name: "ap6a", Observers: []string{"ap6-a"}, Requesters: []string{"ap6-z"}},
	}}
	if _, err := rbac.Apply(ctx, cli, p); err != nil {
		t.Fatal(err)
	}
	shown, err := rbac.Show(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	var mine []rbac.Namespace
	for _, ns := range shown.Namespaces {
		if strings.HasPrefix(ns.Name, "ap6") {
			mine = append(mine, ns)
		}
	}
	want := []rbac.Namespace{
		{Name: "ap6a", Requesters: []string{"ap6-z"}, Observers: []string{"ap6-a"}},
		{Name: "ap6b", Contenders: []string{"ap6-a", "ap6-z"}, Requesters: []string{"ap6-r1", "ap6-r2"}, Observers: []string{"ap6-o"}, Operators: []string{"ap6-p"}},
	}
	if !reflect.DeepEqual(mine, want) {
		t.Fatalf("Show = %+v, want %+v", mine, want)
	}
}

// TestApplyPruneDeletesUnlistedNamespaces runs on its own member: pruning
// acts on every namespace of the cluster.
func TestApplyPruneDeletesUnlistedNamespaces(t *testing.T) {
	own := etcdtest.Start(t)
	cli := own.Client(t)
	ctx := testCtx(t)
	both := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "keep", Contenders: []string{"k"}},
		{Name: "gone", Contenders: []string{"g"}, Observers: []string{"k"}, Requesters: []string{"r"}},
	}}
	if _, err := rbac.Apply(ctx, cli, both); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RoleAdd(ctx, "not-baton"); err != nil {
		t.Fatal(err)
	}
	onlyKeep := rbac.Policy{Namespaces: both.Namespaces[:1]}

	// Without pruning, the unlisted namespace stays.
	if changes, err := rbac.Apply(ctx, cli, onlyKeep); err != nil || changes != nil {
		t.Fatalf("Apply without prune = %v, %v; want no change", changeStrings(changes), err)
	}
	changes, err := rbac.Apply(ctx, cli, onlyKeep, rbac.WithPrune())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"delete-role baton:gone:operate",
		"revoke-role baton:gone:read from user k",
		"delete-role baton:gone:read",
		"revoke-role baton:gone:readwrite from user g",
		"delete-role baton:gone:readwrite",
		"revoke-role baton:gone:request from user r",
		"delete-role baton:gone:request",
	}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("prune changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	roles, err := cli.RoleList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"baton:keep:operate", "baton:keep:read", "baton:keep:readwrite", "baton:keep:request", "not-baton"}; !reflect.DeepEqual(roles.Roles, want) {
		t.Fatalf("roles after prune %v, want %v", roles.Roles, want)
	}
	if again, err := rbac.Apply(ctx, cli, onlyKeep, rbac.WithPrune()); err != nil || again != nil {
		t.Fatalf("second prune = %v, %v", changeStrings(again), err)
	}
}

func TestApplyRefusesToPruneWithAnEmptyPolicy(t *testing.T) {
	cli := srv.Client(t)
	ctx := etcdtest.Context(t, 10*time.Second)
	changes, err := rbac.Apply(ctx, cli, rbac.Policy{}, rbac.WithPrune())
	if !errors.Is(err, rbac.ErrInvalidPolicy) || changes != nil {
		t.Fatalf("Apply(empty, prune) = %v, %v; want ErrInvalidPolicy and no change", changes, err)
	}
}
