"""Fence (a token's check, a fenced write) against a real `baton serve --dev`."""

import unittest

import baton
from support import ServerTest


class FenceTest(ServerTest):
    def test_check_admits_tokens_and_refuses_a_stale_one_with_the_mark(self):
        self.assertEqual(self.client.fence_check("db", 5), 5)
        self.assertEqual(self.client.fence_check("db", 5), 5)
        with self.assertRaises(baton.Stale) as e:
            self.client.fence_check("db", 3)
        self.assertEqual(e.exception.code, "failed_precondition")
        self.assertEqual(e.exception.highest, 5)
        self.assertEqual(self.client.fence_check("db", 7), 7)
        with self.assertRaises(baton.Stale) as e:
            self.client.fence_check("db", 6)
        self.assertEqual(e.exception.highest, 7)
        self.assertEqual(self.server.etcd_get("/baton/v1/fence/db"), b"7")

    def test_write_under_a_hold_in_the_data_prefix(self):
        with self.client.lock("invoice") as l:
            data = l.data_prefix
            self.assertEqual(data, "/baton/v1/data/")
            self.assertEqual(l.fenced_write("invoices", {data + "old": "x"}), l.token)
            hi = self.client.fenced_write("invoices", l, puts={data + "invoice/42": "paid", data + "raw": b"\x00\xff"},
                                          deletes=[data + "old"])
            self.assertEqual(hi, l.token)
            self.assertEqual(self.server.etcd_get(data + "invoice/42"), b"paid")
            self.assertEqual(self.server.etcd_get(data + "raw"), b"\x00\xff")
            self.assertIsNone(self.server.etcd_get(data + "old"))

            # Outside the data prefix: refused naming the key's field, nothing written.
            for key in ("/baton/v1/lock/invoice/x", "/baton/v1/fence/invoices", data, "relative"):
                with self.assertRaises(baton.Error) as e:
                    self.client.fenced_write("invoices", l, puts=[(data + "ok", "v"), (key, "v")])
                self.assertEqual(e.exception.code, "permission_denied")
                self.assertTrue(e.exception.message.startswith("write.puts[1].key:"), e.exception.message)
                with self.assertRaises(baton.Error) as e:
                    self.client.fenced_write("invoices", l, deletes=[key])
                self.assertTrue(e.exception.message.startswith("write.deletes[0]:"), e.exception.message)
            self.assertIsNone(self.server.etcd_get(data + "ok"))

            # A mark above the hold's token: the write is stale, and not applied.
            self.assertEqual(self.client.fence_check("invoices", l.token + 100), l.token + 100)
            with self.assertRaises(baton.Stale) as e:
                l.fenced_write("invoices", {data + "invoice/42": "stale"})
            self.assertEqual(e.exception.highest, l.token + 100)
            self.assertEqual(self.server.etcd_get(data + "invoice/42"), b"paid")
        # The hold ended: refused as lost while the server forgets it, as
        # nobody's after.
        with self.assertRaises(baton.Error) as e:
            self.client.fenced_write("invoices", l, puts={data + "late": "x"})
        self.assertIn(e.exception.code, ("not_found", "failed_precondition"))
        if e.exception.code == "not_found":
            self.assertTrue(e.exception.message.startswith("write.hold_id:"), e.exception.message)
        self.assertIsNone(self.server.etcd_get(data + "late"))

    def test_write_under_a_shard(self):
        with self.client.shards("fenced", 2, "w", ttl=5) as m:
            self.assertTrue(m.wait(lambda owned: len(owned) == 2, 10))
            data = m.data_prefix
            token = m.check(1)
            self.assertEqual(m.fenced_write(1, "shard-1", {data + "s1": "v"}), token)
            self.assertEqual(self.server.etcd_get(data + "s1"), b"v")
            with self.assertRaises(baton.Error) as e:
                self.client.fenced_write("shard-1", m, puts={data + "s1": "w"})
            self.assertEqual(e.exception.code, "invalid_argument")
            self.assertTrue(e.exception.message.startswith("write.shard:"), e.exception.message)

    def test_invalid_fields_are_invalid_argument_naming_the_field(self):
        with self.client.lock("fields") as l:
            for call, field in ((lambda: self.client.fence_check("", 1), "resource"),
                                (lambda: self.client.fence_check("r", 0), "check_token"),
                                (lambda: self.client.fence_check("r", 1, identity="a\x1b"), "identity"),
                                (lambda: self.client.fenced_write("r", "short", puts={"/baton/v1/data/x": "v"}), "write.hold_id"),
                                (lambda: self.client.fenced_write("r", l), "write"),
                                (lambda: self.client.fenced_write("r", l, puts=[("", "v")]), "write.puts[0].key"),
                                (lambda: self.client.fenced_write("r", l, puts={l.data_prefix + "k": "v"}, deletes=[l.data_prefix + "k"]),
                                 "write.deletes[0]"),
                                (lambda: self.client.fenced_write("r", l, puts={l.data_prefix + "k": "v"}, shard=0), "write.shard")):
                with self.assertRaises(baton.Error) as e:
                    call()
                self.assertEqual(e.exception.code, "invalid_argument", field)
                self.assertTrue(e.exception.message.startswith(field + ":"), e.exception.message)


if __name__ == "__main__":
    unittest.main()
