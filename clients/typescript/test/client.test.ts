// The TypeScript client against real `baton serve --dev` child processes.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client, Code, ConnectError, LockLost, NotAcquired, CLIENT_DEADLINE } from "../src/index.js";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { Holder, Server, batonBin, sleep, waitFor } from "./support.js";

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
});
