// baton ui: renders the snapshots that /events pushes. Every piece of
// text from etcd goes through textContent or createTextNode, never HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let snap = null;      // last snapshot
let offset = 0;       // browser clock minus server clock, ms
let receivedAt = 0;   // browser time the snapshot arrived
let windowSec = 600;
let filter = "";

// shown writes the control and format characters of a text (bidi
// overrides and isolates, zero-width ones, line separators, escapes) as
// \u202e, as the CLI does: a name or value from etcd cannot reorder or
// hide the text around it. data-* attributes keep the raw text.
function shown(text) {
  return String(text).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cn}\p{Cs}]/gu, (c) => {
    const cp = c.codePointAt(0);
    return cp > 0xffff ? "\\U" + cp.toString(16).padStart(8, "0") : "\\u" + cp.toString(16).padStart(4, "0");
  });
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.dataset[k.slice(5)] = v;
    else e.setAttribute(k, shown(v));
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(shown(k)));
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, shown(v));
  if (text !== undefined) e.textContent = shown(text);
  return e;
}

function dur(ms) {
  if (ms < 0) ms = 0;
  let s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  s = s % 60;
  if (h) return `${h}h${m}m`;
  if (m) return `${m}m${s}s`;
  return `${s}s`;
}

// local converts a server time to this browser's clock, in ms.
function local(t) { return Date.parse(t) + offset; }

function clock(ms) { return new Date(ms).toLocaleTimeString(); }

function unknown(text) { return el("span", { class: "unknown" }, text); }

function ttlCell(h) {
  const td = el("td", { class: "ttl-cell" });
  const wrap = el("span", { class: "ttl" });
  if (h.ttl_left_ms < 0) {
    wrap.append(unknown("reading…"));
  } else {
    const m = el("meter", { min: "0", max: String(Math.max(h.ttl_seconds, 1) * 1000), low: String(h.ttl_seconds * 333),
      optimum: String(h.ttl_seconds * 1000), value: "0" });
    m.dataset.deadline = String(receivedAt + h.ttl_left_ms);
    const label = el("span", { class: "mono" });
    wrap.append(m, label);
  }
  td.append(wrap);
  return td;
}

// drain moves every TTL bar to the time now.
function drain() {
  const now = Date.now();
  for (const m of document.querySelectorAll("meter[data-deadline]")) {
    const left = Math.max(0, Number(m.dataset.deadline) - now);
    m.value = left;
    const label = m.nextSibling;
    const text = `${(left / 1000).toFixed(0)}s / ${Math.round(Number(m.max) / 1000)}s`;
    if (label.textContent !== text) label.textContent = text;
    m.setAttribute("aria-label", `TTL left ${text}`);
  }
  for (const d of document.querySelectorAll(".delay[data-until]")) {
    const text = `lock-delay: ${(Math.max(0, Number(d.dataset.until) - now) / 1000).toFixed(0)}s of ${dur(Number(d.dataset.delay))} left`;
    if (d.textContent !== text) d.textContent = text;
  }
}

function matches(name) { return filter === "" || name.toLowerCase().includes(filter); }

// attrs is an election candidate's priority and version, when it has any.
function attrs(c) {
  if (!c.priority && !c.version) return "";
  return el("span", { class: "mono attrs" }, ` p${c.priority || 0}${c.version ? " " + c.version : ""}`);
}

// notes are a queue entry's mutex set (the other names under its token)
// and the release request pending to it (who asked, and why: their text).
function notes(c) {
  const out = [];
  if (c.set && c.set.length) out.push(" ", el("span", { class: "set", "data-set": c.set.join("\n") }, `set with ${c.set.join(", ")}`));
  if (c.release) {
    out.push(" ", el("span", { class: "release", "data-by": c.release.by, "data-reason": c.release.reason },
      "release requested by ", el("span", { class: "value" }, c.release.by), ": ", el("span", { class: "value" }, c.release.reason)));
  }
  return out;
}

// delayNote is an object's running lock-delays, counted down by drain.
function delayNote(o) {
  if (!o.delays || o.delays.length === 0) return "";
  const wrap = el("span", { class: "delays" });
  for (const d of o.delays) {
    const e = el("span", { class: "delay", "data-token": String(d.token), "data-delay": String(d.delay_ms) },
      d.left_ms < 0 ? `lock-delay ${dur(d.delay_ms)} (reading time left…)` : "");
    if (d.left_ms >= 0) e.dataset.until = String(receivedAt + d.left_ms);
    wrap.append(" ", e);
  }
  return wrap;
}

function queueList(rest) {
  if (rest.length === 0) return unknown("none");
  const ol = el("ol", { class: "queue" });
  // A waiting candidate of a preferred election has no token until it leads.
  for (const c of rest) ol.append(el("li", {}, el("span", { class: "value" }, c.value), attrs(c), " ", el("span", { class: "mono unknown" }, c.token ? `#${c.token}` : "#—"), ...notes(c)));
  return ol;
}

function renderObjects(kind, bodyId, emptyId, countId) {
  const body = document.getElementById(bodyId);
  const objs = snap.objects.filter((o) => o.kind === kind);
  const rows = [];
  for (const o of objs) {
    if (!matches(o.name)) continue;
    // A preferred election may have candidates and no leader.
    // A lock-delay may run on a name nobody holds or waits for.
    const h = o.queue[0] || {}, leads = o.queue.length > 0 && (h.holding || kind !== "election");
    const since = leads && h.since ? local(h.since) : null;
    const tr = el("tr", { "data-name": o.name, "data-token": leads ? String(h.token) : "", "data-strategy": o.strategy || "" },
      el("th", { scope: "row", class: "value name" }, o.name, o.strategy === "preferred" ? el("span", { class: "strategy" }, " preferred") : "", delayNote(o)),
      el("td", { class: "value leader" }, leads ? h.value : unknown(kind === "election" ? "no leader" : "nobody"), leads ? attrs(h) : "", ...(leads ? notes(h) : [])),
      el("td", { class: "mono token" }, leads ? String(h.token) : "—"),
      kind === "election"
        ? el("td", { class: "since" }, since ? `${clock(since)} (${dur(Date.now() - since)})` : unknown(leads ? "unknown" : "—"))
        : el("td", { class: "since" }, since ? dur(Date.now() - since) : unknown("unknown")),
      leads ? ttlCell(h) : el("td", {}, "—"),
      el("td", { class: "waiters" }, queueList(leads ? o.queue.slice(1) : o.queue)));
    if (since) tr.dataset.since = String(since);
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  document.getElementById(emptyId).hidden = objs.length > 0;
  document.getElementById(countId).textContent = `(${objs.length})`;
}

function queueOf(list) {
  if (list.length === 0) return unknown("none");
  const ol = el("ol", { class: "queue" });
  for (const c of list) {
    const mode = c.mode ? `${c.mode} ` : "";
    ol.append(el("li", {}, mode, el("span", { class: "value" }, c.value), " ", el("span", { class: "mono unknown" }, `#${c.token}`), ...notes(c)));
  }
  return ol;
}

function renderSemaphores() {
  const objs = snap.objects.filter((o) => o.kind === "semaphore");
  const rows = [];
  for (const o of objs) {
    if (!matches(o.name)) continue;
    const holding = o.queue.filter((c) => c.holding), waiting = o.queue.filter((c) => !c.holding);
    const tr = el("tr", { "data-name": o.name, "data-holders": String(o.holders), "data-limit": String(o.limit || 0), "data-waiters": String(o.waiters) },
      el("th", { scope: "row", class: "value name" }, o.name, delayNote(o)),
      el("td", { class: "holders" }, `${o.holders}/${o.limit || "?"}`),
      el("td", {}, queueOf(holding)),
      el("td", { class: "waiters-count" }, String(o.waiters)),
      el("td", { class: "waiters" }, queueOf(waiting)));
    rows.push(tr);
  }
  document.getElementById("semaphores-body").replaceChildren(...rows);
  document.getElementById("semaphores-empty").hidden = objs.length > 0;
  document.getElementById("semaphores-count").textContent = `(${objs.length})`;
}

function renderRWLocks() {
  const objs = snap.objects.filter((o) => o.kind === "rwlock");
  const rows = [];
  for (const o of objs) {
    if (!matches(o.name)) continue;
    const holding = o.queue.filter((c) => c.holding), waiting = o.queue.filter((c) => !c.holding);
    const since = holding[0] && holding[0].since ? local(holding[0].since) : null;
    const tr = el("tr", { "data-name": o.name, "data-readers": String(o.readers || 0), "data-writer": o.writer ? "1" : "0", "data-waiters": String(o.waiters) },
      el("th", { scope: "row", class: "value name" }, o.name, delayNote(o)),
      el("td", { class: "since" }, since ? dur(Date.now() - since) : unknown("unknown")),
      el("td", { class: "readers" }, String(o.readers || 0)),
      el("td", { class: "value writer" }, o.writer ? holding[0].value : "—"),
      el("td", {}, queueOf(holding)),
      el("td", { class: "waiters-count" }, String(o.waiters)),
      el("td", { class: "waiters" }, queueOf(waiting)));
    rows.push(tr);
  }
  document.getElementById("rwlocks-body").replaceChildren(...rows);
  document.getElementById("rwlocks-empty").hidden = objs.length > 0;
  document.getElementById("rwlocks-count").textContent = `(${objs.length})`;
}

// renderShards is each shard group's members and unowned shards, and the
// moves the page's baton ui saw, newest first.
function renderShards() {
  const groups = snap.shards || [], moves = snap.shard_moves || [];
  const rows = [];
  for (const g of groups) {
    if (!matches(g.group)) continue;
    const members = g.members.length === 0 ? unknown("none") : el("ul", { class: "members" },
      ...g.members.map((m) => el("li", { class: "member", "data-member": m.member, "data-owns": String(m.owns) },
        el("span", { class: "value" }, m.member), " ", el("span", { class: "mono owns" }, `(${m.owns})`))));
    rows.push(el("tr", { "data-name": g.group, "data-count": String(g.count), "data-unowned": String(g.unowned) },
      el("th", { scope: "row", class: "value name" }, g.group, g.problem ? el("span", { class: "problem" }, ` ${g.problem}`) : ""),
      el("td", { class: "mono shard-count" }, String(g.count)),
      el("td", { class: "members-cell" }, members),
      el("td", { class: "unowned" }, g.unowned === 0 ? "0" : `${g.unowned}: `, g.unowned === 0 ? "" : el("span", { class: "mono ids" }, g.unowned_ids))));
  }
  document.getElementById("shards-body").replaceChildren(...rows);
  document.getElementById("shards-empty").hidden = groups.length > 0;
  document.getElementById("shards-count").textContent = `(${groups.length})`;
  const mrows = [];
  for (const m of moves.slice().reverse()) {
    if (!matches(m.group)) continue;
    mrows.push(el("tr", { "data-name": m.group, "data-shard": String(m.shard), "data-from": m.from, "data-to": m.to },
      el("td", {}, clock(local(m.at))), el("td", { class: "value" }, m.group), el("td", { class: "mono" }, String(m.shard)),
      el("td", { class: "value from" }, m.from), el("td", { class: "value to" }, m.to)));
  }
  document.getElementById("moves-body").replaceChildren(...mrows);
  document.getElementById("moves-empty").hidden = moves.length > 0;
  document.getElementById("moves-count").textContent = `(${moves.length})`;
}

function renderAudit() {
  const body = document.getElementById("audit-body");
  const rows = [];
  for (const a of snap.audit.slice().reverse()) {
    if (a.malformed) {
      rows.push(el("tr", { class: "malformed" }, el("td", {}, "—"), el("td", {}, "MALFORMED"),
        el("td", { colspan: "7", class: "value" }, `not a record (${a.malformed}): key ${a.key}, value ${a.raw}`)));
      continue;
    }
    if (!matches(a.name)) continue;
    let who = a.etcd_identity || "";
    if (a.etcd_identity_source === "auth disabled") who = "(auth disabled)";
    else if (who) who += ` (${a.etcd_identity_source})`;
    rows.push(el("tr", {},
      el("td", {}, new Date(Date.parse(a.time)).toLocaleString()),
      el("td", {}, a.action), el("td", { class: "value" }, a.name), el("td", { class: "value" }, a.holder || "—"),
      el("td", { class: "mono" }, String(a.token)), el("td", { class: "value" }, who || "(unknown)"),
      el("td", { class: "value" }, `${a.os_user}@${a.host}`), el("td", {}, a.result),
      el("td", { class: "value" }, a.reason)));
  }
  body.replaceChildren(...rows);
  document.getElementById("audit-empty").hidden = snap.audit.length > 0;
  document.getElementById("audit-count").textContent = `(${snap.audit.length})`;
}

function color(token) {
  const hues = [212, 28, 140, 265, 190, 90, 45, 300];
  return `hsl(${hues[Math.abs(token) % hues.length]} 55% 45%)`;
}

function describe(sp) {
  const end = sp.end ? `until ${clock(local(sp.end))}, ${sp.cause}` : "holding now";
  const start = sp.start_known ? clock(local(sp.start)) : `before ${clock(local(sp.start))}`;
  const mode = sp.mode ? ` (${sp.mode})` : "";
  return `${sp.kind} ${sp.name}${mode}: ${sp.holder} (token ${sp.token}) from ${start}, ${end}`;
}

function renderTimeline() {
  const chart = document.getElementById("chart");
  const now = Date.now();
  const from = now - windowSec * 1000;
  const lanes = [];
  const seen = new Set();
  const visible = snap.spans.filter((sp) => matches(sp.name) && (!sp.end || local(sp.end) >= from));
  for (const sp of visible) {
    const id = `${sp.kind}/${sp.name}`;
    if (!seen.has(id)) { seen.add(id); lanes.push(id); }
  }
  lanes.sort();
  // Several holders at once (a semaphore, readers) stack in their lane.
  const slot = new Map(), slots = new Map();
  for (const id of lanes) {
    const ends = [];
    const mine = visible.filter((sp) => `${sp.kind}/${sp.name}` === id).sort((a, b) => local(a.start) - local(b.start));
    for (const sp of mine) {
      const s0 = local(sp.start), e0 = sp.end ? local(sp.end) : Infinity;
      let i = ends.findIndex((e) => e <= s0);
      if (i < 0) { i = ends.length; ends.push(e0); } else ends[i] = e0;
      slot.set(sp, i);
    }
    slots.set(id, Math.max(ends.length, 1));
  }
  const width = Math.max(chart.clientWidth || 900, 400);
  const labelW = 170, laneH = 26, top = 22, right = 12;
  const laneTop = new Map();
  let acc = top;
  for (const id of lanes) { laneTop.set(id, acc); acc += laneH * Math.min(slots.get(id), 4) ; }
  const height = Math.max(acc, top + laneH) + 6;
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  chart.setAttribute("height", String(height));
  const x = (t) => labelW + ((Math.max(t, from) - from) / (now - from)) * (width - labelW - right);
  const kids = [];
  for (let i = 0; i <= 6; i++) {
    const t = from + (i * (now - from)) / 6;
    kids.push(svg("line", { class: "tick", x1: x(t), x2: x(t), y1: top - 4, y2: height }));
    kids.push(svg("text", { class: "axis", x: x(t), y: 12, "text-anchor": i === 6 ? "end" : "middle" }, i === 6 ? "now" : clock(t)));
  }
  const letter = { election: "E", lock: "L", semaphore: "S", rwlock: "RW" };
  lanes.forEach((id) => {
    const y = laneTop.get(id), h = laneH * Math.min(slots.get(id), 4);
    kids.push(svg("rect", { class: "lane", x: labelW, y: y + 2, width: width - labelW - right, height: h - 4 }));
    const [kind, ...rest] = id.split("/");
    const label = svg("text", { class: "label", x: 4, y: y + laneH / 2 + 4 }, `${letter[kind] || kind} ${rest.join("/")}`);
    label.append(svg("title", {}, id));
    kids.push(label);
  });
  if (lanes.length === 0) {
    kids.push(svg("text", { class: "axis", x: labelW, y: top + 16 }, "No holder in this window."));
  }
  for (const sp of visible) {
    const id = `${sp.kind}/${sp.name}`;
    const n = Math.min(slots.get(id), 4);
    const y = laneTop.get(id) + (slot.get(sp) % n) * laneH;
    const x1 = x(local(sp.start)), x2 = x(sp.end ? local(sp.end) : now);
    const forced = sp.cause && !sp.cause.startsWith("released") && !sp.cause.startsWith("lease") && !sp.cause.startsWith("ended");
    const r = svg("rect", { class: `span${forced ? " forced" : ""}`, x: x1, y: y + 4, width: Math.max(x2 - x1, 2), height: laneH - 8,
      fill: color(sp.token), tabindex: "0", role: "img", "aria-label": describe(sp) });
    r.dataset.name = sp.name;
    r.dataset.kind = sp.kind;
    if (sp.mode) r.dataset.mode = sp.mode;
    r.dataset.holder = sp.holder;
    r.dataset.token = String(sp.token);
    if (sp.end) r.dataset.end = sp.cause;
    r.append(svg("title", {}, describe(sp)));
    r.addEventListener("focus", () => { document.getElementById("span-detail").textContent = shown(describe(sp)); });
    kids.push(r);
    if (x2 - x1 > 60) {
      const t = svg("text", { class: "barlabel", x: x1 + 4, y: y + laneH / 2 + 4 }, sp.holder.length > 24 ? sp.holder.slice(0, 23) + "…" : sp.holder);
      kids.push(t);
    }
    if (sp.end && sp.cause !== "released") kids.push(svg("line", { class: "cut", x1: x2, x2: x2, y1: y + 2, y2: y + laneH - 2 }));
  }
  // Keep keyboard focus on the same bar across redraws.
  const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest("#chart .span") : null;
  const key = focused ? `${focused.dataset.kind}/${focused.dataset.name}/${focused.dataset.token}` : null;
  chart.replaceChildren(...kids);
  if (key) {
    for (const r of chart.querySelectorAll(".span")) {
      if (`${r.dataset.kind}/${r.dataset.name}/${r.dataset.token}` === key) { r.focus({ preventScroll: true }); break; }
    }
  }

  const body = document.getElementById("spans-body");
  body.replaceChildren(...visible.slice().reverse().map((sp) => el("tr", { "data-name": sp.name },
    el("td", {}, sp.kind), el("td", { class: "value" }, sp.name), el("td", { class: "value" }, sp.holder),
    el("td", { class: "mono" }, String(sp.token)),
    el("td", {}, sp.start_known ? clock(local(sp.start)) : `before ${clock(local(sp.start))}`),
    el("td", {}, sp.end ? clock(local(sp.end)) : "now"), el("td", { class: "value" }, sp.end ? sp.cause : "—"))));
}

function setStatus(state, text) {
  const s = document.getElementById("status");
  s.dataset.state = state;
  text = shown(text);
  if (s.textContent !== text) s.textContent = text;
}

function render() {
  if (!snap) return;
  document.getElementById("namespace").textContent = snap.namespace;
  document.title = `baton · ${snap.namespace}`;
  const note = document.getElementById("stale-note");
  const main = document.querySelector("main");
  if (snap.unreachable) {
    const since = snap.down_since ? clock(local(snap.down_since)) : "?";
    setStatus("down", `etcd unreachable since ${since}`);
    const asOf = snap.as_of ? `as of ${clock(local(snap.as_of))}, when etcd last answered` : "from before etcd was reached";
    note.textContent = shown(`etcd unreachable since ${since}: what is shown is ${asOf}, and cannot be vouched for now (${snap.problem}).`);
    note.hidden = false;
    main.classList.add("stale");
  } else {
    note.hidden = true;
    main.classList.remove("stale");
    if (snap.connected) setStatus("live", `Live · revision ${snap.revision}`);
    else setStatus("problem", `etcd: ${snap.problem || "reconnecting"} (showing the last known state)`);
  }
  renderObjects("election", "elections-body", "elections-empty", "elections-count");
  renderObjects("lock", "locks-body", "locks-empty", "locks-count");
  renderSemaphores();
  renderRWLocks();
  renderShards();
  renderTimeline();
  renderAudit();
  drain();
}

function connect() {
  const es = new EventSource("events");
  es.addEventListener("state", (ev) => {
    snap = JSON.parse(ev.data);
    receivedAt = Date.now();
    offset = receivedAt - Date.parse(snap.now);
    render();
  });
  // EventSource reconnects by itself (retry: 1000 from the server).
  es.addEventListener("error", () => {
    setStatus("down", "Connection to baton ui lost; reconnecting…");
    document.querySelector("main").classList.add("stale");
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const f = document.getElementById("filter");
  f.addEventListener("input", () => { filter = f.value.trim().toLowerCase(); render(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "/" && document.activeElement !== f) { e.preventDefault(); f.focus(); }
    if (e.key === "Escape" && document.activeElement === f) { f.value = ""; filter = ""; render(); }
  });
  for (const r of document.querySelectorAll('input[name="window"]')) {
    r.addEventListener("change", () => { windowSec = Number(r.value); renderTimeline(); });
  }
  setInterval(drain, 250);
  setInterval(() => { if (snap) renderTimeline(); }, 1000);
  window.addEventListener("resize", () => { if (snap) renderTimeline(); });
  connect();
});
