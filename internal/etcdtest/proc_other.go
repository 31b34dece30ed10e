//go:build !linux

package etcdtest

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
