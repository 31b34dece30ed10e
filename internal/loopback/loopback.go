// Package loopback picks free 127.0.0.1 addresses for the etcd members that
// baton dev and the tests start.
package loopback

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns a 127.0.0.1 host:port that was free a moment ago. It is
// picked below the kernel's ephemeral port range when that is known: a
// port from the range can become an outgoing connection's source port
// before the server that was given it listens.
func FreeAddr() (string, error) {
	if lo := ephemeralLow(); lo > minPort+1 {
		for range 64 {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(minPort+rand.IntN(lo-minPort))))
			if err == nil {
				addr := ln.Addr().String()
				_ = ln.Close()
				return addr, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// minPort is the lowest port FreeAddr picks: above the well-known services.
const minPort = 10000

// ephemeralLow is the first port of Linux's ephemeral range, 0 if unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
