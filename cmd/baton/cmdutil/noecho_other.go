//go:build !linux

package cmdutil

import (
	"errors"
)

// noEcho is not implemented here: the password prompt echoes.
func noEcho(int) (restore func(), err error) {
	return nil, errors.New("echo control is implemented on Linux only")
}
