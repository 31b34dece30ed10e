/**
 * A client of `baton serve` (docs/serve.md) over @connectrpc/connect.
 *
 *     import { Client } from "@batonhq/baton";
 *
 *     const baton = new Client();                       // $BATON_SERVE_URL, else http://127.0.0.1:9379
 *     await baton.withLock("invoice-42", async (l) => {
 *       l.check();                                      // throws LockLost once it may be lost
 *       await db.write(invoice, { fence: l.token });    // the resource refuses lower tokens
 *     }, { ttlSeconds: 10 });
 *
 * While a hold lasts, heartbeats keep it; each reply's validity, added to
 * the heartbeat's send time on this process's monotonic clock, is the
 * hold's deadline here. At that deadline the hold ends on this side
 * (CLIENT_DEADLINE) whether or not the server answers: before the server
 * could let anyone else in. `l.signal` aborts on any loss, with a LockLost
 * as its reason; `l.check()` throws it.
 *
 * `baton.lead(name)` campaigns in an election (a Term); `baton.shards(group,
 * { count, member })` joins a shard group (a Membership, whose Shards each
 * carry a token and a signal), on the same heartbeats and deadline;
 * `baton.checkToken` and `baton.fencedWrite` call Fence.
 */
import { Code, ConnectError, createClient, type Client as RpcClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
import { BatonService, Cause, FenceResponseSchema, LockKind, Strategy } from "./gen/baton/v1/baton_pb.js";
import type { HeartbeatResponse } from "./gen/baton/v1/baton_pb.js";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampDate } from "@bufbuild/protobuf/wkt";

export { Code, ConnectError };

/** The default endpoint. */
export const DEFAULT_URL = "http://127.0.0.1:9379";

/** The end of a hold on this side: its validity ran out on this clock. */
export const CLIENT_DEADLINE = "CLIENT_DEADLINE";

/** Milliseconds on CLOCK_MONOTONIC, which every process of a machine shares. */
export function now(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** The hold may be gone. */
export class LockLost extends Error {
  constructor(readonly why: string, message = "") {
    super(`lock lost: ${why}${message ? ": " + message : ""}`);
    this.name = "LockLost";
  }
}

/** A shard may be gone: moved to another member, lost, or its membership ended. */
export class ShardLost extends LockLost {
  constructor(readonly shard: number, why: string, message = "") {
    super(why, message);
    this.message = `shard ${shard} lost: ${why}${message ? ": " + message : ""}`;
    this.name = "ShardLost";
  }
}

/** A resource's mark is above the token (Code.FailedPrecondition): nothing was admitted or written. */
export class StaleToken extends Error {
  constructor(readonly highest: bigint, message: string) {
    super(message);
    this.name = "StaleToken";
  }
}

/** A try found the lock taken (Code.Aborted), or wait_timeout passed (Code.DeadlineExceeded). */
export class NotAcquired extends Error {
  constructor(readonly code: Code, message: string) {
    super(message);
    this.name = "NotAcquired";
  }
}

export type Kind = "mutex" | "semaphore" | "read" | "write";

const kinds: Record<Kind, LockKind> = {
  mutex: LockKind.MUTEX,
  semaphore: LockKind.SEMAPHORE,
  read: LockKind.READ,
  write: LockKind.WRITE,
};

export interface HoldOptions {
  /** Whole seconds, 2 to the server's cap; default 15. */
  ttlSeconds?: number;
  identity?: string;
  /** Fail at once (NotAcquired) when the lock is taken. */
  try?: boolean;
  waitTimeoutSeconds?: number;
  namespace?: string;
  kind?: Kind;
  /** A semaphore's permits. */
  limit?: number;
  lockDelaySeconds?: number;
  /** Called with each event ("held", "heartbeat", "release_requested", "lost", "released"), `t` on now(). */
  onEvent?: (event: string, fields: Record<string, unknown>) => void;
}

export interface LeadOptions {
  /** Shown as the leader's; default the identity. */
  value?: string;
  /** Whole seconds, 2 to the server's cap; default 15. */
  ttlSeconds?: number;
  identity?: string;
  namespace?: string;
  /** "oldest" (default) or "preferred", which ranks by priority, then version. */
  strategy?: "oldest" | "preferred";
  priority?: number;
  version?: string;
  /** Called with each event ("leading", "heartbeat", "end_requested", "lost", "released"), `t` on now(). */
  onEvent?: (event: string, fields: Record<string, unknown>) => void;
}

export interface ShardsOptions {
  /** The group's number of shards (the first member fixes it). */
  count: number;
  /** This member's name, unique in the group. */
  member: string;
  /** Whole seconds, 2 to the server's cap; default 15. */
  ttlSeconds?: number;
  /** How long a moved shard waits for drained() before the server releases it; default 10. */
  drainTimeoutSeconds?: number;
  /** Default the member's name. */
  identity?: string;
  namespace?: string;
  /** Called with each shard this member comes to own. */
  onShard?: (s: Shard) => void;
  /**
   * Called with each event ("joined", "heartbeat", "owned", "moved",
   * "shard_lost", "drained", "lost", "released"), `t` on now(); a shard's
   * carry `shard` and `token`.
   */
  onEvent?: (event: string, fields: Record<string, unknown>) => void;
}

export interface FenceOptions {
  namespace?: string;
  /** Who checks a token; a write is its hold's identity's. */
  identity?: string;
}

/** A fenced write's puts (key to value, in order) and deletes, every key under the namespace's data prefix. */
export interface FencedOps {
  puts?: Record<string, string | Uint8Array> | [string, string | Uint8Array][];
  deletes?: string[];
}

export interface ClientOptions {
  /** "connect" (HTTP/1.1 or HTTP/2, JSON or binary) or "grpc" (HTTP/2). */
  protocol?: "connect" | "grpc";
  httpVersion?: "1.1" | "2";
  /** Bound of each unary call, in ms; default 5000. */
  timeoutMs?: number;
}

/** A baton serve endpoint. */
export class Client {
  readonly rpc: RpcClient<typeof BatonService>;
  readonly timeoutMs: number;

  constructor(readonly baseUrl: string = process.env.BATON_SERVE_URL || DEFAULT_URL, opts: ClientOptions = {}) {
    this.timeoutMs = opts.timeoutMs ?? 5000;
    let transport: Transport;
    if (opts.protocol === "grpc") {
      transport = createGrpcTransport({ baseUrl });
    } else {
      transport = createConnectTransport({ baseUrl, httpVersion: opts.httpVersion ?? "1.1" });
    }
    this.rpc = createClient(BatonService, transport);
  }

  /** Acquires name (or names, as one set) and returns the Hold. */
  async lock(name: string | string[], opts: HoldOptions = {}): Promise<Hold> {
    const h = new Hold(this, typeof name === "string" ? [name] : name, opts);
    await h.acquire();
    return h;
  }

  /** Campaigns in election name and returns the Term once it leads. */
  async lead(name: string, opts: LeadOptions = {}): Promise<Term> {
    const t = new Term(this, name, opts);
    await t.acquire();
    return t;
  }

  /**
   * Joins shard group `group` as opts.member and resolves once joined:
   * the Membership, whose shards come as they are owned (opts.onShard,
   * m.shards).
   */
  async shards(group: string, opts: ShardsOptions): Promise<Membership> {
    const m = new Membership(this, group, opts);
    await m.acquire();
    return m;
  }

  /**
   * Admits token for resource: resolves to the resource's mark after it,
   * or rejects with StaleToken (and the mark) when a higher token was
   * admitted before.
   */
  async checkToken(resource: string, token: bigint | number, opts: FenceOptions = {}): Promise<bigint> {
    return fenced(this.rpc.fence(
      { resource, namespace: opts.namespace ?? "", identity: opts.identity ?? "", op: { case: "checkToken", value: BigInt(token) } },
      { timeoutMs: this.timeoutMs },
    ));
  }

  /**
   * Writes ops in etcd under `under`'s token (a Hold's, a Term's, or a
   * Shard's), guarded by its ownership and resource's mark, in one
   * transaction: resolves to the mark, or rejects with StaleToken when a
   * higher token was admitted (nothing written), or a ConnectError
   * (Code.FailedPrecondition once the hold is lost, Code.PermissionDenied
   * for a key outside the data prefix).
   */
  async fencedWrite(resource: string, under: Hold | Shard, ops: FencedOps, opts: FenceOptions = {}): Promise<bigint> {
    const enc = new TextEncoder();
    const puts = Array.isArray(ops.puts) ? ops.puts : Object.entries(ops.puts ?? {});
    const write = {
      holdId: under instanceof Shard ? under.membership.holdId : under.holdId,
      shard: under instanceof Shard ? under.id : undefined,
      puts: puts.map(([key, v]) => ({ key, value: typeof v === "string" ? enc.encode(v) : v })),
      deletes: ops.deletes ?? [],
    };
    return fenced(this.rpc.fence(
      { resource, namespace: opts.namespace ?? "", identity: opts.identity ?? "", op: { case: "write", value: write } },
      { timeoutMs: this.timeoutMs },
    ));
  }

  /** Runs fn while holding name, then releases it. */
  async withLock<T>(name: string | string[], fn: (h: Hold) => Promise<T>, opts: HoldOptions = {}): Promise<T> {
    const h = await this.lock(name, opts);
    try {
      return await fn(h);
    } finally {
      await h.release();
    }
  }
}

/** A stream's message, whatever the call: a Hold's or a Lead's. */
type Event =
  | { case: "first"; holdId: string; token: bigint; keys: string[]; heartbeatInterval?: Duration; validity?: Duration }
  | { case: "lost"; cause: Cause; message: string }
  | { case: "releaseRequested"; reason: string; by: string }
  | { case: "endRequested"; reason: string; by: string }
  | { case: "released" }
  | { case: "owned"; shard: number; token: bigint; key: string }
  | { case: "moved"; shard: number; token: bigint; drainDeadline?: Timestamp }
  | { case: "shardLost"; shard: number; token: bigint; cause: Cause }
  | { case: undefined };

/** One hold of a lock. */
export class Hold {
  token = 0n;
  keys: string[] = [];
  holdId = "";
  /** Why it ended: a Cause's name ("HEARTBEAT_TIMEOUT", ...), CLIENT_DEADLINE, RELEASED. */
  cause?: string;
  releaseRequested?: { reason: string; by: string };
  /** A term's request to hand over (a better candidate's, or an operator's). */
  endRequested?: { reason: string; by: string };
  private readonly lost = new AbortController();
  /** Aborted the moment the hold may be gone; its reason is a LockLost. */
  readonly signal: AbortSignal = this.lost.signal;
  protected readonly stream = new AbortController();
  private until = 0;
  protected closing = false;
  private intervalMs = 1000;
  private watchTimer?: NodeJS.Timeout;
  protected beatTimer?: NodeJS.Timeout;
  protected reading?: Promise<void>;
  /** The first message's name, and the call that ends the hold. */
  protected readonly first: string = "held";

  constructor(
    /** The endpoint it is held through. */
    readonly client: Client,
    private readonly names: string[],
    protected readonly opts: HoldOptions | LeadOptions,
  ) {}

  /** Opens the stream. */
  protected async *open(signal: AbortSignal): AsyncGenerator<Event> {
    const o = this.opts as HoldOptions;
    const responses = this.client.rpc.hold(
      {
        names: this.names,
        kind: kinds[o.kind ?? "mutex"],
        limit: o.limit ?? 0,
        identity: o.identity ?? "",
        namespace: o.namespace ?? "",
        try: o.try ?? false,
        ttl: o.ttlSeconds ? durationFromMs(o.ttlSeconds * 1000) : undefined,
        waitTimeout: o.waitTimeoutSeconds ? durationFromMs(o.waitTimeoutSeconds * 1000) : undefined,
        lockDelay: o.lockDelaySeconds ? durationFromMs(o.lockDelaySeconds * 1000) : undefined,
      },
      { signal },
    );
    for await (const r of responses) {
      const ev = r.event;
      switch (ev.case) {
        case "held":
          yield { case: "first", ...ev.value };
          break;
        case "lost":
          yield { case: "lost", cause: ev.value.cause, message: ev.value.message };
          break;
        case "releaseRequested":
          yield { case: "releaseRequested", reason: ev.value.reason, by: ev.value.by };
          break;
        case "released":
          yield { case: "released" };
          break;
        default:
          yield { case: undefined };
      }
    }
  }

  /** Ends the hold on the server: Release. */
  protected async end(): Promise<void> {
    await this.client.rpc.release({ holdId: this.holdId }, { timeoutMs: this.client.timeoutMs });
  }

  get key(): string | undefined {
    return this.keys[0];
  }

  /** The hold's deadline on now(). */
  deadline(): number {
    return this.until;
  }

  /** Throws LockLost if the hold may be gone, on this clock too. */
  check(): void {
    if (this.cause === undefined && now() >= this.until) {
      this.lose(CLIENT_DEADLINE, "the validity ran out on this clock", this.until);
    }
    if (this.cause !== undefined && this.cause !== "RELEASED") {
      throw new LockLost(this.cause);
    }
  }

  async acquire(): Promise<void> {
    const sent = now();
    const it = this.open(this.stream.signal);
    let first;
    try {
      first = await it.next();
    } catch (e) {
      const err = ConnectError.from(e);
      if (err.code === Code.Aborted || err.code === Code.DeadlineExceeded) {
        throw new NotAcquired(err.code, err.rawMessage);
      }
      throw err;
    }
    if (first.done || first.value.case !== "first") {
      this.stream.abort();
      throw new ConnectError(`the first message is not ${this.first}`, Code.Internal);
    }
    const held = first.value;
    this.holdId = held.holdId;
    this.token = held.token;
    this.keys = held.keys;
    this.intervalMs = held.heartbeatInterval ? durationMs(held.heartbeatInterval) : 1000;
    // From the Hold request's send time: before its arrival.
    this.until = sent + (held.validity ? durationMs(held.validity) : 0);
    this.emit(this.first, this.firstFields());
    this.reading = this.read(it);
    this.arm();
    this.beatTimer = setTimeout(() => void this.beat(), 0); // at once: re-bases the deadline
  }

  /** Releases the lock unless lost (a delete guarded by its token). */
  async release(): Promise<void> {
    if (!this.holdId || this.closing) {
      return;
    }
    this.closing = true;
    clearTimeout(this.beatTimer);
    clearTimeout(this.watchTimer);
    if (this.cause === undefined) {
      try {
        await this.end();
      } catch {
        // lost meanwhile, or unreachable: closing the stream releases it
      }
    }
    await this.close();
  }

  /** Ends the stream, once the hold ended on the server or as it ends. */
  protected async close(): Promise<void> {
    this.stream.abort();
    await this.reading;
    if (this.cause === undefined) {
      this.cause = "RELEASED";
      this.emit("released", {});
      this.ended("RELEASED", "", now());
    }
  }

  /** A message of the stream's other kinds (a membership's shards). */
  protected other(_ev: Event): void {}
  /** Takes what a heartbeat's reply says besides its validity, before the validity is taken. */
  protected beatReply(_r: HeartbeatResponse): void {}

  /** The hold ended, with its cause, at `at` on now(). */
  protected ended(_why: string, _message: string, _at: number): void {}

  /** The first message's fields for onEvent. */
  protected firstFields(): Record<string, unknown> {
    return { token: this.token.toString(), deadline: this.until };
  }

  protected emit(event: string, fields: Record<string, unknown>): void {
    this.opts.onEvent?.(event, { t: now(), ...fields });
  }

  private lose(why: string, message = "", at = now()): void {
    if (this.cause !== undefined) {
      return;
    }
    this.cause = why;
    clearTimeout(this.beatTimer);
    clearTimeout(this.watchTimer);
    this.emit("lost", { cause: why, message, t: at });
    this.ended(why, message, at);
    this.lost.abort(new LockLost(why, message));
    if (why === CLIENT_DEADLINE) {
      this.stream.abort(); // the server then releases it
    }
  }

  /** The watchdog: ends the hold at its deadline on this clock. */
  private arm(): void {
    clearTimeout(this.watchTimer);
    if (this.cause !== undefined || this.closing) {
      return;
    }
    const left = this.until - now();
    if (left <= 0) {
      this.lose(CLIENT_DEADLINE, "the validity ran out on this clock", this.until);
      return;
    }
    this.watchTimer = setTimeout(() => this.arm(), left);
  }

  private async read(it: AsyncIterator<Event>): Promise<void> {
    try {
      for (;;) {
        const r = await it.next();
        if (r.done) {
          if (!this.closing) this.lose("STREAM_ENDED", "the server ended the stream");
          return;
        }
        const ev = r.value;
        switch (ev.case) {
          case "lost":
            this.lose(Cause[ev.cause], ev.message);
            break;
          case "releaseRequested":
            this.releaseRequested = { reason: ev.reason, by: ev.by };
            this.emit("release_requested", { reason: ev.reason, by: ev.by });
            break;
          case "endRequested":
            this.endRequested = { reason: ev.reason, by: ev.by };
            this.emit("end_requested", { reason: ev.reason, by: ev.by });
            break;
          case "released":
            return;
          default:
            this.other(ev);
        }
      }
    } catch (e) {
      if (!this.closing) this.lose("STREAM_ENDED", String(e));
    }
  }

  /** Sends a heartbeat, then the next one an interval later. */
  private async beat(): Promise<void> {
    if (this.cause !== undefined || this.closing) {
      return;
    }
    const sent = now();
    try {
      const r = await this.client.rpc.heartbeat(
        { holdId: this.holdId },
        { timeoutMs: Math.min(this.client.timeoutMs, Math.max(this.intervalMs, 200)) },
      );
      this.beatReply(r);
      const d = sent + (r.validity ? durationMs(r.validity) : 0);
      if (d > this.until) {
        this.until = d;
        this.arm();
      }
      this.emit("heartbeat", { deadline: d });
    } catch (e) {
      const err = ConnectError.from(e);
      if ([Code.NotFound, Code.FailedPrecondition, Code.PermissionDenied].includes(err.code)) {
        if (!this.closing) this.lose("HEARTBEAT_REFUSED", err.rawMessage); // not our own release ending it first
        return;
      }
      // unreachable: the deadline decides
    }
    if (this.cause === undefined && !this.closing) {
      this.beatTimer = setTimeout(() => void this.beat(), this.intervalMs);
    }
  }
}

/**
 * One term of an election: a Hold whose lock is leadership. resign() ends
 * it (the next candidate leads); transfer(to) hands it to the candidate
 * named by its key or identity. token, key, signal, cause, check() and the
 * heartbeats are Hold's; endRequested is set when a better candidate or an
 * operator asks this leader to hand over.
 */
export class Term extends Hold {
  protected override readonly first = "leading";

  constructor(client: Client, private readonly name: string, opts: LeadOptions) {
    super(client, [], opts);
  }

  protected override async *open(signal: AbortSignal): AsyncGenerator<Event> {
    const o = this.opts as LeadOptions;
    const responses = this.client.rpc.lead(
      {
        name: this.name,
        value: o.value ?? "",
        identity: o.identity ?? "",
        namespace: o.namespace ?? "",
        strategy: o.strategy === "preferred" ? Strategy.PREFERRED : Strategy.OLDEST,
        priority: o.priority ?? 0,
        version: o.version ?? "",
        ttl: o.ttlSeconds ? durationFromMs(o.ttlSeconds * 1000) : undefined,
      },
      { signal },
    );
    for await (const r of responses) {
      const ev = r.event;
      switch (ev.case) {
        case "leading":
          yield { case: "first", ...ev.value, keys: [ev.value.key] };
          break;
        case "ended":
          yield { case: "lost", cause: ev.value.cause, message: ev.value.message };
          break;
        case "endRequested":
          yield { case: "endRequested", reason: ev.value.reason, by: ev.value.by };
          break;
        case "resigned":
          yield { case: "released" };
          break;
        default:
          yield { case: undefined };
      }
    }
  }

  protected override async end(): Promise<void> {
    await this.client.rpc.resign({ holdId: this.holdId }, { timeoutMs: this.client.timeoutMs });
  }

  /** Ends the term: the next candidate leads (under preferred, the best one). */
  async resign(): Promise<void> {
    await this.release();
  }

  /**
   * Hands the term to the candidate `to` names (its key, or its identity)
   * and returns the leader's token after the hand-over. A refusal throws
   * (Code.NotFound when `to` is no live candidate) and the term goes on.
   */
  async transfer(to: string): Promise<bigint> {
    const r = await this.client.rpc.transfer({ holdId: this.holdId, to }, { timeoutMs: this.client.timeoutMs });
    this.closing = true;
    clearTimeout(this.beatTimer);
    await this.close();
    return r.token;
  }
}

/** A Fence call's mark, or StaleToken with the mark the refusal carries. */
async function fenced(call: Promise<{ highest: bigint }>): Promise<bigint> {
  try {
    return (await call).highest;
  } catch (e) {
    const err = ConnectError.from(e);
    const mark = err.code === Code.FailedPrecondition ? err.findDetails(FenceResponseSchema)[0] : undefined;
    if (mark) throw new StaleToken(mark.highest, err.rawMessage);
    throw err;
  }
}

/**
 * One shard a member owns: its token (strictly greater than every
 * earlier owner's of the shard) and key. Its signal aborts, with a
 * ShardLost as its reason, the moment the shard may be gone: moved to
 * another member (cause "MOVED": stop, then acknowledge with drained()),
 * lost (a Cause's name), or its membership ended (the membership's cause,
 * CLIENT_DEADLINE at the membership's deadline on this clock, RELEASED
 * after leave()). check() throws it.
 */
export class Shard {
  cause?: string;
  /** Set on a move: when the server releases the shard without drained(). */
  drainDeadline?: Date;
  private readonly over = new AbortController();
  readonly signal: AbortSignal = this.over.signal;
  private acked = false;

  constructor(readonly membership: Membership, readonly id: number, readonly token: bigint, readonly key: string) {}

  /** The membership's deadline on now(): the shards end there. */
  deadline(): number {
    return this.membership.deadline();
  }

  /** Throws ShardLost unless the shard is still owned, on this clock too. */
  check(): void {
    if (this.cause === undefined) {
      try {
        this.membership.check();
      } catch {
        // the membership ended: end() set the cause
      }
    }
    if (this.cause !== undefined) {
      throw this.signal.reason as ShardLost;
    }
  }

  /**
   * Acknowledges a move once the work on the shard stopped: the server
   * releases the shard (the next owner takes it, with a greater token)
   * and the call resolves once its key is gone. Nothing to do, and
   * nothing done, unless the shard moved.
   */
  async drained(): Promise<void> {
    if (this.cause !== "MOVED" || this.acked) {
      return;
    }
    this.acked = true;
    const c = this.membership.client;
    await c.rpc.drained({ holdId: this.membership.holdId, shard: this.id }, { timeoutMs: c.timeoutMs });
    this.membership.note("drained", { shard: this.id, token: this.token.toString() });
  }

  /** @internal */
  end(why: string, message: string): boolean {
    if (this.cause !== undefined) {
      return false;
    }
    this.cause = why;
    this.over.abort(new ShardLost(this.id, why, message));
    return true;
  }
}

/**
 * A member of a shard group: a Hold whose stream says which shards it
 * owns. Heartbeats and the deadline on this clock are Hold's: at the
 * deadline every shard ends (CLIENT_DEADLINE) whether or not the server
 * answers. signal, cause and check() are the membership's; each Shard has
 * its own. leave() ends the membership: its shards go to the others.
 */
export class Membership extends Hold {
  protected override readonly first = "joined";
  /** The shards owned now, by id (a moved or lost one leaves it). */
  readonly shards = new Map<number, Shard>();

  constructor(client: Client, readonly group: string, opts: ShardsOptions) {
    super(client, [], opts);
  }

  protected override async *open(signal: AbortSignal): AsyncGenerator<Event> {
    const o = this.opts as ShardsOptions;
    const responses = this.client.rpc.shards(
      {
        group: this.group,
        count: o.count,
        member: o.member,
        identity: o.identity ?? "",
        namespace: o.namespace ?? "",
        ttl: o.ttlSeconds ? durationFromMs(o.ttlSeconds * 1000) : undefined,
        drainTimeout: o.drainTimeoutSeconds ? durationFromMs(o.drainTimeoutSeconds * 1000) : undefined,
      },
      { signal },
    );
    for await (const r of responses) {
      const ev = r.event;
      switch (ev.case) {
        case "joined":
          yield { case: "first", holdId: ev.value.holdId, token: 0n, keys: [], heartbeatInterval: ev.value.heartbeatInterval, validity: ev.value.validity };
          break;
        case "owned":
          yield { case: "owned", shard: ev.value.shard, token: ev.value.token, key: ev.value.key };
          break;
        case "moved":
          yield { case: "moved", shard: ev.value.shard, token: ev.value.token, drainDeadline: ev.value.drainDeadline };
          break;
        case "lost":
          yield { case: "shardLost", shard: ev.value.shard, token: ev.value.token, cause: ev.value.cause };
          break;
        case "ended":
          if (ev.value.cause === Cause.RELEASED) {
            yield { case: "released" }; // after leave()
          } else {
            yield { case: "lost", cause: ev.value.cause, message: ev.value.message };
          }
          break;
        default:
          yield { case: undefined };
      }
    }
  }

  protected override firstFields(): Record<string, unknown> {
    return { hold_id: this.holdId, deadline: this.deadline() };
  }

  protected override other(ev: Event): void {
    if (this.cause !== undefined) {
      return;
    }
    switch (ev.case) {
      case "owned": {
        const s = new Shard(this, ev.shard, ev.token, ev.key);
        this.shards.get(ev.shard)?.end("MOVED", "owned again");
        this.shards.set(ev.shard, s);
        this.emit("owned", { shard: s.id, token: s.token.toString(), key: s.key });
        (this.opts as ShardsOptions).onShard?.(s);
        break;
      }
      case "moved": {
        const s = this.shards.get(ev.shard);
        if (!s || s.token !== ev.token) break;
        this.shards.delete(ev.shard);
        s.drainDeadline = ev.drainDeadline ? timestampDate(ev.drainDeadline) : undefined;
        s.end("MOVED", "the shard moves to another member: stop, then drained()");
        this.emit("moved", { shard: s.id, token: s.token.toString(), drain_deadline: s.drainDeadline?.toISOString() });
        break;
      }
      case "shardLost": {
        const s = this.shards.get(ev.shard);
        if (!s || s.token !== ev.token) break;
        this.shards.delete(ev.shard);
        this.endShard(s, Cause[ev.cause], "", now());
        break;
      }
    }
  }

  /** A reply names the shards sent lost: each still owned with that token ends first. */
  protected override beatReply(r: HeartbeatResponse): void {
    if (this.cause !== undefined) {
      return;
    }
    for (const l of r.lost) {
      const s = this.shards.get(l.shard);
      if (!s || s.token !== l.token) continue;
      this.shards.delete(l.shard);
      this.endShard(s, Cause[l.cause], "", now());
    }
  }

  protected override ended(why: string, message: string, at: number): void {
    for (const s of [...this.shards.values()].sort((a, b) => a.id - b.id)) {
      this.endShard(s, why, message, at);
    }
    this.shards.clear();
  }

  private endShard(s: Shard, why: string, message: string, at: number): void {
    if (s.end(why, message)) {
      this.emit("shard_lost", { shard: s.id, token: s.token.toString(), cause: why, t: at });
    }
  }

  /** @internal */
  note(event: string, fields: Record<string, unknown>): void {
    this.emit(event, fields);
  }

  /** Leaves the group: Release; every shard ends (RELEASED) and goes to the other members. */
  async leave(): Promise<void> {
    await this.release();
  }
}
