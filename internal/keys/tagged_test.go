package keys

import "testing"

func TestTaggedKeysParseAndTellTheirTag(t *testing.T) {
	lease := LeaseKey(Prefix("ns", Semaphore, "a/b"), 0x694d)
	key := TaggedKey(lease, TagPermit, 12)
	if key != "/ns/v1/semaphore/a%2Fb/694d.p12" {
		t.Fatalf("TaggedKey = %q", key)
	}
	if TagOf(key) != TagPermit || TagOf(lease) != "" {
		t.Fatalf("TagOf = %q, %q", TagOf(key), TagOf(lease))
	}
	p, tag, err := ParseTagged("ns", key)
	if err != nil || tag != TagPermit || p.Name != "a/b" || p.Lease != 0x694d || p.Kind != Semaphore {
		t.Fatalf("ParseTagged = %+v %q %v", p, tag, err)
	}
	if _, tag, err := ParseTagged("ns", lease); err != nil || tag != "" {
		t.Fatalf("ParseTagged(plain) = %q %v", tag, err)
	}
	for _, bad := range []string{lease + ".", lease + ".p", lease + ".p01", lease + ".px", "/ns/v1/semaphore/a/zz.p1"} {
		if _, _, err := ParseTagged("ns", bad); err == nil {
			t.Errorf("ParseTagged(%q) accepted", bad)
		}
	}
	if got := LimitKey("ns", "a/b"); got != "/ns/v1/semaphore/a%2Fb" {
		t.Fatalf("LimitKey = %q", got)
	}
}

func TestParseTakesAMutexSetKey(t *testing.T) {
	key := TaggedKey(LeaseKey(Prefix("ns", Lock, "a/b"), 0x1f), TagSet, 42)
	p, err := Parse("ns", key)
	if err != nil || p.Kind != Lock || p.Name != "a/b" || p.Lease != 0x1f {
		t.Fatalf("Parse(%q) = %+v %v", key, p, err)
	}
	for _, bad := range []string{
		TaggedKey(LeaseKey(Prefix("ns", Election, "a"), 0x1f), TagSet, 42), // only locks have sets
		LeaseKey(Prefix("ns", Lock, "a"), 0x1f) + ".s",
		LeaseKey(Prefix("ns", Lock, "a"), 0x1f) + ".s01",
		LeaseKey(Prefix("ns", Lock, "a"), 0x1f) + ".p1",
	} {
		if _, err := Parse("ns", bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
