// The live view of `sluice serve`: the signed-in tenant's pipelines, polled every second.
"use strict";

const $ = (sel, el = document) => el.querySelector(sel);
let token = sessionStorage.getItem("sluice-token") || "";
const previous = {}; // id -> { at, rows_in, rows_transformed, rows_out }

async function api(method, path) {
  const r = await fetch(path, { method, headers: { Authorization: "Bearer " + token } });
  const body = r.status === 204 ? {} : await r.json();
  if (!r.ok) throw Object.assign(new Error(body.error || r.statusText), { status: r.status });
  return body;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function rate(id, p) {
  const now = performance.now();
  const before = previous[id];
  previous[id] = { at: now, rows_in: p.rows_in, rows_transformed: p.rows_transformed, rows_out: p.rows_out };
  if (!before || now <= before.at) return { rows_in: 0, rows_transformed: 0, rows_out: 0 };
  const s = (now - before.at) / 1000;
  const r = (k) => Math.max(0, (p[k] - before[k]) / s);
  return { rows_in: r("rows_in"), rows_transformed: r("rows_transformed"), rows_out: r("rows_out") };
}

function stage(name, kind, cls, perSecond) {
  return el("div", { class: "stage " + cls },
    el("div", {}, name), el("div", { class: "kind" }, kind),
    el("div", { class: "rate" }, perSecond.toFixed(0) + " rows/s"));
}

function number(label, cls, value) {
  return el("div", {}, label + ": ", el("span", { class: cls }, String(value)));
}

// How far each source is: behind its log (seconds, bytes, Kafka messages), the changelog
// position's age, and each table's snapshot.
function sourcesTable(list) {
  const fmt = (v, digits) => (v === undefined || v === null ? "" : digits ? Number(v).toFixed(digits) : String(v));
  const table = el("table", { class: "sources" }, el("tr", {},
    ...["source", "behind (s)", "behind (bytes)", "behind (messages)", "position age (s)", "table", "rows read", "of about", "chunks read"]
      .map((h) => el("th", {}, h))));
  for (const s of list) {
    const messages = s.partitions ? Object.values(s.partitions).reduce((a, b) => a + b, 0) : undefined;
    const tables = Object.entries(s.tables || {});
    const first = tables.length ? tables : [["", {}]];
    first.forEach(([name, t], i) => {
      const lead = i === 0
        ? [el("td", { class: "source-name" }, s.source), el("td", { class: "source-lag" }, fmt(s.lag_seconds, 1)),
           el("td", { class: "source-lag-bytes" }, fmt(s.lag_bytes)), el("td", { class: "source-lag-messages" }, fmt(messages)),
           el("td", { class: "source-age" }, fmt(s.position_age_seconds, 1))]
        : [el("td", {}), el("td", {}), el("td", {}), el("td", {}), el("td", {})];
      table.append(el("tr", {}, ...lead, el("td", { class: "snapshot-table" }, name),
        el("td", { class: "snapshot-rows" }, fmt(t.rows_read)), el("td", {}, fmt(t.rows_estimated)),
        el("td", {}, t.chunks === undefined ? "" : `${t.chunks_read} of ${t.chunks}`)));
    });
  }
  return table;
}

function card(p) {
  const r = rate(p.id, p);
  const g = p.graph;
  const graph = el("div", { class: "graph" }, stage(g.source.name, g.source.type, "source", r.rows_in));
  for (const t of g.transforms) graph.append(el("span", { class: "arrow" }, "→"), stage(t.name, t.type, "transform", r.rows_transformed));
  for (const s of g.sinks) graph.append(el("span", { class: "arrow" }, "→"), stage(s.name, s.type, "sink", r.rows_out));
  const last = p.last_checkpoint;
  const numbers = el("div", { class: "numbers" },
    number("rows in", "rows-in", p.rows_in),
    number("rows transformed", "rows-transformed", p.rows_transformed),
    number("rows out", "rows-out", p.rows_out),
    number("lag (s)", "lag", p.lag_seconds.toFixed(1)),
    number("last checkpoint", "checkpoint", last ? last.id : "none"),
    number("loads committed", "loads-committed", p.loads.committed),
    number("loads failed", "loads-failed", p.loads.failed),
    number("rows filtered", "rows-filtered", p.loads.filtered_rows),
    number("restarts", "restarts", p.restarts));
  const history = el("table", { class: "history" },
    el("tr", {}, el("th", {}, "checkpoint"), el("th", {}, "duration (ms)"), el("th", {}, "size (bytes)"), el("th", {}, "committed")));
  for (const c of p.checkpoints.slice(-8).reverse()) {
    history.append(el("tr", {}, el("td", {}, String(c.id)), el("td", {}, String(c.duration_ms)), el("td", {}, String(c.bytes)), el("td", {}, String(c.committed))));
  }
  const buttons = el("div", { class: "buttons" });
  for (const action of ["pause", "resume", "stop"]) {
    const b = el("button", { class: action, type: "button" }, action);
    b.onclick = () => api("POST", `/api/v1/pipelines/${encodeURIComponent(p.id)}/${action}`).then(refresh, show);
    buttons.append(b);
  }
  const parts = [graph, numbers];
  if (p.sources && p.sources.length) parts.push(sourcesTable(p.sources));
  return el("section", { class: "pipeline", "data-pipeline": p.id },
    el("h2", {}, p.name, el("span", { class: "state " + p.state }, p.state)),
    ...parts, buttons, history,
    el("div", { class: "error last-error" }, p.last_error || ""));
}

function show(e) {
  if (e.status === 401) return signOut(e.message);
  $("#pipelines").prepend(el("div", { class: "error" }, e.message));
}

async function refresh() {
  const list = await api("GET", "/api/v1/pipelines");
  const details = await Promise.all(list.data.map((p) => api("GET", `/api/v1/pipelines/${encodeURIComponent(p.id)}`)));
  const root = $("#pipelines");
  root.replaceChildren(...details.map(card));
  if (!details.length) root.append(el("p", {}, "No pipelines yet: submit one with `sluice submit` or POST /api/v1/pipelines."));
  root.setAttribute("data-updated", String(Date.now()));
}

function signOut(message) {
  token = "";
  sessionStorage.removeItem("sluice-token");
  $("#signin").hidden = false;
  $("#signout").hidden = true;
  $("#who").textContent = "";
  $("#pipelines").replaceChildren();
  $("#signin-error").textContent = message || "";
}

async function signIn() {
  try {
    const who = await api("GET", "/api/v1/whoami");
    sessionStorage.setItem("sluice-token", token);
    $("#who").textContent = who.admin ? "admin" : "tenant " + who.tenant;
    $("#signin").hidden = true;
    $("#signout").hidden = false;
    await refresh();
  } catch (e) {
    signOut(e.message);
  }
}

$("#signin").onsubmit = (ev) => { ev.preventDefault(); token = $("#token").value.trim(); signIn(); };
$("#signout").onclick = () => signOut("");
setInterval(() => { if (token) refresh().catch(show); }, 1000);
if (token) signIn(); else signOut("");
