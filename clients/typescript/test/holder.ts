// A holder process: takes lock NAME through baton serve at URL and, while it
// holds, checks it every 20 ms, recording each check that passed (JSON lines
// in OUT, with now(): CLOCK_MONOTONIC, which every process of the machine
// shares), and the client's events. It releases after SECONDS, or exits 3
// once a check says the lock is lost.
//
//     node holder.js URL NAME TTL OUT SECONDS
import { appendFileSync } from "node:fs";
import { Client, LockLost, now } from "../src/index.js";

const [url, name, ttl, out, seconds] = process.argv.slice(2);
const record = (event: string, fields: Record<string, unknown> = {}) =>
  appendFileSync(out, JSON.stringify({ event, t: now(), ...fields, written: now(), pid: process.pid }) + "\n");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<number> {
  record("start");
  const l = await new Client(url).lock(name, { ttlSeconds: Number(ttl), identity: `ts-holder-${process.pid}`, onEvent: (e, f) => record(e, f) });
  const end = now() + Number(seconds) * 1000;
  while (now() < end) {
    const t = now();
    try {
      l.check();
    } catch (e) {
      if (e instanceof LockLost) {
        record("lost_seen", { cause: e.why });
        return 3;
      }
      throw e;
    }
    record("check_ok", { t, token: l.token.toString() });
    await sleep(20);
  }
  await l.release();
  record("done");
  return 0;
}

main().then((code) => process.exit(code), (e) => { console.error(e); process.exit(1); });
