// A real `baton serve --dev` child process for the tests, and holder
// processes whose records the tests judge.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createServer, connect, type Server as NetServer, type Socket } from "node:net";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { now } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test
export const root = join(here, "..", "..");
const repo = join(root, "..", "..");

let built: string | undefined;

/** $BATON_BIN, else baton built once from this checkout. */
export function batonBin(): string {
  if (process.env.BATON_BIN) return process.env.BATON_BIN;
  if (!built) {
    const out = join(mkdtempSync(join(tmpdir(), "baton-tstest-")), "baton");
    const r = spawnSync("go", ["-C", join(repo, "cmd", "baton"), "build", "-o", out, "."], { stdio: "inherit", env: { ...process.env, GOWORK: "off" } });
    if (r.status !== 0) throw new Error("go build failed");
    built = out;
  }
  return built;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits for cond, polling (a state with no event to wait on), at most ms. */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, ms = 30000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A free port on 127.0.0.1 (for baton dev, which takes no port 0). */
async function freeAddr(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return `127.0.0.1:${port}`;
}

/** baton dev: an etcd in a process of its own, for a server to be frozen or killed without it. */
export class Etcd {
  url = "";
  private out = "";
  private constructor(readonly proc: ChildProcess) {
    this.proc.stdout!.on("data", (b) => (this.out += b));
    this.proc.stderr!.on("data", (b) => (this.out += b));
  }

  static async start(): Promise<Etcd> {
    const e = new Etcd(spawn(batonBin(), ["dev", "--listen", await freeAddr(), "--listen-peer", await freeAddr()], { stdio: ["ignore", "pipe", "pipe"] }));
    await waitFor(() => /etcd serving at (http:\/\/\S+)/.test(e.out) || e.proc.exitCode !== null, "baton dev to start", 60000);
    const m = /etcd serving at (http:\/\/\S+)/.exec(e.out);
    if (!m) throw new Error(`baton dev did not start: ${e.out}`);
    e.url = m[1];
    return e;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    const done = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    await done;
  }
}

/** The keys under prefix in the etcd at url, read through etcd's own JSON gateway (/v3/kv/range). */
export async function etcdKeys(url: string, prefix: string): Promise<string[]> {
  const b64 = (s: Buffer) => s.toString("base64");
  const key = Buffer.from(prefix);
  const end = Buffer.from(key);
  end[end.length - 1]++;
  const r = await fetch(url + "/v3/kv/range", { method: "POST", body: JSON.stringify({ key: b64(key), range_end: b64(end), keys_only: true }), signal: AbortSignal.timeout(5000) });
  if (!r.ok) throw new Error(`etcd range: ${r.status} ${await r.text()}`);
  const body = (await r.json()) as { kvs?: { key: string }[] };
  return (body.kvs ?? []).map((kv) => Buffer.from(kv.key, "base64").toString());
}

/** The value of key in the etcd at url, undefined when absent. */
export async function etcdGet(url: string, key: string): Promise<string | undefined> {
  const r = await fetch(url + "/v3/kv/range", { method: "POST", body: JSON.stringify({ key: Buffer.from(key).toString("base64") }), signal: AbortSignal.timeout(5000) });
  if (!r.ok) throw new Error(`etcd range: ${r.status} ${await r.text()}`);
  const body = (await r.json()) as { kvs?: { value?: string }[] };
  return body.kvs?.length ? Buffer.from(body.kvs[0].value ?? "", "base64").toString() : undefined;
}

export class Server {
  proc: ChildProcess;
  url = "";
  etcd = "";
  private out = "";

  private constructor(endpoints?: string) {
    const argv = endpoints ? ["--endpoints", endpoints, "serve"] : ["serve", "--dev"];
    this.proc = spawn(batonBin(), [...argv, "--listen", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "pipe"] });
    this.etcd = endpoints ?? "";
    this.proc.stdout!.on("data", (b) => (this.out += b));
    this.proc.stderr!.on("data", (b) => (this.out += b));
  }

  /** baton serve --dev (an embedded etcd), or on the etcd at endpoints. */
  static async start(endpoints?: string): Promise<Server> {
    const s = new Server(endpoints);
    await waitFor(() => /serving on (http:\/\/\S+)/.test(s.out) || s.proc.exitCode !== null, "baton serve to start", 60000);
    const m = /serving on (http:\/\/\S+)/.exec(s.out);
    if (!m) throw new Error(`baton serve did not start: ${s.out}`);
    s.url = m[1];
    if (!endpoints) s.etcd = /etcd .* at (http:\/\/\S+)/.exec(s.out)![1];
    return s;
  }

  /** Waits until n Hold streams wait in the server. */
  async waitWaiting(n: number): Promise<void> {
    await waitFor(async () => (await (await fetch(this.url + "/metrics")).text()).includes(`baton_serve_holds{state="waiting"} ${n}`), `${n} waiting`);
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const done = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGTERM");
    await done;
  }
}

export interface Rec {
  event: string;
  t: number;
  /** When the record was written, on now(); t is the event's own time (a loss's: its deadline). */
  written?: number;
  shard?: number;
  token?: string;
  deadline?: number;
  cause?: string;
}

/** A holder process (holder.js) writing its records to a file. */
export class Holder {
  proc: ChildProcess;
  path: string;
  exited: Promise<number | null>;

  constructor(url: string, name: string, ttl: number, seconds = 30) {
    this.path = join(mkdtempSync(join(tmpdir(), "baton-holder-")), "records.jsonl");
    this.proc = spawn(process.execPath, [join(here, "holder.js"), url, name, String(ttl), this.path, String(seconds)], { stdio: "inherit" });
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }

  records(): Rec[] {
    if (!existsSync(this.path)) return [];
    return readFileSync(this.path, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  }

  first(event: string): Rec | undefined {
    return this.records().find((r) => r.event === event);
  }

  async waitFor(event: string): Promise<Rec> {
    await waitFor(() => this.first(event) !== undefined, `a ${event} record`);
    return this.first(event)!;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGKILL");
    await this.exited;
  }
}

/**
 * A client's events (an onEvent), in order, that a test waits on:
 * until(cond) resolves at the first event after which cond holds.
 */
export class Events {
  readonly list: Rec[] = [];
  private readonly waiters = new Set<() => void>();

  readonly on = (event: string, fields: Record<string, unknown>): void => {
    this.list.push({ event, ...fields } as Rec);
    for (const w of [...this.waiters]) w();
  };

  of(event: string): Rec[] {
    return this.list.filter((r) => r.event === event);
  }

  async until(cond: (list: Rec[]) => boolean, what: string, ms = 30000): Promise<void> {
    if (cond(this.list)) return;
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!cond(this.list)) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`timed out waiting for ${what}`));
      }, ms);
      this.waiters.add(check);
    });
  }
}

/**
 * A TCP proxy on 127.0.0.1 to the server at target (host:port): cut()
 * stops forwarding both ways, on every connection and every new one:
 * no byte, no end and no reset passes, and no socket is closed, so that
 * each side sees silence; close() ends it all.
 */
export class Proxy {
  url = "";
  cutAt?: number;
  private readonly sockets = new Set<Socket>();
  private readonly srv: NetServer;

  private constructor(private readonly target: URL) {
    this.srv = createServer((down) => {
      const up = connect(Number(this.target.port), this.target.hostname);
      for (const [from, to] of [[down, up], [up, down]] as const) {
        this.sockets.add(from);
        from.on("data", (b) => {
          if (this.cutAt === undefined) to.write(b);
        });
        from.on("end", () => {
          if (this.cutAt === undefined) to.end();
        });
        from.on("error", () => {
          if (this.cutAt === undefined) to.destroy();
        });
        from.on("close", () => this.sockets.delete(from));
      }
    });
  }

  static async start(target: string): Promise<Proxy> {
    const p = new Proxy(new URL(target));
    await new Promise<void>((r) => p.srv.listen(0, "127.0.0.1", r));
    p.url = `http://127.0.0.1:${(p.srv.address() as { port: number }).port}`;
    return p;
  }

  cut(): void {
    this.cutAt = now();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.srv.close(r));
  }
}
