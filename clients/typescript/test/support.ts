// A real `baton serve --dev` child process for the tests, and holder
// processes whose records the tests judge.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

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

export class Server {
  proc: ChildProcess;
  url = "";
  etcd = "";
  private out = "";

  private constructor() {
    this.proc = spawn(batonBin(), ["serve", "--dev", "--listen", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "pipe"] });
    this.proc.stdout!.on("data", (b) => (this.out += b));
    this.proc.stderr!.on("data", (b) => (this.out += b));
  }

  static async start(): Promise<Server> {
    const s = new Server();
    await waitFor(() => /serving on (http:\/\/\S+)/.test(s.out) || s.proc.exitCode !== null, "baton serve to start", 60000);
    const m = /serving on (http:\/\/\S+)/.exec(s.out);
    if (!m) throw new Error(`baton serve did not start: ${s.out}`);
    s.url = m[1];
    s.etcd = /etcd .* at (http:\/\/\S+)/.exec(s.out)![1];
    return s;
  }

  /** Waits until n Hold streams wait in the server. */
  async waitWaiting(n: number): Promise<void> {
    await waitFor(async () => (await (await fetch(this.url + "/metrics")).text()).includes(`baton_serve_holds{state="waiting"} ${n}`), `${n} waiting`);
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    const done = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGTERM");
    await done;
  }
}

export interface Rec {
  event: string;
  t: number;
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
