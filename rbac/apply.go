package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// Access is what a permission allows on its key range; with Operate and
// Request, also the access level of a role of a namespace.
type Access string

// The accesses of baton's permissions. Write alone appears only when read
// from a role someone edited by hand. Operate and Request are no etcd
// permissions but the access levels of the operators' and the requesters'
// roles (see RolePermissions).
const (
	Read      Access = "read"
	ReadWrite Access = "readwrite"
	Write     Access = "write"
	Operate   Access = "operate"
	Request   Access = "request"
)

// rolePrefix marks the roles Apply manages; any other role is never
// touched. ':' cannot occur in a namespace, so a role name parses back
// unambiguously.
const rolePrefix = "baton:"

// RoleName is the etcd role Apply manages for access level access to
// namespace ns: "baton:<ns>:readwrite" for contenders, "baton:<ns>:read"
// for observers, "baton:<ns>:operate" for operators, "baton:<ns>:request"
// for requesters.
func RoleName(ns string, access Access) string { return rolePrefix + ns + ":" + string(access) }

// parseRole reports the namespace and access level of a role Apply manages.
func parseRole(role string) (ns string, access Access, ok bool) {
	rest, ok := strings.CutPrefix(role, rolePrefix)
	if !ok {
		return "", "", false
	}
	ns, a, ok := strings.Cut(rest, ":")
	if !ok || keys.ValidateNamespace(ns) != nil || !slices.Contains(roleAccesses, Access(a)) {
		return "", "", false
	}
	return ns, Access(a), true
}

// roleAccesses are the access levels of the roles Apply manages.
var roleAccesses = []Access{ReadWrite, Read, Operate, Request}

// Permission is a key range and what may be done on it.
type Permission struct {
	Key      string `json:"key"`
	RangeEnd string `json:"range_end,omitempty"`
	Access   Access `json:"access"`
}

// NamespacePermission is the permission access on namespace ns's whole
// prefix, where its locks, elections and acquisition records live.
func NamespacePermission(ns string, access Access) Permission {
	return prefixPermission(keys.NamespacePrefix(ns), access)
}

// AuditPrefix is the prefix of namespace ns's audit trail (the records of
// force-unlocks and release requests). It lies outside the namespace's
// prefix, so that the contenders' grant does not cover it:
// "/<ns>/audit/v1/".
func AuditPrefix(ns string) string { return keys.AuditPrefix(ns) }

// RequestAuditPrefix is the part of namespace ns's audit trail that holds
// the records of release requests, "/<ns>/audit/v1/request/", so that the
// requesters' role can write there and nowhere else in the trail. Older
// versions wrote request records directly under AuditPrefix.
func RequestAuditPrefix(ns string) string { return keys.RequestAuditPrefix(ns) }

// AuditPermission is the permission access on namespace ns's audit trail.
func AuditPermission(ns string, access Access) Permission {
	return prefixPermission(AuditPrefix(ns), access)
}

// RequestAuditPermission is the permission access on the request records
// of namespace ns's audit trail (RequestAuditPrefix).
func RequestAuditPermission(ns string, access Access) Permission {
	return prefixPermission(RequestAuditPrefix(ns), access)
}

// prefixPermission is the permission access on every key under prefix.
func prefixPermission(prefix string, access Access) Permission {
	return Permission{Key: prefix, RangeEnd: clientv3.GetPrefixRangeEnd(prefix), Access: access}
}

// RolePermissions is every permission of the role of access level access
// (Read, ReadWrite, Operate or Request) of namespace ns, as Apply grants
// them:
//
//	read       read on the namespace, read on its audit trail
//	readwrite  readwrite on the namespace, read on its audit trail
//	operate    readwrite on the namespace and on its audit trail
//	request    readwrite on the namespace and on the trail's request
//	           records (RequestAuditPrefix), read on the rest of the trail
//
// A request is a key put on the holder's lease, and etcd refuses a put
// with a lease unless the user may write every key already attached to
// it: hence readwrite on the whole namespace. A holder whose lease also
// carries keys of another namespace can only be asked by a user who may
// write those keys too.
func RolePermissions(ns string, access Access) []Permission {
	switch access {
	case Operate:
		return []Permission{NamespacePermission(ns, ReadWrite), AuditPermission(ns, ReadWrite)}
	case Request:
		return []Permission{NamespacePermission(ns, ReadWrite), AuditPermission(ns, Read), RequestAuditPermission(ns, ReadWrite)}
	case ReadWrite:
		return []Permission{NamespacePermission(ns, ReadWrite), AuditPermission(ns, Read)}
	default:
		return []Permission{NamespacePermission(ns, Read), AuditPermission(ns, Read)}
	}
}

// Action is the kind of one change to etcd's auth state.
type Action string

// The actions Apply and EnableAuth take.
const (
	AddRole          Action = "add-role"
	GrantPermission  Action = "grant-permission"
	RevokePermission Action = "revoke-permission"
	AddUser          Action = "add-user"
	GrantRole        Action = "grant-role"
	RevokeRole       Action = "revoke-role"
	DeleteRole       Action = "delete-role"
	EnableAuthAction Action = "enable-auth"
)

// Change is one change made (or, with WithDryRun, to be made) to etcd's
// auth state.
type Change struct {
	Action Action `json:"action"`
	Role   string `json:"role,omitempty"`
	User   string `json:"user,omitempty"`
	// Perm is set for GrantPermission and RevokePermission.
	Perm *Permission `json:"permission,omitempty"`
}

// String describes the change in one line, e.g.
// "grant-role baton:payments:readwrite to user payments-api".
func (c Change) String() string {
	switch c.Action {
	case AddRole, DeleteRole:
		return fmt.Sprintf("%s %s", c.Action, c.Role)
	case AddUser:
		return fmt.Sprintf("%s %s", c.Action, c.User)
	case GrantRole:
		return fmt.Sprintf("%s %s to user %s", c.Action, c.Role, c.User)
	case RevokeRole:
		return fmt.Sprintf("%s %s from user %s", c.Action, c.Role, c.User)
	case GrantPermission, RevokePermission:
		if c.Perm == nil {
			return fmt.Sprintf("%s on role %s", c.Action, c.Role)
		}
		return fmt.Sprintf("%s %s [%q, %q) on role %s", c.Action, c.Perm.Access, c.Perm.Key, c.Perm.RangeEnd, c.Role)
	default:
		return string(c.Action)
	}
}

// state is the part of etcd's auth state Apply looks at.
type state struct {
	users map[string][]string      // user -> roles
	roles map[string][]*Permission // every role -> its permissions
}

// Apply makes etcd's auth state match p and returns the changes it made,
// in the order it made them; nil when there was nothing to do, so a second
// Apply of the same policy returns nil. It needs an admin client (root)
// when auth is enabled; it does not enable auth (EnableAuth does).
//
// For every namespace p lists, p is the whole truth about baton's four
// roles of that namespace:
//   - the roles exist and each holds exactly its RolePermissions (extra
//     permissions someone added by hand are revoked);
//   - the users listed exist (missing ones are created without a
//     password: they authenticate with a client certificate whose CN is
//     the user name; give a password with etcdctl user passwd if needed);
//   - every user that holds one of the roles but is no longer listed has
//     it revoked, so removing a user from the file removes its access.
//
// Namespaces p does not list are left as they are, so that teams can
// apply their own files; with WithPrune, the roles of unlisted namespaces
// are revoked from every user and deleted (a policy that lists no
// namespace is then refused with ErrInvalidPolicy). Apply never deletes a user,
// never changes a password, and never touches a role whose name does not
// start with "baton:".
//
// If a step fails Apply stops and returns the changes already made and
// the error; running it again finishes the work. A step that another
// writer did in the meantime (a role already added, a role already
// revoked) is skipped and not reported.
func Apply(ctx context.Context, cli *clientv3.Client, p Policy, opts ...ApplyOption) ([]Change, error) {
	o, err := buildApply(opts)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if o.prune && len(p.Namespaces) == 0 {
		return nil, fmt.Errorf("%w: pruning with a policy that lists no namespace would delete every baton role", ErrInvalidPolicy)
	}
	st, err := readState(ctx, cli, o)
	if err != nil {
		return nil, err
	}
	changes := plan(st, p, o.prune)
	if o.dryRun {
		return changes, nil
	}
	var done []Change
	for _, c := range changes {
		rctx, cancel := o.request(ctx)
		applied, err := execute(rctx, cli, c)
		cancel()
		if err != nil {
			return done, fmt.Errorf("rbac: apply %s: %w", c, err)
		}
		if applied {
			done = append(done, c)
			if o.progress != nil {
				o.progress(c)
			}
		}
	}
	return done, nil
}

// Show reads from etcd the policy in force: every namespace that has a
// role Apply manages, with the users holding each role (contenders,
// requesters, observers, operators), sorted. Encode
// turns it into a file Apply accepts. Show needs an admin client when
// auth is enabled. Of the options, only WithRequestTimeout applies to
// Show; WithPrune, WithDryRun and WithProgress are refused with ErrInvalid.
func Show(ctx context.Context, cli *clientv3.Client, opts ...ApplyOption) (Policy, error) {
	o, err := buildApply(opts)
	if err != nil {
		return Policy{}, err
	}
	if o.prune || o.dryRun || o.progress != nil {
		return Policy{}, fmt.Errorf("%w: Show takes only WithRequestTimeout", ErrInvalid)
	}
	st, err := readState(ctx, cli, o)
	if err != nil {
		return Policy{}, err
	}
	byNS := make(map[string]*Namespace)
	get := func(ns string) *Namespace {
		if n, ok := byNS[ns]; ok {
			return n
		}
		n := &Namespace{Name: ns}
		byNS[ns] = n
		return n
	}
	for role := range st.roles {
		if ns, _, ok := parseRole(role); ok {
			get(ns)
		}
	}
	for user, roles := range st.users {
		for _, role := range roles {
			ns, access, ok := parseRole(role)
			if !ok {
				continue
			}
			n := get(ns)
			switch access {
			case ReadWrite:
				n.Contenders = append(n.Contenders, user)
			case Operate:
				n.Operators = append(n.Operators, user)
			case Request:
				n.Requesters = append(n.Requesters, user)
			default:
				n.Observers = append(n.Observers, user)
			}
		}
	}
	var p Policy
	for _, n := range byNS {
		p.Namespaces = append(p.Namespaces, *n)
	}
	return p.normalized(), nil
}

func readState(ctx context.Context, cli *clientv3.Client, o applyConfig) (state, error) {
	st := state{users: make(map[string][]string), roles: make(map[string][]*Permission)}
	rctx, cancel := o.request(ctx)
	rl, err := cli.RoleList(rctx)
	cancel()
	if err != nil {
		return st, fmt.Errorf("rbac: list roles: %w", err)
	}
	for _, role := range rl.Roles {
		var perms []*Permission
		if _, _, managed := parseRole(role); managed {
			// Only baton's roles are compared permission by permission.
			rctx, cancel := o.request(ctx)
			rg, err := cli.RoleGet(rctx, role)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
				return st, fmt.Errorf("rbac: get role %s: %w", role, err)
			}
			if err == nil {
				for _, kp := range rg.Perm {
					perms = append(perms, &Permission{Key: string(kp.Key), RangeEnd: string(kp.RangeEnd), Access: accessOf(kp.PermType)})
				}
			}
		}
		st.roles[role] = perms
	}
	rctx, cancel = o.request(ctx)
	ul, err := cli.UserList(rctx)
	cancel()
	if err != nil {
		return st, fmt.Errorf("rbac: list users: %w", err)
	}
	for _, user := range ul.Users {
		rctx, cancel := o.request(ctx)
		ug, err := cli.UserGet(rctx, user)
		cancel()
		if errors.Is(err, rpctypes.ErrUserNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return st, fmt.Errorf("rbac: get user %s: %w", user, err)
		}
		st.users[user] = ug.Roles
	}
	return st, nil
}

func accessOf(t authpb.Permission_Type) Access {
	switch t {
	case authpb.READ:
		return Read
	case authpb.WRITE:
		return Write
	default:
		return ReadWrite
	}
}

func permType(a Access) clientv3.PermissionType {
	switch a {
	case Read:
		return clientv3.PermissionType(clientv3.PermRead)
	case Write:
		return clientv3.PermissionType(clientv3.PermWrite)
	default:
		return clientv3.PermissionType(clientv3.PermReadWrite)
	}
}

// plan lists the changes that make st match p, in the order to make them:
// per namespace (sorted), roles and their permissions, then users, then
// grants, then revocations; pruning last.
func plan(st state, p Policy, prune bool) []Change {
	var out []Change
	addedUsers := make(map[string]bool)
	listed := make(map[string]bool)
	for _, ns := range p.normalized().Namespaces {
		listed[ns.Name] = true
		for _, r := range []struct {
			access Access
			users  []string
		}{{ReadWrite, ns.Contenders}, {Read, ns.Observers}, {Operate, ns.Operators}, {Request, ns.Requesters}} {
			role := RoleName(ns.Name, r.access)
			want := RolePermissions(ns.Name, r.access)
			perms, exists := st.roles[role]
			if !exists {
				out = append(out, Change{Action: AddRole, Role: role})
			}
			found := make([]bool, len(want))
			for _, have := range perms {
				i := slices.IndexFunc(want, func(w Permission) bool { return w.Key == have.Key && w.RangeEnd == have.RangeEnd })
				switch {
				case i >= 0 && want[i] == *have:
					found[i] = true
				case i >= 0:
					// A grant on the same range replaces the access; it is
					// reported below as the grant.
				default:
					out = append(out, Change{Action: RevokePermission, Role: role, Perm: have})
				}
			}
			for i, w := range want {
				if !found[i] {
					w := w
					out = append(out, Change{Action: GrantPermission, Role: role, Perm: &w})
				}
			}
			wanted := make(map[string]bool, len(r.users))
			for _, u := range r.users {
				wanted[u] = true
				roles, exists := st.users[u]
				if !exists && !addedUsers[u] {
					out = append(out, Change{Action: AddUser, User: u})
					addedUsers[u] = true
				}
				if !slices.Contains(roles, role) {
					out = append(out, Change{Action: GrantRole, Role: role, User: u})
				}
			}
			for _, u := range holders(st, role) {
				if !wanted[u] {
					out = append(out, Change{Action: RevokeRole, Role: role, User: u})
				}
			}
		}
	}
	if prune {
		var stale []string
		for role := range st.roles {
			if ns, _, ok := parseRole(role); ok && !listed[ns] {
				stale = append(stale, role)
			}
		}
		slices.Sort(stale)
		for _, role := range stale {
			for _, u := range holders(st, role) {
				out = append(out, Change{Action: RevokeRole, Role: role, User: u})
			}
			out = append(out, Change{Action: DeleteRole, Role: role})
		}
	}
	return out
}

// holders lists the users holding role, sorted.
func holders(st state, role string) []string {
	var out []string
	for u, roles := range st.users {
		if slices.Contains(roles, role) {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// execute makes one change; applied is false when etcd already had it.
func execute(ctx context.Context, cli *clientv3.Client, c Change) (applied bool, err error) {
	switch c.Action {
	case AddRole:
		_, err = cli.RoleAdd(ctx, c.Role)
		return skip(err, rpctypes.ErrRoleAlreadyExist)
	case DeleteRole:
		_, err = cli.RoleDelete(ctx, c.Role)
		return skip(err, rpctypes.ErrRoleNotFound)
	case GrantPermission:
		_, err = cli.RoleGrantPermission(ctx, c.Role, c.Perm.Key, c.Perm.RangeEnd, permType(c.Perm.Access))
		return err == nil, err
	case RevokePermission:
		_, err = cli.RoleRevokePermission(ctx, c.Role, c.Perm.Key, c.Perm.RangeEnd)
		return skip(err, rpctypes.ErrPermissionNotGranted)
	case AddUser:
		_, err = cli.UserAddWithOptions(ctx, c.User, "", &clientv3.UserAddOptions{NoPassword: true})
		return skip(err, rpctypes.ErrUserAlreadyExist)
	case GrantRole:
		_, err = cli.UserGrantRole(ctx, c.User, c.Role)
		return err == nil, err
	case RevokeRole:
		_, err = cli.UserRevokeRole(ctx, c.User, c.Role)
		return skip(err, rpctypes.ErrRoleNotGranted)
	case EnableAuthAction:
		_, err = cli.AuthEnable(ctx)
		return err == nil, err
	}
	return false, fmt.Errorf("%w: unknown action %q", ErrInvalid, c.Action)
}

// skip turns the error that says "already so" into "nothing done".
func skip(err, already error) (bool, error) {
	if errors.Is(err, already) {
		return false, nil
	}
	return err == nil, err
}
