package loopback

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrIsOutsideTheEphemeralRange: a port an outgoing connection
// may take as its source port is not handed out while the range is known.
func TestFreeAddrIsOutsideTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo <= minPort+1 {
		t.Skipf("ephemeral range unknown or too low (%d): FreeAddr falls back to port 0", lo)
	}
	seen := map[string]bool{}
	for range 20 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < minPort || p >= lo {
			t.Fatalf("FreeAddr = %s, want 127.0.0.1 and a port in [%d, %d)", addr, minPort, lo)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddr's %s cannot be listened on: %v", addr, err)
		}
		_ = ln.Close()
		seen[addr] = true
	}
	if len(seen) < 15 {
		t.Fatalf("20 calls gave %d addresses", len(seen))
	}
}
