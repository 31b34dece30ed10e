package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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
func EnableAuth(ctx context.Context, cli *clientv3.Client, rootPassword string) ([]Change, error) {
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("rbac: auth status: %w", err)
	}
	if st.Enabled {
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
	return append(done, Change{Action: EnableAuthAction}), nil
}
