package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rootUser and rootRole are etcd's built-in administrator names.
const (
	rootUser = "root"
	rootRole = "root"
)

// EnableAuth turns on etcd's authentication, first creating the root user
// and giving it the root role if needed, and returns the changes made; nil
// when auth was already on, so calling it twice is safe.
//
// An existing root keeps its password: rootPassword is used only when
// root is created. An empty rootPassword creates root without a password,
// so that only a client certificate whose CN is "root" can act as root
// (the server must run with --client-cert-auth); that is the recommended
// set-up with mTLS, since no password then exists to leak.
//
// Once auth is on, every client must authenticate: with a password, or
// with a client certificate whose CN names an etcd user. Users without a
// role can do nothing; Apply gives them one.
//
// It works on etcd 3.4, which lacks the AuthStatus RPC (see AuthEnabled),
// and checks afterwards that auth is really on: it never reports success
// while auth is off.
func EnableAuth(ctx context.Context, cli *clientv3.Client, rootPassword string) ([]Change, error) {
	enabled, err := AuthEnabled(ctx, cli)
	if err != nil {
		return nil, err
	}
	if enabled {
		return nil, nil
	}
	var done []Change
	ug, err := cli.UserGet(ctx, rootUser)
	switch {
	case errors.Is(err, rpctypes.ErrUserNotFound):
		opts := &clientv3.UserAddOptions{NoPassword: rootPassword == ""}
		if _, err := cli.UserAddWithOptions(ctx, rootUser, rootPassword, opts); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return done, fmt.Errorf("rbac: add user root: %w", err)
		}
		done = append(done, Change{Action: AddUser, User: rootUser})
	case err != nil:
		return done, fmt.Errorf("rbac: get user root: %w", err)
	}
	if err != nil || !slices.Contains(ug.Roles, rootRole) {
		// etcd's root role exists implicitly; granting it needs no RoleAdd.
		if _, err := cli.UserGrantRole(ctx, rootUser, rootRole); err != nil {
			return done, fmt.Errorf("rbac: grant role root to user root: %w", err)
		}
		done = append(done, Change{Action: GrantRole, Role: rootRole, User: rootUser})
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return done, fmt.Errorf("rbac: enable auth: %w", err)
	}
	if enabled, err := AuthEnabled(ctx, cli); err != nil {
		return done, err
	} else if !enabled {
		return done, errors.New("rbac: enable auth: etcd accepted the request but auth is still off")
	}
	return append(done, Change{Action: EnableAuthAction}), nil
}

// probeUser is the user name AuthEnabled authenticates as on etcd 3.4; no
// password can match, so the answer says only whether auth is on.
const probeUser = "baton-auth-probe"

// AuthEnabled reports whether etcd's authentication is on. It asks the
// AuthStatus RPC (etcd 3.5 and later); on etcd 3.4, which answers that RPC
// with "unknown method", it makes an Authenticate call with a password
// that cannot match, which etcd refuses as "authentication is not enabled"
// only while auth is off.
func AuthEnabled(ctx context.Context, cli *clientv3.Client) (bool, error) {
	st, err := cli.AuthStatus(ctx)
	if err == nil {
		return st.Enabled, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return false, fmt.Errorf("rbac: auth status: %w", err)
	}
	return authEnabledByProbe(ctx, cli)
}

func authEnabledByProbe(ctx context.Context, cli *clientv3.Client) (bool, error) {
	_, err := cli.Authenticate(ctx, probeUser, "\x00")
	switch {
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return false, nil
	case errors.Is(err, rpctypes.ErrAuthFailed), err == nil:
		return true, nil
	default:
		return false, fmt.Errorf("rbac: auth status (by authentication probe): %w", err)
	}
}
