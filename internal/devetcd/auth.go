package devetcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Auth names the users EnableAuth creates.
type Auth struct {
	// RootPassword is the password of user root (role root).
	RootPassword string
	// User and Password are a regular user granted readwrite on Prefix
	// through role "<User>-rw"; an empty User creates root alone.
	User, Password string
	// Prefix is the key prefix User may read and write, e.g.
	// "/regiond/v1/" (routing/, agents/, audit/ and the rest).
	Prefix string
}

// EnableAuth creates user root and (unless a.User is empty) a.User with
// readwrite on a.Prefix, then turns authentication on. cli must be allowed to do so (a client of a
// server whose auth is still off). After it, requests need a user:
// Server.ClientAs(a.User, a.Password) or ClientAs("root", a.RootPassword).
func EnableAuth(ctx context.Context, cli *clientv3.Client, a Auth) error {
	switch {
	case a.RootPassword == "":
		return errors.New("devetcd: EnableAuth needs RootPassword")
	case a.User != "" && (a.Password == "" || a.Prefix == ""):
		return errors.New("devetcd: EnableAuth needs Password and Prefix with User")
	case a.User == "root":
		return errors.New("devetcd: EnableAuth: User must not be root")
	}
	role := a.User + "-rw"
	type step struct {
		what string
		do   func() error
	}
	steps := []step{
		{"add user root", func() error { _, err := cli.UserAdd(ctx, "root", a.RootPassword); return err }},
		{"grant role root to root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
	}
	user := []step{
		{"add role " + role, func() error { _, err := cli.RoleAdd(ctx, role); return err }},
		{"grant readwrite on " + a.Prefix + " to role " + role, func() error {
			_, err := cli.RoleGrantPermission(ctx, role, a.Prefix, clientv3.GetPrefixRangeEnd(a.Prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add user " + a.User, func() error { _, err := cli.UserAdd(ctx, a.User, a.Password); return err }},
		{"grant role " + role + " to " + a.User, func() error { _, err := cli.UserGrantRole(ctx, a.User, role); return err }},
	}
	if a.User != "" {
		steps = append(steps, user...)
	}
	steps = append(steps, step{"enable auth", func() error { _, err := cli.AuthEnable(ctx); return err }})
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("devetcd: %s: %w", s.what, err)
		}
	}
	return nil
}
