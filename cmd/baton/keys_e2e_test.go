package main

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyCount is the number of keys under prefix.

func keyCount(t *testing.T, prefix string) int64 {
	t.Helper()
	resp, err := client(t).Get(ctxT(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// waitKeys waits up to 10 s until prefix holds n keys.
func waitKeys(t *testing.T, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for keyCount(t, prefix) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d keys, want %d", prefix, keyCount(t, prefix), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
