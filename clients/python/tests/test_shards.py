"""Shard group memberships against a real `baton serve --dev` child process."""

import threading
import time
import unittest

import baton
from support import Proxy, ServerTest


class Recorder:
    """on_event's calls, in order, under a lock."""

    def __init__(self):
        self.mu = threading.Lock()
        self.events = []

    def __call__(self, event, fields):
        with self.mu:
            self.events.append((event, dict(fields)))

    def of(self, *kinds):
        with self.mu:
            return [(e, f) for e, f in self.events if e in kinds]


def next_of(m, kind, timeout=20):
    """m's next event of kind, failing on any other but heartbeats' absence."""
    ev = m.next_event(timeout)
    if ev is None or ev.kind != kind:
        raise AssertionError("%s: want %s, got %r" % (m.member, kind, ev))
    return ev


class ShardsTest(ServerTest):
    def test_two_members_split_the_shards_drain_and_hand_over_on_leave(self):
        ra = Recorder()
        with self.client.shards("ingest", 4, "a", ttl=5, drain_timeout=60, on_event=ra) as a:
            self.assertEqual(len(a.hold_id), 32)
            first = {}
            for _ in range(4):
                ev = next_of(a, "owned")
                self.assertGreater(ev.token, 0)
                self.assertIn("/v1/shard/ingest/", ev.key)
                first[ev.shard] = ev.token
            self.assertEqual(sorted(first), [0, 1, 2, 3])
            self.assertEqual(a.owned(), first)
            self.assertEqual(a.check(2), first[2])

            with self.client.shards("ingest", 4, "b", ttl=5) as b:
                # b's join moves the two highest shards away from a, each
                # kept until a acknowledges its drain.
                moved = [next_of(a, "moved"), next_of(a, "moved")]
                self.assertEqual(sorted(e.shard for e in moved), [2, 3])
                for e in moved:
                    self.assertEqual(e.cause, "MOVED")
                    self.assertEqual(e.token, first[e.shard])
                    self.assertTrue(e.drain_deadline)
                    with self.assertRaises(baton.ShardLost) as lost:
                        a.check(e.shard)
                    self.assertEqual((lost.exception.cause, lost.exception.shard), ("MOVED", e.shard))
                self.assertEqual(a.owned(), {0: first[0], 1: first[1]})
                self.assertEqual(sorted(a.moving()), [2, 3])
                self.assertIsNone(b.next_event(0.5), "b owned a shard before a's drain")
                for e in moved:
                    a.drained(e.shard)
                self.assertEqual(a.moving(), {})
                second = {}
                for _ in range(2):
                    ev = next_of(b, "owned")
                    second[ev.shard] = ev.token
                self.assertEqual(sorted(second), [2, 3])
                for s, t in second.items():
                    self.assertGreater(t, first[s])
                # A shard acknowledged already is not moving away.
                with self.assertRaises(baton.Error) as e:
                    a.drained(2)
                self.assertEqual(e.exception.code, "failed_precondition")
                self.assertTrue(e.exception.message.startswith("shard:"), e.exception.message)
                with self.assertRaises(baton.Error) as e:
                    a.drained(4)
                self.assertEqual(e.exception.code, "invalid_argument")
                self.assertTrue(e.exception.message.startswith("shard:"), e.exception.message)
                g = self.client.call("Inspect", {"shardGroup": "ingest"})["shardGroup"]
                self.assertEqual(sorted(g["members"]), ["a", "b"])
                owners = {o.get("shard", 0): (o["member"], int(o["token"])) for o in g["owners"]}
                self.assertEqual(owners, {0: ("a", first[0]), 1: ("a", first[1]), 2: ("b", second[2]), 3: ("b", second[3])})

                # a leaves: its shards are lost (RELEASED) and b takes them,
                # each with a greater token.
                a.leave()
                self.assertEqual(a.cause, "RELEASED")
                self.assertFalse(a.lost.is_set())
                self.assertEqual(a.owned(), {})
                left = [a.next_event(5) for _ in range(3)]
                self.assertEqual([(e.kind, e.shard, e.cause) for e in left],
                                 [("lost", 0, "RELEASED"), ("lost", 1, "RELEASED"), ("ended", None, "RELEASED")])
                for _ in range(2):
                    ev = next_of(b, "owned")
                    self.assertIn(ev.shard, (0, 1))
                    self.assertGreater(ev.token, first[ev.shard])
                    second[ev.shard] = ev.token
                self.assertEqual(b.owned(), second)
            self.assertEqual(b.cause, "RELEASED")
            self.assertEqual(b.owned(), {})
        self.assertEqual([e for e, _ in ra.of("joined", "ended")], ["joined", "ended"])
        self.assertEqual(len(ra.of("drained")), 2)
        self.assertEqual(self.client.call("Inspect", {"shardGroup": "ingest"}).get("shardGroup", {}).get("owners", []), [])

    def test_a_slow_reader_learns_from_its_heartbeats_that_a_moved_shard_is_lost(self):
        # a's stream reader stalls once a shard moves (it takes neither
        # moved nor lost); its heartbeats go on. The server sends lost at
        # the drain deadline and names the shard in every heartbeat's reply
        # from then: a ends it from a reply, before b owns it.
        stall = threading.Event()

        class SlowReader(baton.Membership):
            def _message(self, m):
                if "moved" in m:
                    stall.set()
                if stall.is_set():
                    self._mu.release()  # the reader thread holds it
                    try:
                        stall_until.wait(30)
                    finally:
                        self._mu.acquire()
                return super()._message(m)

        stall_until = threading.Event()
        self.addCleanup(stall_until.set)
        ra = Recorder()
        a = SlowReader(self.client, "slow", 2, "a", ttl=3, drain_timeout=0.2, on_event=ra).acquire()
        self.addCleanup(a.release)
        self.assertTrue(a.wait(lambda o: len(o) == 2, 20))
        token1 = a.owned()[1]
        rb = Recorder()
        with self.client.shards("slow", 2, "b", ttl=3, on_event=rb) as b:
            self.assertTrue(b.wait(lambda o: 1 in o, 20), "b never owned shard 1")
            owned_b = [f for e, f in rb.of("owned") if f.get("shard") == 1][0]
            lost_a = [f for e, f in ra.of("lost") if f.get("shard") == 1 and f.get("token") == token1]
            self.assertTrue(lost_a, "a never learned it lost shard 1 (its reader is stalled)")
            self.assertLess(lost_a[0]["t"], owned_b["t"], "a learned it lost shard 1 after b owned it")
            self.assertNotIn(1, a.owned())
        stall_until.set()

    def test_tokens_grow_across_memberships(self):
        tokens = []
        for _ in range(3):
            with self.client.shards("seq", 1, "only", ttl=5) as m:
                tokens.append(next_of(m, "owned").token)
        self.assertEqual(tokens, sorted(tokens))
        self.assertEqual(len(set(tokens)), 3)

    def test_heartbeats_keep_a_membership_past_its_ttl(self):
        r = Recorder()
        with self.client.shards("beats", 2, "m", ttl=2, on_event=r) as m:
            self.assertTrue(m.wait(lambda owned: len(owned) == 2, 10))
            end = time.monotonic() + 4
            while time.monotonic() < end:
                self.assertEqual(sorted(m.owned()), [0, 1])
                m.check()
                time.sleep(0.05)
        self.assertGreater(len(r.of("heartbeat")), 5)
        self.assertEqual(m.cause, "RELEASED")

    def test_invalid_fields_are_invalid_argument_naming_the_field(self):
        ok = {"group": "g", "count": 2, "member": "m"}
        for edit, field in (({"group": ""}, "group"), ({"count": 0}, "count"), ({"count": 16385}, "count"),
                            ({"member": ""}, "member"), ({"member": "a\x1b"}, "member"), ({"ttl": 1}, "ttl"),
                            ({"drain_timeout": 7200}, "drain_timeout"), ({"identity": "x\ny"}, "identity"),
                            ({"namespace": "a/b"}, "namespace")):
            kw = dict(ok, **edit)
            m = self.client.shards(kw.pop("group"), kw.pop("count"), kw.pop("member"), **kw)
            with self.assertRaises(baton.Error) as e:
                m.join()
            self.assertEqual(e.exception.code, "invalid_argument", edit)
            self.assertTrue(e.exception.message.startswith(field + ":"), e.exception.message)
        with self.client.shards("g", 2, "m", ttl=5) as m:
            with self.assertRaises(baton.Error) as e:
                self.client.shards("g", 3, "other").join()
            self.assertEqual(e.exception.code, "failed_precondition")
            self.assertTrue(e.exception.message.startswith("count:"), e.exception.message)
            with self.assertRaises(baton.Error) as e:
                self.client.shards("g", 2, "m").join()
            self.assertEqual(e.exception.code, "already_exists")
            self.assertTrue(e.exception.message.startswith("member:"), e.exception.message)
            m.check()


class CutOffMemberTest(ServerTest):
    """A member cut off from the server (a proxy that stops forwarding)
    ends every shard by its own clock, before another member owns it."""

    def test_cut_off_member_loses_its_shards_at_its_deadline_before_the_next_owns_them(self):
        ttl = 2
        proxy = Proxy(self.server.url)
        self.addCleanup(proxy.stop)
        r = Recorder()
        a = baton.Client(proxy.url, timeout=1).shards("cut", 2, "a", ttl=ttl, drain_timeout=60, on_event=r)
        a.join()
        try:
            owned = {}
            for _ in range(2):
                ev = next_of(a, "owned")
                owned[ev.shard] = ev.token
            # b, direct, joins: shard 1 moves away from a, which never
            # acknowledges it, so b owns nothing while a lives.
            with baton.Client(self.server.url).shards("cut", 2, "b", ttl=5) as b:
                self.assertEqual(next_of(a, "moved").shard, 1)
                beats = len(r.of("heartbeat"))
                self.assertTrue(a.wait(lambda _: len(r.of("heartbeat")) > beats, 10), "no heartbeat")
                proxy.cut()
                cut = time.monotonic()
                self.assertTrue(a.lost.wait(ttl + 2), "no loss while cut off")
                self.assertEqual(a.cause, baton.CLIENT_DEADLINE)
                last_deadline = max(f["deadline"] for e, f in r.of("joined", "heartbeat"))
                lost = [a.next_event(1) for _ in range(3)]
                self.assertEqual([(e.kind, e.shard, e.cause) for e in lost],
                                 [("lost", 0, "CLIENT_DEADLINE"), ("lost", 1, "CLIENT_DEADLINE"), ("ended", None, "CLIENT_DEADLINE")])
                for e in lost:
                    self.assertEqual(e.t, last_deadline)  # at its own deadline, within a TTL of the cut
                self.assertLess(last_deadline, cut + ttl)
                self.assertEqual((a.owned(), a.moving()), ({}, {}))
                with self.assertRaises(baton.ShardLost):
                    a.check(0)
                # The server ends a's membership at its own, later deadline:
                # only then does b own a's shards, with greater tokens.
                for _ in range(2):
                    ev = next_of(b, "owned")
                    self.assertGreater(ev.token, owned[ev.shard])
                    self.assertGreater(ev.t, last_deadline)
        finally:
            a.leave()  # ended already: nothing is sent
        self.assertEqual(a.cause, baton.CLIENT_DEADLINE)


if __name__ == "__main__":
    unittest.main()
