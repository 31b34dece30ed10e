//go:build !linux

package etcdtest

import "syscall"

// procAttr: without a parent-death signal, a member whose test binary dies
// before Stop keeps running until it is killed.
func procAttr() *syscall.SysProcAttr { return nil }
