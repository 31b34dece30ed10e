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
 */
import { Code, ConnectError, createClient, type Client as RpcClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
import { BatonService, Cause, LockKind } from "./gen/baton/v1/baton_pb.js";

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

/** One hold of a lock. */
export class Hold {
  token = 0n;
  keys: string[] = [];
  holdId = "";
  /** Why it ended: a Cause's name ("HEARTBEAT_TIMEOUT", ...), CLIENT_DEADLINE, RELEASED. */
  cause?: string;
  releaseRequested?: { reason: string; by: string };
  private readonly lost = new AbortController();
  /** Aborted the moment the hold may be gone; its reason is a LockLost. */
  readonly signal: AbortSignal = this.lost.signal;
  private readonly stream = new AbortController();
  private until = 0;
  private closing = false;
  private intervalMs = 1000;
  private watchTimer?: NodeJS.Timeout;
  private beatTimer?: NodeJS.Timeout;
  private reading?: Promise<void>;

  constructor(private readonly client: Client, private readonly names: string[], private readonly opts: HoldOptions) {}

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
    const o = this.opts;
    const sent = now();
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
      { signal: this.stream.signal },
    );
    const it = responses[Symbol.asyncIterator]();
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
    if (first.done || first.value.event.case !== "held") {
      this.stream.abort();
      throw new ConnectError("the first message is not held", Code.Internal);
    }
    const held = first.value.event.value;
    this.holdId = held.holdId;
    this.token = held.token;
    this.keys = held.keys;
    this.intervalMs = held.heartbeatInterval ? durationMs(held.heartbeatInterval) : 1000;
    // From the Hold request's send time: before its arrival.
    this.until = sent + (held.validity ? durationMs(held.validity) : 0);
    this.emit("held", { token: this.token.toString(), deadline: this.until });
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
        await this.client.rpc.release({ holdId: this.holdId }, { timeoutMs: this.client.timeoutMs });
      } catch {
        // lost meanwhile, or unreachable: closing the stream releases it
      }
    }
    this.stream.abort();
    await this.reading;
    if (this.cause === undefined) {
      this.cause = "RELEASED";
      this.emit("released", {});
    }
  }

  private emit(event: string, fields: Record<string, unknown>): void {
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

  private async read(it: AsyncIterator<import("./gen/baton/v1/baton_pb.js").HoldResponse>): Promise<void> {
    try {
      for (;;) {
        const r = await it.next();
        if (r.done) {
          if (!this.closing) this.lose("STREAM_ENDED", "the server ended the stream");
          return;
        }
        const ev = r.value.event;
        switch (ev.case) {
          case "lost":
            this.lose(Cause[ev.value.cause], ev.value.message);
            break;
          case "releaseRequested":
            this.releaseRequested = { reason: ev.value.reason, by: ev.value.by };
            this.emit("release_requested", { reason: ev.value.reason, by: ev.value.by });
            break;
          case "released":
            return;
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
      const d = sent + (r.validity ? durationMs(r.validity) : 0);
      if (d > this.until) {
        this.until = d;
        this.arm();
      }
      this.emit("heartbeat", { deadline: d });
    } catch (e) {
      const err = ConnectError.from(e);
      if ([Code.NotFound, Code.FailedPrecondition, Code.PermissionDenied].includes(err.code)) {
        this.lose("HEARTBEAT_REFUSED", err.rawMessage);
        return;
      }
      // unreachable: the deadline decides
    }
    if (this.cause === undefined && !this.closing) {
      this.beatTimer = setTimeout(() => void this.beat(), this.intervalMs);
    }
  }
}
