"""The client against a real `baton serve --dev` child process."""

import signal
import threading
import time
import unittest

import baton
from support import Etcd, Server, ServerTest


class ClientTest(ServerTest):
    def test_lock_gives_a_token_and_releases_on_exit(self):
        with self.client.lock("invoice-42", ttl=5, identity="py-1") as l:
            self.assertGreater(l.token, 0)
            self.assertTrue(l.key.endswith("/") is False and "/v1/lock/invoice-42/" in l.key)
            l.check()
            held = [x for x in self.client.inspect("invoice-") if x["name"] == "invoice-42"]
            self.assertEqual(len(held), 1)
            self.assertEqual(held[0]["holder"]["identity"], "py-1")
            self.assertEqual(int(held[0]["holder"]["token"]), l.token)
        self.assertEqual(l.cause, "RELEASED")
        self.assertFalse(l.lost.is_set())
        self.assertEqual([x for x in self.client.inspect("invoice-") if x["name"] == "invoice-42"], [])

    def test_next_holder_gets_a_greater_token(self):
        with self.client.lock("seq") as a:
            first = a.token
        with self.client.lock("seq") as b:
            self.assertGreater(b.token, first)

    def test_a_set_has_one_token(self):
        with self.client.lock(["ledger", "accounts"]) as l:
            self.assertEqual(len(l.keys), 2)
            with self.assertRaises(baton.NotAcquired):
                self.client.lock("accounts", try_=True).acquire()

    def test_a_semaphore_admits_limit_holders(self):
        with self.client.lock("pool", kind="semaphore", limit=2) as a, self.client.lock("pool", kind="semaphore", limit=2) as b:
            self.assertNotEqual(a.token, b.token)
            with self.assertRaises(baton.NotAcquired):
                self.client.lock("pool", kind="semaphore", limit=2, try_=True).acquire()
        with self.client.lock("doc", kind="read"), self.client.lock("doc", kind="read"):
            with self.assertRaises(baton.NotAcquired):
                self.client.lock("doc", kind="write", try_=True).acquire()

    def test_try_on_a_held_lock_and_wait_timeout_are_not_acquired(self):
        with self.client.lock("busy"):
            with self.assertRaises(baton.NotAcquired) as e:
                self.client.lock("busy", try_=True).acquire()
            self.assertEqual(e.exception.code, "aborted")
            with self.assertRaises(baton.NotAcquired) as e:
                self.client.lock("busy", wait_timeout=0.2).acquire()
            self.assertEqual(e.exception.code, "deadline_exceeded")

    def test_invalid_fields_are_invalid_argument_naming_the_field(self):
        for kw, field in (({"name": ""}, "names[0]"), ({"name": "a", "ttl": 1}, "ttl"), ({"name": "a\x1b"}, "names[0]"),
                          ({"name": "a", "identity": "x\ny"}, "identity")):
            name = kw.pop("name")
            with self.assertRaises(baton.Error) as e:
                self.client.lock(name, **kw).acquire()
            self.assertEqual(e.exception.code, "invalid_argument")
            self.assertTrue(e.exception.message.startswith(field + ":"), e.exception.message)

    def test_lead_transfers_and_resigns(self):
        a = self.client.lead("py-elect", identity="py-a", ttl=5).acquire()
        self.assertGreater(a.token, 0)
        self.assertIn("/v1/election/py-elect/", a.key)
        a.check()
        b = self.client.lead("py-elect", identity="py-b")
        tb = threading.Thread(target=b.acquire)
        tb.start()
        end = time.monotonic() + 20
        while True:  # b is a candidate once its key is written
            try:
                token = a.transfer("py-b")
                break
            except baton.Error as e:
                if e.code != "not_found" or time.monotonic() > end:
                    raise
                a.check()  # a refused transfer leaves the term as it was
                time.sleep(0.05)
        tb.join(20)
        self.assertEqual(b.token, token)
        self.assertGreater(b.token, a.token)
        self.assertEqual(a.cause, "RELEASED")
        self.assertFalse(a.lost.is_set())
        with self.assertRaises(baton.Error) as e:
            b.transfer("py-nobody")
        self.assertEqual(e.exception.code, "not_found")
        c = self.client.lead("py-elect", identity="py-c")
        tc = threading.Thread(target=c.acquire)
        tc.start()
        b.resign()
        tc.join(20)
        self.assertGreater(c.token, b.token)
        c.check()
        c.resign()
        self.assertEqual(c.cause, "RELEASED")
        with self.client.lead("py-elect") as d:  # nobody left: it leads at once
            self.assertGreater(d.token, c.token)

    def test_lead_invalid_fields_name_the_field(self):
        for kw, field in (({"name": ""}, "name"), ({"name": "a", "version": "v 1"}, "version")):
            name = kw.pop("name")
            with self.assertRaises(baton.Error) as e:
                self.client.lead(name, **kw).acquire()
            self.assertEqual(e.exception.code, "invalid_argument")
            self.assertTrue(e.exception.message.startswith(field + ":"), e.exception.message)

    def test_heartbeats_keep_a_hold_past_its_ttl(self):
        beats = []
        with self.client.lock("long", ttl=2, on_event=lambda e, f: beats.append(e)) as l:
            end = time.monotonic() + 4
            while time.monotonic() < end:
                l.check()
                time.sleep(0.05)
        self.assertGreater(beats.count("heartbeat"), 5)
        self.assertEqual(l.cause, "RELEASED")

    def test_release_request_reaches_the_holder(self):
        with self.client.lock("asked") as l:
            r = self.server.baton("unlock", "asked", "--request", "--reason", "deploy")
            self.assertEqual(r.returncode, 0, r.stderr)
            deadline = time.monotonic() + 10
            while l.release_requested is None and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertIsNotNone(l.release_requested)
            self.assertEqual(l.release_requested["reason"], "deploy")
            l.check()

    def test_operator_delete_is_lost_with_its_cause(self):
        with self.client.lock("forced") as l:
            r = self.server.baton("unlock", "forced", "--force", "--even-if-alive", "--reason", "test")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(l.lost.wait(10))
            self.assertEqual(l.cause, "KEY_GONE")
            with self.assertRaises(baton.LockLost):
                l.check()


class UnreachableServerTest(unittest.TestCase):
    """A holder cut off from the server ends the hold by its own clock,
    before the server's lease could expire."""

    def test_frozen_server_the_hold_ends_at_the_clients_deadline(self):
        server = Server()
        try:
            events = []
            mu = threading.Lock()

            def on_event(e, f):
                with mu:
                    events.append((e, f))

            ttl = 3
            beat = threading.Event()
            l = baton.Client(server.url, timeout=1).lock("cutoff", ttl=ttl, on_event=lambda e, f: (on_event(e, f), e == "heartbeat" and beat.set()))
            l.acquire()
            self.assertTrue(beat.wait(10), "no heartbeat")
            server.proc.send_signal(signal.SIGSTOP)
            frozen = time.monotonic()
            self.assertTrue(l.lost.wait(ttl + 2), "no loss while the server is frozen")
            with mu:
                lost = [f for e, f in events if e == "lost"][0]
                last_deadline = max(f["deadline"] for e, f in events if e in ("held", "heartbeat"))
            self.assertEqual(l.cause, baton.CLIENT_DEADLINE)
            # At its own deadline, which lies within a TTL of the freeze:
            # the server's lease cannot have expired before it.
            self.assertEqual(lost["t"], last_deadline)
            self.assertLess(lost["t"], frozen + ttl)
            with self.assertRaises(baton.LockLost):
                l.check()
            server.proc.send_signal(signal.SIGCONT)
            l.release()
        finally:
            server.stop()


class KilledServerTest(unittest.TestCase):
    """The server SIGKILLed with holds open: the holders learn at once
    (their streams break), and etcd lets the keys go with the lease."""

    def test_killed_server_holders_learn_and_nothing_is_left(self):
        etcd = Etcd()
        try:
            server = Server(endpoints=etcd.url)
            ttl = 2
            events = []
            l = baton.Client(server.url).lock("orphan", ttl=ttl, on_event=lambda e, f: events.append((e, f)))
            l.acquire()
            server.proc.kill()
            server.proc.wait()
            killed = time.monotonic()
            self.assertTrue(l.lost.wait(ttl), "no loss after the server died")
            self.assertIn(l.cause, ("STREAM_ENDED", baton.CLIENT_DEADLINE))
            lost = [f for e, f in events if e == "lost"][0]
            l.release()
            server.stop()
            second = Server(endpoints=etcd.url)
            try:
                # The dead server's key goes with its lease, within a TTL.
                with baton.Client(second.url).lock("orphan", ttl=ttl, wait_timeout=ttl + 3) as n:
                    acquired = time.monotonic()
                    self.assertGreater(n.token, l.token)
                    self.assertLess(lost["t"], acquired, "the old holder learned after the next one held")
                    self.assertLess(acquired - killed, ttl + 3)
            finally:
                second.stop()
        finally:
            etcd.stop()


if __name__ == "__main__":
    unittest.main()
