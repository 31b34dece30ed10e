package shard_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/shard"
)

func TestSmoke(t *testing.T) {
	cli := client(t)
	log := &eventLog{}
	var ms []*member
	for _, name := range []string{"a", "b", "c"} {
		g := newGroup(t, cli, "smoke", 10, shard.WithTTL(5*time.Second))
		ms = append(ms, start(t, g, name, log, nil))
	}
	st := settled(t, ms[0].g, "a", "b", "c")
	t.Logf("counts %v", counts(st))
	if err := ms[2].stop(t); err != nil {
		t.Logf("stop: %v", err)
	}
	st = settled(t, ms[0].g, "a", "b")
	t.Logf("counts %v", counts(st))
}
