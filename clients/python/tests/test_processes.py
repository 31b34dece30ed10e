"""Holder processes killed, frozen and cut off, judged from their own records:
the next holder's token is greater, and nothing the old holder did while it
believed it held happened after the next holder got the lock."""

import signal
import time
import unittest

from support import Holder, Proxy, ServerTest


class ProcessTest(ServerTest):
    def setUp(self):
        self.holders = []

    def tearDown(self):
        for h in self.holders:
            h.stop()

    def holder(self, name, ttl=2, seconds=30, url=None):
        h = Holder(url or self.server.url, name, ttl, seconds)
        self.holders.append(h)
        return h

    def judge(self, old, new):
        """new's token is greater than old's, and every check of old that
        passed came before new's held."""
        o, n = old.first("held"), new.wait_for("held")
        self.assertGreater(n["token"], o["token"])
        recs = old.records()
        passed = [r["t"] for r in recs if r["event"] == "check_ok"]
        self.assertTrue(passed, "the old holder never worked")
        self.assertLess(max(passed), n["t"], "the old holder worked after the new one held")
        return recs

    def test_sigkilled_holder_is_replaced_with_a_greater_token(self):
        a = self.holder("killed", ttl=10)
        a.wait_for("held")
        b = self.holder("killed", ttl=10)
        self.server.wait_waiting(1)
        self.assertIsNone(b.first("held"))
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        killed = time.monotonic()
        recs = self.judge(a, b)
        self.assertFalse([r for r in recs if r["event"] == "lost"], "a killed holder recorded nothing after the kill")
        # The stream's end released it: well before the 10 s TTL.
        self.assertLess(b.first("held")["t"] - killed, 5)

    def test_sigstopped_holder_past_its_ttl_saw_lost_before_the_next_held(self):
        ttl = 2
        a = self.holder("frozen", ttl=ttl)
        a.wait_for("held")
        b = self.holder("frozen", ttl=ttl)
        self.server.wait_waiting(1)
        a.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        n = b.wait_for("held")
        self.assertLess(n["t"] - stopped, ttl + 1, "a frozen holder kept the lock past its TTL")
        time.sleep(ttl)  # frozen well past its TTL
        a.proc.send_signal(signal.SIGCONT)
        lost_seen = a.wait_for("lost_seen")
        self.assertEqual(a.proc.wait(30), 3)
        recs = self.judge(a, b)
        # The frozen holder's own deadline, from its last heartbeat's reply,
        # had passed before the next holder got the lock.
        deadlines = [r["deadline"] for r in recs if r["event"] in ("held", "heartbeat")]
        self.assertLess(max(deadlines), n["t"], "the frozen holder's deadline was after the next one held")
        lost = [r for r in recs if r["event"] == "lost"][0]
        # Lost as of its own deadline (the client's clock), or as the server
        # said: either way before the next holder's held.
        self.assertIn(lost["cause"], ("CLIENT_DEADLINE", "HEARTBEAT_TIMEOUT", "STREAM_ENDED", "HEARTBEAT_REFUSED"))
        if lost["cause"] == "CLIENT_DEADLINE":
            self.assertLess(lost["t"], n["t"])
        self.assertGreater(lost_seen["t"], n["t"])  # it could only notice once resumed

    def test_holder_cut_off_by_a_proxy_saw_lost_before_the_next_held(self):
        # The holder reaches the server through a proxy whose answers come
        # back late, and is cut off right after a heartbeat whose validity
        # was nearly whole (the server's lease renewed just before it
        # arrived, so the validity ends close to the server's own end of
        # the hold): a deadline taken from the reply's receipt, not the
        # heartbeat's send, would then lie past the next holder's held.
        ttl, delay = 3, 0.3
        budget = ttl - ttl / 5  # the longest validity a heartbeat gets
        proxy = Proxy(self.server.url, delay=delay)
        self.addCleanup(proxy.stop)
        a = self.holder("cut", ttl=ttl, url=proxy.url)
        a.wait_for("held")
        b = self.holder("cut", ttl=ttl)  # direct
        self.server.wait_waiting(1)
        chosen, seen, end = None, 0, time.monotonic() + 30
        while chosen is None:
            self.assertLess(time.monotonic(), end, "no heartbeat with a validity near %ss in 30 s" % budget)
            beats = [r for r in a.records() if r["event"] == "heartbeat"]
            if len(beats) > seen:
                seen = len(beats)
                if beats[-1]["validity"] >= budget - (delay - 0.1):
                    proxy.cut()
                    chosen, cut = beats[-1], time.monotonic()
                    break
            time.sleep(0.01)
        self.assertIsNone(b.first("held"))
        n = b.wait_for("held", timeout=ttl + 10)
        self.assertLess(n["t"] - cut, ttl + 1, "the cut-off holder kept the lock past its TTL")
        lost = a.wait_for("lost", timeout=ttl + 10)
        self.assertEqual(a.proc.wait(30), 3)  # its next check said lost
        recs = self.judge(a, b)
        # Silence, not a reset: the holder learned by its own clock, at its
        # own deadline (the chosen heartbeat's: nothing came back after the
        # cut), and that came before the next holder's held.
        self.assertEqual(lost["cause"], "CLIENT_DEADLINE", lost)
        deadlines = [r["deadline"] for r in recs if r["event"] in ("held", "heartbeat")]
        self.assertEqual(max(deadlines), chosen["deadline"], "a heartbeat's reply came back after the cut")
        self.assertEqual(lost["t"], chosen["deadline"])
        self.assertLess(lost["t"], n["t"], "the cut-off holder's deadline was after the next one held")
        self.assertFalse([r for r in recs if r["event"] == "check_ok" and r["t"] >= lost["t"]])

    def test_released_holder_hands_over(self):
        a = self.holder("handover", seconds=3)
        a.wait_for("held")
        b = self.holder("handover", seconds=0.2)
        self.server.wait_waiting(1)
        self.assertEqual(a.proc.wait(30), 0)
        self.assertEqual(b.proc.wait(30), 0)
        self.judge(a, b)
        # Its release began before the next holder's held; "released" is
        # recorded once the server answered Release, which it does after
        # deleting the key, so the next held may come before that.
        self.assertIsNotNone(a.first("released"))
        self.assertLess(a.first("releasing")["t"], b.first("held")["t"])


if __name__ == "__main__":
    unittest.main()
