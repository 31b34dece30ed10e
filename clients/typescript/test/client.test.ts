// The TypeScript client against real `baton serve --dev` child processes.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client, Code, ConnectError, LockLost, NotAcquired, ShardLost, StaleToken, CLIENT_DEADLINE, now, type Shard } from "../src/index.js";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { Etcd, Events, Holder, Proxy, Server, batonBin, etcdGet, etcdKeys, sleep, waitFor, type Rec } from "./support.js";

const execFileP = promisify(execFile);

describe("client", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    await server.stop();
  });

  for (const protocol of ["connect", "grpc"] as const) {
    test(`holds and releases over ${protocol}, the next token greater`, async () => {
      const c = new Client(server.url, { protocol, httpVersion: protocol === "grpc" ? "2" : "1.1" });
      const name = `ts-${protocol}`;
      const first = await c.withLock(name, async (l) => {
        assert.ok(l.token > 0n);
        assert.match(l.key!, new RegExp(`/v1/lock/${name}/`));
        l.check();
        const r = await c.rpc.inspect({ target: { case: "locksPrefix", value: name } });
        assert.equal(r.locks.length, 1);
        assert.equal(r.locks[0].holder?.token, l.token);
        return l.token;
      }, { ttlSeconds: 5, identity: "ts-1" });
      const second = await c.lock(name);
      assert.ok(second.token > first);
      await second.release();
      assert.equal(second.cause, "RELEASED");
      assert.equal((await c.rpc.inspect({ target: { case: "locksPrefix", value: name } })).locks.length, 0);
    });
  }

  test("a try on a held lock and a wait_timeout are NotAcquired", async () => {
    const c = new Client(server.url);
    await c.withLock("ts-busy", async () => {
      await assert.rejects(c.lock("ts-busy", { try: true }), (e: unknown) => e instanceof NotAcquired && e.code === Code.Aborted);
      await assert.rejects(c.lock("ts-busy", { waitTimeoutSeconds: 0.2 }), (e: unknown) => e instanceof NotAcquired && e.code === Code.DeadlineExceeded);
    });
  });

  test("leads, transfers to a named candidate and resigns", async () => {
    const c = new Client(server.url);
    const a = await c.lead("ts-elect", { identity: "ts-a", ttlSeconds: 5 });
    assert.ok(a.token > 0n);
    assert.match(a.key!, /\/v1\/election\/ts-elect\//);
    a.check();
    const leadingB = c.lead("ts-elect", { identity: "ts-b" });
    let token = 0n;
    await waitFor(async () => {
      try {
        token = await a.transfer("ts-b");
        return true;
      } catch (e) {
        if (!(e instanceof ConnectError) || e.code !== Code.NotFound) throw e;
        a.check(); // a refused transfer leaves the term as it was
        return false;
      }
    }, "ts-b to be a candidate");
    const b = await leadingB;
    assert.equal(b.token, token);
    assert.ok(b.token > a.token);
    assert.equal(a.cause, "RELEASED");
    assert.equal(a.signal.aborted, false);
    await assert.rejects(b.transfer("ts-nobody"), (e: unknown) => e instanceof ConnectError && e.code === Code.NotFound);
    const leadingC = c.lead("ts-elect", { identity: "ts-c" });
    await b.resign();
    const t = await leadingC;
    assert.ok(t.token > b.token);
    t.check();
    await t.resign();
    assert.equal(t.cause, "RELEASED");
    await assert.rejects(c.lead("ts-elect", { version: "v 1" }), (e: unknown) => e instanceof ConnectError && e.code === Code.InvalidArgument && e.rawMessage.startsWith("version:"));
  });

  test("an invalid field is InvalidArgument naming it", async () => {
    const c = new Client(server.url);
    await assert.rejects(c.lock("ts-bad", { ttlSeconds: 1 }), (e: unknown) => e instanceof ConnectError && e.code === Code.InvalidArgument && e.rawMessage.startsWith("ttl:"));
  });

  test("heartbeats keep a hold past its TTL", async () => {
    const c = new Client(server.url);
    let beats = 0;
    await c.withLock("ts-long", async (l) => {
      const end = Date.now() + 4000;
      while (Date.now() < end) {
        l.check();
        await sleep(50);
      }
    }, { ttlSeconds: 2, onEvent: (e) => void (e === "heartbeat" && beats++) });
    assert.ok(beats > 5, `${beats} heartbeats`);
  });

  test("an operator's force-unlock aborts the signal with KEY_GONE", async () => {
    const c = new Client(server.url);
    const l = await c.lock("ts-forced");
    // Asynchronously: the client's heartbeats and its stream run meanwhile.
    await execFileP(batonBin(), ["--endpoints", server.etcd, "unlock", "ts-forced", "--force", "--even-if-alive", "--reason", "test"]);
    await waitFor(() => l.signal.aborted, "the loss");
    assert.equal(l.cause, "KEY_GONE");
    assert.throws(() => l.check(), LockLost);
    await l.release();
  });
});


/** Whether a ConnectError of code whose message names field first. */
const refused = (code: Code, field: string) => (e: unknown) =>
  e instanceof ConnectError && e.code === code && e.rawMessage.startsWith(field + ":");

/** The shards an Events' member owns now: owned and not since moved or lost (by token). */
function owning(ev: Events): Map<number, bigint> {
  const m = new Map<number, bigint>();
  for (const r of ev.list) {
    if (r.event === "owned") m.set(r.shard!, BigInt(r.token!));
    if ((r.event === "moved" || r.event === "shard_lost") && m.get(r.shard!) === BigInt(r.token!)) m.delete(r.shard!);
  }
  return m;
}

describe("shards and fencing", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    await server.stop();
  });

  test("two members split the shards: a join moves two, drained; a leave hands the rest over; tokens grow", async () => {
    const c = new Client(server.url);
    const ea = new Events();
    const eb = new Events();
    const byA: Shard[] = [];
    const a = await c.shards("ts-ingest", { count: 4, member: "a", ttlSeconds: 10, drainTimeoutSeconds: 60, onEvent: ea.on, onShard: (s) => byA.push(s) });
    assert.equal(a.holdId.length, 32);
    assert.ok(a.deadline() > now());
    await ea.until(() => owning(ea).size === 4, "a to own 4 shards");
    assert.deepEqual([...a.shards.keys()].sort(), [0, 1, 2, 3]);
    const first = new Map([...a.shards].map(([id, s]) => [id, s]));
    for (const s of first.values()) {
      assert.ok(s.token > 0n);
      assert.match(s.key, /\/v1\/shard\/ts-ingest\//);
      s.check();
    }
    assert.equal(byA.length, 4);

    const b = await c.shards("ts-ingest", { count: 4, member: "b", ttlSeconds: 10, drainTimeoutSeconds: 60, onEvent: eb.on });
    await ea.until(() => ea.of("moved").length === 2, "two shards to move from a");
    const moved = ea.of("moved").map((r) => r.shard!).sort();
    assert.deepEqual(moved, [2, 3]);
    for (const id of moved) {
      const s = first.get(id)!;
      assert.equal(s.cause, "MOVED");
      assert.ok(s.signal.aborted && s.signal.reason instanceof ShardLost && s.signal.reason.shard === id);
      assert.throws(() => s.check(), ShardLost);
      assert.ok(s.drainDeadline!.getTime() > Date.now() + 30000, "the drain deadline is the drain timeout's");
      assert.equal(a.shards.has(id), false);
    }
    // Until the drains are acknowledged, a's keys stay and b owns nothing of them.
    const g = await c.rpc.inspect({ target: { case: "shardGroup", value: "ts-ingest" } });
    for (const id of moved) {
      assert.equal(g.shardGroup!.owners.find((o) => o.shard === id)?.token, first.get(id)!.token);
    }
    assert.equal(owning(eb).size, 0);
    for (const id of moved) {
      await first.get(id)!.drained();
      const after = await c.rpc.inspect({ target: { case: "shardGroup", value: "ts-ingest" } });
      assert.notEqual(after.shardGroup!.owners.find((o) => o.shard === id)?.token, first.get(id)!.token, `shard ${id}'s key stayed after drained()`);
    }
    assert.equal(ea.of("drained").length, 2);
    await first.get(2)!.drained(); // acknowledged already: nothing sent
    await assert.rejects(c.rpc.drained({ holdId: a.holdId, shard: 2 }), refused(Code.FailedPrecondition, "shard"));
    await assert.rejects(c.rpc.drained({ holdId: a.holdId, shard: 4 }), refused(Code.InvalidArgument, "shard"));
    await eb.until(() => owning(eb).size === 2, "b to own the moved shards");
    for (const id of moved) {
      assert.ok(b.shards.get(id)!.token > first.get(id)!.token, `shard ${id}'s token grew`);
    }
    const both = await c.rpc.inspect({ target: { case: "shardGroup", value: "ts-ingest" } });
    assert.deepEqual(both.shardGroup!.members, ["a", "b"]);
    assert.equal(both.shardGroup!.owners.length, 4);
    for (const o of both.shardGroup!.owners) {
      const s = (o.shard < 2 ? a : b).shards.get(o.shard)!;
      assert.equal(o.member, o.shard < 2 ? "a" : "b");
      assert.equal(o.token, s.token);
    }

    // a leaves: its shards end (RELEASED) and go to b, with greater tokens.
    const kept = [first.get(0)!, first.get(1)!];
    await a.leave();
    assert.equal(a.cause, "RELEASED");
    assert.equal(a.signal.aborted, false);
    for (const s of kept) {
      assert.equal(s.cause, "RELEASED");
      assert.ok(s.signal.aborted);
      assert.throws(() => s.check(), ShardLost);
    }
    assert.equal(a.shards.size, 0);
    await eb.until(() => owning(eb).size === 4, "b to own every shard");
    for (const s of kept) {
      assert.ok(b.shards.get(s.id)!.token > s.token, `shard ${s.id}'s token grew`);
    }
    await b.leave();
    assert.equal(b.cause, "RELEASED");
    assert.deepEqual(eb.of("shard_lost").map((r) => r.cause), ["RELEASED", "RELEASED", "RELEASED", "RELEASED"]);
    const none = await c.rpc.inspect({ target: { case: "shardGroup", value: "ts-ingest" } });
    assert.equal(none.shardGroup!.owners.length, 0);
    assert.equal(none.shardGroup!.members.length, 0);
    assert.deepEqual(await etcdKeys(server.etcd, "/baton/v1/shard/ts-ingest/"), []);
  });

  test("heartbeats keep a membership past its TTL", async () => {
    const c = new Client(server.url);
    const ev = new Events();
    const m = await c.shards("ts-long", { count: 2, member: "a", ttlSeconds: 2, onEvent: ev.on });
    await ev.until(() => owning(ev).size === 2, "a to own 2 shards");
    const shards = [...m.shards.values()];
    const end = Date.now() + 4000;
    while (Date.now() < end) {
      for (const s of shards) s.check();
      await sleep(50);
    }
    assert.ok(ev.of("heartbeat").length > 5, `${ev.of("heartbeat").length} heartbeats`);
    await m.leave();
  });

  test("invalid fields are refused naming the field", async () => {
    const c = new Client(server.url);
    const ok = { count: 2, member: "m" };
    await assert.rejects(c.shards("", ok), refused(Code.InvalidArgument, "group"));
    await assert.rejects(c.shards("ts-bad", { ...ok, count: 0 }), refused(Code.InvalidArgument, "count"));
    await assert.rejects(c.shards("ts-bad", { ...ok, member: "" }), refused(Code.InvalidArgument, "member"));
    await assert.rejects(c.shards("ts-bad", { ...ok, ttlSeconds: 1 }), refused(Code.InvalidArgument, "ttl"));
    await assert.rejects(c.shards("ts-bad", { ...ok, drainTimeoutSeconds: 7200 }), refused(Code.InvalidArgument, "drain_timeout"));
    await assert.rejects(c.shards("ts-bad", { ...ok, identity: "a\x1b" }), refused(Code.InvalidArgument, "identity"));
    const ev = new Events();
    const m = await c.shards("ts-bad", { ...ok, onEvent: ev.on });
    await assert.rejects(c.shards("ts-bad", { ...ok, count: 3, member: "n" }), refused(Code.FailedPrecondition, "count"));
    await assert.rejects(c.shards("ts-bad", ok), refused(Code.AlreadyExists, "member"));
    await ev.until(() => owning(ev).size === 2, "m to own 2 shards");
    // A membership's write names its shard; a key outside the data prefix is refused.
    await assert.rejects(c.fencedWrite("ts-r", m, { puts: { "/baton/v1/data/x": "v" } }), refused(Code.InvalidArgument, "write.shard"));
    await assert.rejects(c.fencedWrite("ts-r", m.shards.get(0)!, { puts: [["/baton/v1/data/ok", "v"], ["/baton/v1/lock/x", "v"]] }), refused(Code.PermissionDenied, "write.puts[1].key"));
    await assert.rejects(c.fencedWrite("ts-r", m.shards.get(0)!, {}), refused(Code.InvalidArgument, "write"));
    await assert.rejects(c.checkToken("ts-r", 0), refused(Code.InvalidArgument, "check_token"));
    await assert.rejects(c.checkToken("", 1), refused(Code.InvalidArgument, "resource"));
    assert.equal(await etcdGet(server.etcd, "/baton/v1/data/ok"), undefined);
    await m.leave();
  });

  test("a stale token is refused with the mark", async () => {
    const c = new Client(server.url);
    assert.equal(await c.checkToken("ts-db", 5n), 5n);
    assert.equal(await c.checkToken("ts-db", 5), 5n);
    await assert.rejects(c.checkToken("ts-db", 3), (e: unknown) => e instanceof StaleToken && e.highest === 5n);
    assert.equal(await c.checkToken("ts-db", 7), 7n);
    assert.equal(await etcdGet(server.etcd, "/baton/v1/fence/ts-db"), "7");
  });

  test("a write under a hold in the data prefix; stale once a higher token is admitted; none once released", async () => {
    const c = new Client(server.url);
    const data = "/baton/v1/data/";
    const l = await c.lock("ts-invoice");
    assert.equal(await c.fencedWrite("ts-invoices", l, { puts: { [data + "invoice/42"]: "paid" } }), l.token);
    assert.equal(await etcdGet(server.etcd, data + "invoice/42"), "paid");
    assert.equal(await c.fencedWrite("ts-invoices", l, { puts: { [data + "invoice/43"]: new TextEncoder().encode("due") }, deletes: [data + "invoice/42"] }), l.token);
    assert.equal(await etcdGet(server.etcd, data + "invoice/42"), undefined);
    assert.equal(await etcdGet(server.etcd, data + "invoice/43"), "due");
    await c.checkToken("ts-invoices", l.token + 100n);
    await assert.rejects(c.fencedWrite("ts-invoices", l, { puts: { [data + "late"]: "v" } }), (e: unknown) => e instanceof StaleToken && e.highest === l.token + 100n);
    assert.equal(await etcdGet(server.etcd, data + "late"), undefined);
    await l.release();
    // Refused: the hold is lost (FailedPrecondition) while the server ends its stream, unknown (NotFound) after.
    await assert.rejects(c.fencedWrite("ts-other", l, { puts: { [data + "after"]: "v" } }), (e: unknown) =>
      refused(Code.NotFound, "write.hold_id")(e) || (e instanceof ConnectError && e.code === Code.FailedPrecondition && e.rawMessage.startsWith("the hold is lost")));
    assert.equal(await etcdGet(server.etcd, data + "after"), undefined);

    // A shard's write is guarded by its own token.
    const ev = new Events();
    const m = await c.shards("ts-fenced", { count: 1, member: "w", onEvent: ev.on });
    await ev.until(() => owning(ev).size === 1, "w to own its shard");
    const s = m.shards.get(0)!;
    assert.equal(await c.fencedWrite("ts-shard-res", s, { puts: { [data + "shard/0"]: "x" } }), s.token);
    assert.equal(await etcdGet(server.etcd, data + "shard/0"), "x");
    await m.leave();
  });
});

/** The last deadline an Events' hold or membership was given (its first message's and each heartbeat's). */
const lastDeadline = (ev: Events) => Math.max(...ev.list.filter((r) => ["held", "joined", "heartbeat"].includes(r.event)).map((r) => r.deadline!));

describe("an unreachable server", () => {
  // Each test runs baton serve on an etcd of its own process: the server
  // is frozen or killed, etcd goes on.
  test("frozen (SIGSTOP) with a hold and a membership open: both end at their own deadline, within a TTL of the freeze, and etcd lets the keys go", async () => {
    const etcd = await Etcd.start();
    const server = await Server.start(etcd.url);
    try {
      const ttl = 3;
      const c = new Client(server.url, { timeoutMs: 1000 });
      const el = new Events();
      const em = new Events();
      const l = await c.lock("ts-frozen-server", { ttlSeconds: ttl, onEvent: el.on });
      const m = await c.shards("ts-frozen-group", { count: 2, member: "a", ttlSeconds: ttl, onEvent: em.on });
      await em.until(() => owning(em).size === 2, "a to own 2 shards");
      const shards = [...m.shards.values()];
      await el.until(() => el.of("heartbeat").length > 0, "the hold's heartbeat");
      await em.until(() => em.of("heartbeat").length > 0, "the membership's heartbeat");
      server.proc.kill("SIGSTOP");
      const frozen = now();
      await el.until(() => el.of("lost").length > 0, "the hold's loss while the server is frozen", (ttl + 2) * 1000);
      await em.until(() => em.of("lost").length > 0, "the membership's loss while the server is frozen", (ttl + 2) * 1000);
      for (const [ev, h] of [[el, l], [em, m]] as const) {
        const lost = ev.of("lost")[0];
        assert.equal(h.cause, CLIENT_DEADLINE);
        assert.equal(lost.cause, CLIENT_DEADLINE);
        // At its own deadline, which lies within a TTL of the freeze: the
        // server's lease cannot have expired before it.
        assert.equal(lost.t, lastDeadline(ev));
        assert.ok(lost.t < frozen + ttl * 1000, `lost ${lost.t - frozen} ms after the freeze`);
        assert.ok(h.signal.aborted);
        assert.throws(() => h.check(), LockLost);
      }
      // Every shard ended with its membership, at the same deadline.
      const lostM = em.of("lost")[0];
      assert.deepEqual(em.of("shard_lost").map((r) => [r.shard, r.cause, r.t]), [[0, CLIENT_DEADLINE, lostM.t], [1, CLIENT_DEADLINE, lostM.t]]);
      for (const s of shards) {
        assert.equal(s.cause, CLIENT_DEADLINE);
        assert.throws(() => s.check(), ShardLost);
      }
      assert.equal(m.shards.size, 0);
      // The frozen server renews nothing: its lease expires in etcd, and the keys go with it.
      await waitFor(async () => (await etcdKeys(etcd.url, "/baton/v1/")).length === 0, "etcd to let the keys go", (ttl + 5) * 1000);
      assert.ok(now() - frozen < (ttl + 3) * 1000, `keys left ${now() - frozen} ms after the freeze`);
      server.proc.kill("SIGCONT");
      await l.release();
      await m.leave();
    } finally {
      await server.stop();
      await etcd.stop();
    }
  });

  test("killed (SIGKILL) with a hold and a membership open: both learn at once, etcd lets the keys go, the next server's tokens are greater", async () => {
    const etcd = await Etcd.start();
    const server = await Server.start(etcd.url);
    let second: Server | undefined;
    try {
      const ttl = 2;
      const c = new Client(server.url);
      const el = new Events();
      const em = new Events();
      const l = await c.lock("ts-orphan", { ttlSeconds: ttl, onEvent: el.on });
      const m = await c.shards("ts-orphan-group", { count: 2, member: "a", ttlSeconds: ttl, onEvent: em.on });
      await em.until(() => owning(em).size === 2, "a to own 2 shards");
      const shards = [...m.shards.values()];
      const exited = new Promise((r) => server.proc.once("exit", r));
      server.proc.kill("SIGKILL");
      await exited;
      const killed = now();
      await el.until(() => el.of("lost").length > 0, "the hold's loss after the server died", ttl * 1000);
      await em.until(() => em.of("lost").length > 0, "the membership's loss after the server died", ttl * 1000);
      for (const [ev, h] of [[el, l], [em, m]] as const) {
        const lost = ev.of("lost")[0];
        // At once: the stream broke, before the deadline.
        assert.equal(h.cause, "STREAM_ENDED");
        assert.ok(lost.t < lastDeadline(ev), "learned at the deadline, not at once");
        assert.ok(lost.t - killed < 1000, `learned ${lost.t - killed} ms after the kill`);
      }
      for (const s of shards) assert.equal(s.cause, "STREAM_ENDED");
      await l.release();
      await m.leave();
      // The dead server's keys go with its lease, within a TTL.
      await waitFor(async () => (await etcdKeys(etcd.url, "/baton/v1/")).length === 0, "etcd to let the keys go", (ttl + 5) * 1000);
      assert.ok(now() - killed < (ttl + 3) * 1000, `keys left ${now() - killed} ms after the kill`);
      second = await Server.start(etcd.url);
      const c2 = new Client(second.url);
      const n = await c2.lock("ts-orphan", { try: true });
      assert.ok(n.token > l.token);
      await n.release();
      const e2 = new Events();
      const m2 = await c2.shards("ts-orphan-group", { count: 2, member: "b", onEvent: e2.on });
      await e2.until(() => owning(e2).size === 2, "b to own 2 shards");
      for (const s of shards) assert.ok(m2.shards.get(s.id)!.token > s.token);
      await m2.leave();
    } finally {
      await second?.stop();
      await server.stop();
      await etcd.stop();
    }
  });
});

describe("processes", () => {
  let server: Server;
  const holders: Holder[] = [];
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    for (const h of holders) await h.stop();
    await server.stop();
  });
  const holder = (name: string, ttl: number, seconds = 30) => {
    const h = new Holder(server.url, name, ttl, seconds);
    holders.push(h);
    return h;
  };

  test("a SIGSTOPped holder past its TTL: the next token is greater, and the old one's checks and deadline came before the next held", async () => {
    const ttl = 2;
    const a = holder("ts-frozen", ttl);
    const ha = await a.waitFor("held");
    const b = holder("ts-frozen", ttl);
    await server.waitWaiting(1);
    a.proc.kill("SIGSTOP");
    const hb = await b.waitFor("held");
    await sleep(ttl * 1000); // frozen well past its TTL
    a.proc.kill("SIGCONT");
    await a.waitFor("lost_seen");
    assert.equal(await a.exited, 3);
    assert.ok(BigInt(hb.token!) > BigInt(ha.token!));
    const recs = a.records();
    const checks = recs.filter((r) => r.event === "check_ok").map((r) => r.t);
    assert.ok(checks.length > 0 && Math.max(...checks) < hb.t, "the frozen holder worked after the next one held");
    const deadlines = recs.filter((r) => r.event === "held" || r.event === "heartbeat").map((r) => r.deadline!);
    assert.ok(Math.max(...deadlines) < hb.t, "the frozen holder's deadline was after the next one held");
    const lost = recs.find((r) => r.event === "lost")!;
    if (lost.cause === CLIENT_DEADLINE) assert.ok(lost.t < hb.t);
  });

  test("a SIGKILLed holder is replaced at once with a greater token", async () => {
    const a = holder("ts-killed", 10);
    const ha = await a.waitFor("held");
    const b = holder("ts-killed", 10);
    await server.waitWaiting(1);
    a.proc.kill("SIGKILL");
    await a.exited;
    const hb = await b.waitFor("held");
    assert.ok(BigInt(hb.token!) > BigInt(ha.token!));
    const checks = a.records().filter((r) => r.event === "check_ok").map((r) => r.t);
    assert.ok(Math.max(...checks) < hb.t);
    assert.ok(hb.t - ha.t < 10000, "the stream's end released it, not the TTL");
  });
  test("a holder cut off by a proxy: it ends the hold by its own clock before the next holder holds, with a greater token", async (t) => {
    const ttl = 3;
    const proxy = await Proxy.start(server.url);
    try {
      const a = new Holder(proxy.url, "ts-cutoff", ttl);
      holders.push(a);
      const ha = await a.waitFor("heartbeat"); // held, and a heartbeat through the proxy
      const b = holder("ts-cutoff", ttl);
      await server.waitWaiting(1);
      proxy.cut();
      const hb = await b.waitFor("held");
      await a.waitFor("lost_seen");
      assert.equal(await a.exited, 3);
      const recs = a.records();
      const held = recs.find((r) => r.event === "held")!;
      assert.ok(BigInt(hb.token!) > BigInt(held.token!), "the next token is greater");
      assert.ok(ha.t < proxy.cutAt!);
      const lost = recs.find((r) => r.event === "lost")!;
      assert.equal(lost.cause, CLIENT_DEADLINE, "the cut-off holder ended the hold by its own clock");
      assert.ok(lost.t > proxy.cutAt!);
      assert.ok(lost.t < hb.t, `the cut-off holder's deadline was ${lost.t - hb.t} ms after the next one held`);
      // It saw the loss (its watchdog fired: the event written, the signal aborted) before the next one held.
      assert.ok(lost.written! < hb.t, `the cut-off holder saw its loss ${lost.written! - hb.t} ms after the next one held`);
      const deadlines = recs.filter((r) => r.event === "held" || r.event === "heartbeat").map((r) => r.deadline!);
      assert.equal(Math.max(...deadlines), lost.t);
      const checks = recs.filter((r) => r.event === "check_ok").map((r) => r.t);
      assert.ok(checks.length > 0 && Math.max(...checks) < lost.t, "a check passed after the deadline");
      const seen = recs.find((r) => r.event === "lost_seen")!;
      assert.equal(seen.cause, CLIENT_DEADLINE);
      t.diagnostic(`cut at 0 ms; the cut-off holder's deadline at ${(lost.t - proxy.cutAt!).toFixed(1)} ms, its lost event written at ${(lost.written! - proxy.cutAt!).toFixed(1)} ms, its check failed at ${(seen.t - proxy.cutAt!).toFixed(1)} ms; the next held at ${(hb.t - proxy.cutAt!).toFixed(1)} ms`);
    } finally {
      await proxy.close();
    }
  });
});
