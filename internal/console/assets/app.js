// The console: a hash router over pages, each backed by /admin/v1 only.

import { api, base, key, setKey, role, setRole, open, setOpen, h, table, chart, say, warn, errorBox, when, field, twoStep, APIError } from "./lib.js";
import { schemaForm } from "./form.js";
import * as auth from "./auth.js";

const view = () => document.getElementById("view");
let timers = [];

function every(ms, f) { f(); timers.push(setInterval(f, ms)); }
function clearTimers() { timers.forEach(clearInterval); timers = []; }

function render(...nodes) {
  view().replaceChildren(...nodes.filter(n => n !== null && n !== undefined));
}

// section keeps a region that a poller re-renders.
function region(label) { return h("div", { "aria-label": label }); }

// armed: a two-step button in el waits for its second click, so a poller
// must not redraw it away.
function armed(el) { return !!el.querySelector('[data-armed="1"]'); }

// ---- login ----

// probeRole finds what the caller may do: an admin reads /servers; anyone
// else with a valid key or token reads their own connections.
async function probeRole(k) {
  try {
    await api("GET", "/servers", undefined, k);
    return "admin";
  } catch (e) {
    if (!(e instanceof APIError) || e.status !== 403) throw e;
  }
  await api("GET", "/me/connections", undefined, k);
  return "person";
}

function signOut() {
  setKey("");
  auth.setToken(null);
  setRole("");
  setOpen(false);
}

// probeOpen reports whether the admin API lets this browser in without a
// key: only a gateway with no keys that listens on loopback does, and
// only for requests from this host (docs/security.md).
async function probeOpen() {
  try { await api("GET", "/servers", undefined, ""); return true; } catch { return false; }
}

function login(msg) {
  document.getElementById("nav").hidden = true;
  document.getElementById("open-banner").hidden = true;
  const [keyLabel, keyInput] = field("Key", { type: "password", id: "login-key", autocomplete: "off", required: true });
  const err = h("div", {});
  const form = h("form", { class: "inline", id: "login-form" }, keyLabel, h("button", { type: "submit" }, "Sign in with key"));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const k = keyInput.value.trim();
    try {
      const r = await probeRole(k);
      signOut();
      setKey(k);
      setRole(r);
      keyInput.value = "";
      location.hash = r === "admin" ? "#/overview" : "#/connections";
      route();
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  });
  const sso = h("div", { id: "sso" });
  auth.metadata().then(meta => {
    if (!meta) return;
    const b = h("button", { type: "button", id: "sso-login" }, "Sign in through the gateway's login");
    b.addEventListener("click", async () => {
      try { await auth.start(meta); } catch (e) { err.replaceChildren(errorBox(e)); }
    });
    sso.replaceChildren(h("p", { class: "muted" }, "Or sign in at mcpgate's login page (your company account, or a key), and come back here signed in:"), b);
  }).catch(() => {});
  render(h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Use the master key, an admin key, or your own key (for your connections). It is kept in this tab only (session storage) and sent in a header, never in a URL."),
    msg ? errorBox(msg) : null, form, sso, err);
  keyInput.focus();
}

// stateCell shows a server's state; a failing one (down, degraded) also
// since when and why in a word, its fault class: "down since 18:02:11
// (unreachable)".
function stateCell(s) {
  let text = s.state;
  if ((s.state === "down" || s.state === "degraded") && s.since) {
    text = `${s.state} since ${when(s.since)}` + (s.fault ? ` (${s.fault})` : "");
  }
  return h("span", { class: "state-" + s.state, "data-state": s.name }, text);
}

// ---- overview ----

// sharedStateCard shows the shared state backend (redis) as this replica
// sees it: "degraded since 18:02:11" while it does not answer (the replica
// serves on; rate limits are per replica meanwhile), and how many
// replicas the fleet registry lists.
function sharedStateCard(s) {
  const text = s.status === "ok" ? "ok" : `${s.status} since ${when(s.since)}`;
  return h("div", { class: "card" },
    h("b", { id: "state-status", class: s.status === "ok" ? "state-ready" : "state-degraded", title: s.last_error || "" }, text),
    `shared state (${s.driver})` + (s.replicas ? `, ${s.replicas} replica${s.replicas === 1 ? "" : "s"}` : ""));
}

// lossesCard shows what the gateway dropped since it started (GET /stats
// losses): audit records the store never got, records an exporter
// dropped, calls answered before their record was committed (durable
// audit) and log lines dropped while the log's output was blocked. Each
// is also a metric and a warning in the log; here an operator looking at
// the gateway sees it without either.
function lossesCard(l) {
  const n = (v, one, many) => `${v} ${v === 1 ? one : many}`;
  const parts = [];
  if (l.audit_records) parts.push(n(l.audit_records, "audit record", "audit records") + " dropped");
  for (const [name, v] of Object.entries(l.export_records || {}).sort()) parts.push(n(v, "record", "records") + ` dropped by exporter ${name}`);
  if (l.audit_unconfirmed) parts.push(n(l.audit_unconfirmed, "call", "calls") + " answered before their audit record was committed");
  if (l.log_lines) parts.push(n(l.log_lines, "log line", "log lines") + " dropped");
  const total = (l.audit_records || 0) + (l.audit_unconfirmed || 0) + (l.log_lines || 0) +
    Object.values(l.export_records || {}).reduce((a, v) => a + v, 0);
  return h("div", { class: "card", id: "losses" },
    h("b", { id: "loss-count", class: total ? "state-degraded" : "state-ready" }, String(total)),
    total ? "lost since start: " + parts.join("; ") : "records or log lines lost since start");
}

const pct = v => (Math.round(v * 10) / 10) + "%";
const ms = v => v >= 1000 ? (v / 1000).toFixed(1) + " s" : v >= 10 || v === 0 ? Math.round(v) + " ms" : v.toFixed(1) + " ms";
const perSec = v => v < 10 ? (Math.round(v * 100) / 100).toString() : Math.round(v).toString();

// seriesCharts draws the last hour per server (GET /stats/series): calls
// per second, error rate, and p50 and p99 latency, one line per server.
function seriesCharts(se) {
  const times = se.servers.length ? se.servers[0].points.map(p => new Date(p.time)) : [];
  const step = se.step_seconds || 60;
  const lines = f => se.servers.map(x => ({ name: x.server, values: x.points.map(f) }));
  const empty = "No tool calls in the last hour.";
  const has = se.servers.some(x => x.points.some(p => p.calls > 0));
  return h("div", { class: "charts", id: "charts" },
    chart({ id: "chart-rate", title: "Calls per second", times, series: lines(p => p.calls / step), fmt: perSec, empty, has }),
    chart({ id: "chart-errors", title: "Error rate (calls not ok)", times, series: lines(p => p.calls ? 100 * p.errors / p.calls : null), fmt: pct, empty, has }),
    chart({ id: "chart-p50", title: "p50 latency", times, series: lines(p => p.calls ? p.p50_ms : null), fmt: ms, empty, has }),
    chart({ id: "chart-p99", title: "p99 latency", times, series: lines(p => p.calls ? p.p99_ms : null), fmt: ms, empty, has }),
    se.truncated ? h("p", { class: "muted" }, "More calls were made than the charts read: the oldest minutes count only the newest calls.") : null);
}

function overview() {
  const cards = region("Totals");
  const charts = region("The last hour");
  const body = region("Servers");
  let last = null;
  render(h("h1", {}, "Overview"), cards, h("h2", {}, "The last hour, per server"), charts, h("h2", {}, "Servers"), body);
  every(10000, async () => {
    try { charts.replaceChildren(seriesCharts(await api("GET", "/stats/series"))); } catch (e) { charts.replaceChildren(errorBox(e)); }
  });
  every(2000, async () => {
    try {
      const [srv, st, ses] = await Promise.all([api("GET", "/servers"), api("GET", "/stats"), api("GET", "/sessions")]);
      const now = performance.now();
      const stats = Object.fromEntries(st.servers.map(s => [s.server, s]));
      const rates = {};
      if (last) {
        const dt = (now - last.t) / 1000;
        for (const s of st.servers) {
          const p = last.stats[s.server] || { calls: 0, errors: 0 };
          const dc = s.calls - p.calls;
          rates[s.server] = { rps: dc / dt, err: dc > 0 ? (s.errors - p.errors) / dc : null };
        }
      }
      last = { t: now, stats };
      const ready = srv.servers.filter(s => s.state === "ready").length;
      cards.replaceChildren(h("div", { class: "cards" },
        h("div", { class: "card" }, h("b", { id: "ready-count" }, `${ready}/${srv.servers.length}`), "servers ready"),
        h("div", { class: "card" }, h("b", { id: "session-count" }, ses.total), "live sessions"),
        h("div", { class: "card" }, h("b", {}, st.servers.reduce((n, s) => n + s.calls, 0)), "tool calls since start"),
        st.losses ? lossesCard(st.losses) : null,
        st.state ? sharedStateCard(st.state) : null));
      body.replaceChildren(table("Servers, health and tool calls", [
        { label: "Server", get: s => s.name },
        { label: "State", get: stateCell },
        { label: "Last error", get: s => s.last_error || "" },
        { label: "Calls/s", get: s => rates[s.name] ? rates[s.name].rps.toFixed(2) : "…" },
        { label: "Error rate", get: s => rates[s.name] && rates[s.name].err !== null ? (100 * rates[s.name].err).toFixed(1) + "%" : "–" },
        { label: "p50", get: s => stats[s.name] ? stats[s.name].p50_ms.toFixed(1) + " ms" : "–" },
        { label: "p99", get: s => stats[s.name] ? stats[s.name].p99_ms.toFixed(1) + " ms" : "–" },
        { label: "Upstream sessions", get: s => s.sessions ?? 0 },
      ], srv.servers, "No servers yet: add one on the Servers page."));
    } catch (e) { body.replaceChildren(errorBox(e)); }
  });
}

// ---- servers ----

function servers() {
  const list = region("Server list");
  const out = h("div", {});
  const [nameL, name] = field("Name", { id: "srv-name", required: true, pattern: "[a-z0-9][a-z0-9_-]*" });
  const transport = h("select", { id: "srv-transport" }, h("option", { value: "http" }, "http (streamable)"), h("option", { value: "sse" }, "sse (legacy)"));
  const [urlL, url] = field("URL", { id: "srv-url", type: "url", required: true, placeholder: "https://host/mcp" });
  const [tokL, tok] = field("Bearer token (optional)", { id: "srv-token", type: "password", autocomplete: "off" });
  const form = h("form", { class: "inline", id: "add-server" }, nameL, h("label", {}, "Transport", transport), urlL, tokL, h("button", { type: "submit" }, "Add server"));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const body = { name: name.value.trim(), transport: transport.value, url: url.value.trim() };
    if (tok.value) body.auth = { type: "bearer_token", value: tok.value };
    try {
      await api("POST", "/servers", body);
      say(`Server ${body.name} added`);
      form.reset();
      refresh();
    } catch (e) { out.replaceChildren(errorBox(e)); }
  });
  const detail = h("div", { id: "server-detail" });
  async function test(s) {
    const head = h("h2", {}, `Test connection: ${s.name}`);
    detail.replaceChildren(head, h("p", { class: "muted" }, "Connecting…"));
    try {
      const [pv, ch] = await Promise.all([
        s.transport === "stdio" ? Promise.resolve(null) : api("GET", `/servers/${encodeURIComponent(s.name)}/preview`),
        api("POST", `/servers/${encodeURIComponent(s.name)}/test`),
      ]);
      const facts = [];
      if (ch.tools !== null && ch.tools !== undefined) facts.push(`${ch.tools} tools`);
      if (ch.latency_ms !== null && ch.latency_ms !== undefined) facts.push(`handshake and list in ${ch.latency_ms} ms`);
      if (ch.protocol_version) facts.push(`MCP ${ch.protocol_version}`);
      if (ch.server_info) facts.push(`${ch.server_info.name} ${ch.server_info.version || ""}`.trim());
      if (ch.tls_not_after) facts.push(`certificate valid until ${when(ch.tls_not_after)}`);
      detail.replaceChildren(head,
        h("p", { id: "test-result", class: ch.verdict === "ok" ? "state-ready" : ch.verdict === "warn" ? "state-degraded" : "error" }, `${ch.verdict}: ${facts.join(", ") || "no answer"}`),
        ch.detail ? h("p", {}, ch.detail) : null,
        pv ? h("pre", { "aria-label": "Request preview" }, `${pv.method} ${pv.url}\n` + Object.entries(pv.headers || {}).map(([k, v]) => `${k}: ${v.join(", ")}`).join("\n")) : null);
    } catch (e) { detail.replaceChildren(head, errorBox(e)); }
  }
  function editServer(s) {
    const [uL, u] = field("URL (empty: unchanged)", { id: "edit-srv-url", type: "url", placeholder: s.target || "" });
    const [tL, tm] = field("Timeout (e.g. 30s; empty: unchanged)", { id: "edit-srv-timeout" });
    const [kL, k] = field("Bearer token (empty: unchanged)", { id: "edit-srv-token", type: "password", autocomplete: "off" });
    const msg = h("div", {});
    const f = h("form", { class: "inline", id: "edit-server" }, uL, tL, kL, h("button", { type: "submit" }, "Save"));
    f.addEventListener("submit", async ev => {
      ev.preventDefault();
      const patch = {};
      if (u.value.trim()) patch.url = u.value.trim();
      if (tm.value.trim()) patch.timeout = tm.value.trim();
      if (k.value) patch.auth = { type: "bearer_token", value: k.value };
      try { await api("PATCH", `/servers/${encodeURIComponent(s.name)}`, patch); say(`Server ${s.name} saved`); detail.replaceChildren(); refresh(); }
      catch (e) { msg.replaceChildren(errorBox(e)); }
    });
    detail.replaceChildren(h("h2", {}, `Edit ${s.name}`), h("p", { class: "muted" }, "Fields left empty keep their stored values, credentials included."), f, msg);
  }
  async function toolsOf(s) {
    detail.replaceChildren(h("h2", {}, `Tools of ${s.name}`), h("p", { class: "muted" }, "Listing…"));
    try {
      const v = await api("GET", `/servers/${encodeURIComponent(s.name)}/tools`);
      const ro = v.source !== "api";
      const rows = v.tools.map(t => {
        const o = v.policy.overrides[t.name] || {};
        return {
          t,
          vis: h("input", { type: "checkbox", "aria-label": `Show ${t.name}`, "data-tool": t.name, disabled: ro, checked: t.visible }),
          name: h("input", { type: "text", "aria-label": `Display name of ${t.name}`, "data-rename": t.name, value: o.name || "", disabled: ro, placeholder: t.name }),
          desc: h("input", { type: "text", "aria-label": `Description of ${t.name}`, value: o.description || "", disabled: ro, placeholder: "(the upstream's)" }),
        };
      });
      const save = h("button", { type: "button", id: "save-tools", hidden: ro }, "Save tool policy");
      const msg = h("div", {});
      save.addEventListener("click", async () => {
        const overrides = {};
        for (const r of rows) {
          const name = r.name.value.trim(), description = r.desc.value.trim();
          if (name || description) overrides[r.t.name] = { name: name || undefined, description: description || undefined };
        }
        // An allow list stays an allow list (tools added upstream later
        // stay hidden); otherwise unchecked tools are denied.
        const body = v.policy.allow !== null && v.policy.allow !== undefined
          ? { allow: rows.filter(r => r.vis.checked).map(r => r.t.name), overrides }
          : { deny: rows.filter(r => !r.vis.checked).map(r => r.t.name), overrides };
        try { await api("PUT", `/servers/${encodeURIComponent(s.name)}/tools`, body); say(`Tool policy of ${s.name} saved`); toolsOf(s); }
        catch (e) { msg.replaceChildren(errorBox(e)); }
      });
      detail.replaceChildren(h("h2", {}, `Tools of ${s.name}`),
        ro ? h("p", { class: "muted" }, "Defined in the config file: change its tools there.") : null,
        table("Upstream tools and the server's policy", [
          { label: "Tool", get: r => r.t.name },
          { label: "Description", get: r => r.t.description || "" },
          { label: "Visible", get: r => r.vis },
          { label: "Display name", get: r => r.name },
          { label: "Description shown", get: r => r.desc },
        ], rows), save, msg);
    } catch (e) { detail.replaceChildren(h("h2", {}, `Tools of ${s.name}`), errorBox(e)); }
  }
  async function refresh() {
    try {
      const srv = await api("GET", "/servers");
      if (armed(list)) return;
      list.replaceChildren(table("Servers", [
        { label: "Server", get: s => s.name },
        { label: "Transport", get: s => s.transport },
        { label: "Target", get: s => s.target || "" },
        { label: "State", get: stateCell },
        { label: "Since", get: s => when(s.since) },
        { label: "", get: s => h("span", { class: "row" },
          h("button", { type: "button", class: "secondary", onclick: () => test(s), "aria-label": `Test connection to ${s.name}` }, "Test"),
          h("button", { type: "button", class: "secondary", onclick: () => toolsOf(s), "aria-label": `Tools of ${s.name}` }, "Tools"),
          s.source === "api" ? h("button", { type: "button", class: "secondary", onclick: () => editServer(s), "aria-label": `Edit ${s.name}` }, "Edit") : null,
          // A config-file server is changed in the file: the API refuses
          // to remove it (409), so it is not offered.
          s.source === "api" ? twoStep("Remove", "Confirm remove", async () => {
            try { await api("DELETE", `/servers/${encodeURIComponent(s.name)}`); say(`Server ${s.name} removed`); refresh(); }
            catch (e) { out.replaceChildren(errorBox(e)); }
          }) : h("span", { class: "muted", "data-source": s.name }, "config file")) },
      ], srv.servers));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  render(h("h1", {}, "Servers"), list, h("h2", {}, "Add a runtime server"), form, out, detail);
  every(2000, refresh);
}

// ---- keys ----

function keys() {
  const list = region("Key list");
  const out = h("div", { id: "key-out" });
  const [aliasL, alias] = field("Alias", { id: "key-alias", required: true });
  const [userL, user] = field("User", { id: "key-user" });
  const [teamL, team] = field("Team", { id: "key-team" });
  const [srvL, srv] = field("Servers (comma-separated; empty: all)", { id: "key-servers" });
  const admin = h("input", { type: "checkbox", id: "key-admin" });
  const form = h("form", { class: "inline", id: "create-key" }, aliasL, userL, teamL, srvL,
    h("label", { class: "check" }, admin, "Admin"), h("button", { type: "submit" }, "Create key"));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const body = { alias: alias.value.trim(), user: user.value.trim() || undefined, team: team.value.trim() || undefined, admin: admin.checked || undefined };
    if (srv.value.trim()) body.servers = srv.value.split(",").map(s => s.trim()).filter(Boolean);
    try {
      const created = await api("POST", "/keys", body);
      const secret = h("code", { class: "secret", id: "new-secret" }, created.key);
      const copy = h("button", { type: "button", class: "secondary" }, "Copy");
      copy.addEventListener("click", async () => {
        try { await navigator.clipboard.writeText(created.key); say("Copied"); } catch { say("Copy failed: select the key and copy it"); }
      });
      out.replaceChildren(h("p", {}, `Key ${created.alias} created. This is the only time its secret is shown:`), h("div", { class: "row" }, secret, copy));
      form.reset();
      refresh();
    } catch (e) { out.replaceChildren(errorBox(e)); }
  });
  const explainOut = h("div", { id: "explain-out" });
  const [exKL, exK] = field("Key alias", { id: "explain-key" });
  const [exTL, exT] = field("Tool (exposed name)", { id: "explain-tool" });
  const [exRL, exR] = field("Route", { id: "explain-route", value: "/mcp" });
  const exForm = h("form", { class: "inline" }, exKL, exTL, exRL, h("button", { type: "submit" }, "Explain"));
  exForm.addEventListener("submit", async ev => {
    ev.preventDefault();
    try {
      const q = new URLSearchParams({ key: exK.value.trim(), tool: exT.value.trim(), route: exR.value.trim() || "/mcp" });
      const x = await api("GET", "/explain?" + q);
      explainOut.replaceChildren(h("p", { class: x.allowed ? "state-ready" : "error" }, `${x.allowed ? "Allowed" : "Refused"}: ${x.rule}`),
        table("Steps", [{ label: "Check", get: s => s.check }, { label: "Passed", get: s => s.passed ? "yes" : "no" }, { label: "Rule", get: s => s.rule || "" }], x.steps || []));
    } catch (e) { explainOut.replaceChildren(errorBox(e)); }
  });
  async function refresh() {
    try {
      const ks = await api("GET", "/keys");
      list.replaceChildren(table("Keys", [
        { label: "Alias", get: k => k.alias },
        { label: "Prefix", get: k => k.key_prefix || "" },
        { label: "User", get: k => k.user || "" },
        { label: "Team", get: k => k.team || "" },
        { label: "Servers", get: k => k.servers ? k.servers.join(", ") || "(none)" : "all" },
        { label: "Admin", get: k => k.admin ? "yes" : "" },
        { label: "Budget", get: k => k.budget ? `${k.budget.amount} per ${k.budget.period}` : "" },
        { label: "Expires", get: k => when(k.expires) },
        { label: "Source", get: k => k.source },
        { label: "Last used", get: k => when(k.last_used_at) },
        { label: "", get: k => k.source === "config" ? h("span", { class: "muted" }, "config file") : h("span", { class: "row" },
          h("button", { type: "button", class: "secondary", onclick: () => openEdit(k.alias), "aria-label": `Edit ${k.alias}` }, "Edit"),
          twoStep("Revoke", "Confirm revoke", async () => {
            try { await api("DELETE", `/keys/${encodeURIComponent(k.alias)}`); say(`Key ${k.alias} revoked`); refresh(); }
            catch (e) { out.replaceChildren(errorBox(e)); }
          })) },
      ], ks.keys));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  const editBox = h("div", { id: "key-edit" });
  // The form is filled from the key as it is now, not as the list last
  // drew it: right after a save, or another admin's change, the row's
  // copy is old.
  async function openEdit(alias) {
    try { edit(await api("GET", `/keys/${encodeURIComponent(alias)}`)); }
    catch (e) { editBox.replaceChildren(errorBox(e)); }
  }
  function edit(k) {
    const list = v => (v || []).join(", ");
    const split = v => v.split(",").map(x => x.trim()).filter(Boolean);
    // A per-server tool map as lines "server: tool, tool".
    const mapText = m => Object.entries(m || {}).map(([srv, ts]) => `${srv}: ${ts.join(", ")}`).join("\n");
    const parseMap = (name, v) => {
      const out = {};
      for (const line of v.split("\n").map(l => l.trim()).filter(Boolean)) {
        const i = line.indexOf(":");
        if (i < 1) throw new Error(`${name}: each line is "server: tool, tool" (got "${line}")`);
        out[line.slice(0, i).trim()] = split(line.slice(i + 1));
      }
      return out;
    };
    // datetime-local works in local time; the API takes RFC 3339.
    const localInput = t => {
      if (!t) return "";
      const d = new Date(t);
      return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
    };
    const [uL, uI] = field("User", { id: "edit-user", value: k.user || "" });
    const [tmL, tmI] = field("Team", { id: "edit-team", value: k.team || "" });
    const [sL, sI] = field("Servers (empty: all)", { id: "edit-servers", value: k.servers ? list(k.servers) : "" });
    const noServers = h("input", { type: "checkbox", id: "edit-no-servers", checked: !!(k.servers && !k.servers.length) });
    const [taL, taI] = field("Allowed tools, one server a line: server: tool, tool (empty: every tool)", { tag: "textarea", id: "edit-tools", rows: 2 });
    taI.value = mapText(k.tools);
    const [tdL, tdI] = field("Denied tools, one server a line: server: tool, tool", { tag: "textarea", id: "edit-deny-tools", rows: 2 });
    tdI.value = mapText(k.deny_tools);
    const [tL, tI] = field("Toolsets", { id: "edit-toolsets", value: list(k.toolsets) });
    const [gL, gI] = field("Access groups", { id: "edit-groups", value: list(k.access_groups) });
    const [cL, cI] = field("Networks (CIDRs, comma-separated; empty: any)", { id: "edit-cidrs", value: list(k.allowed_cidrs), placeholder: "10.0.0.0/8, 192.0.2.7/32" });
    const [rL, rI] = field("Rate limit (calls/min, 0: none)", { id: "edit-rpm", type: "number", min: "0", value: k.rate_limit_rpm || 0 });
    const [bL, bI] = field("Budget (cost per period, 0: none)", { id: "edit-budget", type: "number", min: "0", step: "any", value: k.budget ? k.budget.amount : 0 });
    const bP = h("select", { id: "edit-budget-period" }, ["day", "week", "month"].map(p => h("option", { value: p, selected: (k.budget ? k.budget.period : "month") === p }, p)));
    const [eL, eI] = field("Expires (local time)", { id: "edit-expires", type: "datetime-local", value: localInput(k.expires) });
    // "No expiry" sends null, which removes an expiry; a date typed in
    // unticks it, ticking it empties the date.
    const noExp = h("input", { type: "checkbox", id: "edit-no-expiry", checked: !k.expires });
    noExp.addEventListener("change", () => { if (noExp.checked) eI.value = ""; });
    eI.addEventListener("input", () => { if (eI.value) noExp.checked = false; });
    const adm = h("input", { type: "checkbox", id: "edit-admin", checked: !!k.admin });
    const nomcp = h("input", { type: "checkbox", id: "edit-no-mcp", checked: !!k.no_mcp });
    const dis = h("input", { type: "checkbox", id: "edit-disabled", checked: !!k.disabled });
    const msg = h("div", {});
    const f = h("form", { class: "inline", id: "edit-key" }, uL, tmL, sL, h("label", { class: "check" }, noServers, "No servers"), taL, tdL, tL, gL, cL, rL, bL,
      h("label", {}, "Budget period", bP), eL, h("label", { class: "check" }, noExp, "No expiry"), h("label", { class: "check" }, adm, "Admin"), h("label", { class: "check" }, nomcp, "Admin API only (no MCP)"),
      h("label", { class: "check" }, dis, "Disabled"), h("button", { type: "submit" }, "Save"));
    f.addEventListener("submit", async ev => {
      ev.preventDefault();
      let body;
      try {
        body = { user: uI.value.trim(), team: tmI.value.trim(), tools: parseMap("Allowed tools", taI.value), deny_tools: parseMap("Denied tools", tdI.value),
          toolsets: split(tI.value), access_groups: split(gI.value), allowed_cidrs: split(cI.value), rate_limit_rpm: Number(rI.value) || 0,
          admin: adm.checked, no_mcp: nomcp.checked, disabled: dis.checked, budget: { amount: Number(bI.value) || 0, period: bP.value } };
      } catch (e) { msg.replaceChildren(errorBox(e)); return; }
      if (noServers.checked) body.servers = [];
      else if (sI.value.trim()) body.servers = split(sI.value);
      else body.all_servers = true;
      if (noExp.checked) { if (k.expires) body.expires = null; }
      else if (eI.value) body.expires = new Date(eI.value).toISOString();
      try { await api("PATCH", `/keys/${encodeURIComponent(k.alias)}`, body); say(`Key ${k.alias} saved`); editBox.replaceChildren(); refresh(); }
      catch (e) { msg.replaceChildren(errorBox(e)); }
    });
    editBox.replaceChildren(h("h2", {}, `Edit ${k.alias}`),
      h("p", { class: "muted" }, "Every field of the key; its secret never changes here."), f, msg);
    uI.focus();
  }
  const grants = region("Grants");
  const gOut = h("div", {});
  const kind = h("select", { id: "grant-kind" }, ["user", "team", "role"].map(v => h("option", { value: v }, v)));
  const [gvL, gv] = field("Name", { id: "grant-value", required: true });
  const [gsL, gs] = field("Servers (comma-separated)", { id: "grant-servers" });
  const [gtL, gt] = field("Toolsets", { id: "grant-toolsets" });
  const gadm = h("input", { type: "checkbox", id: "grant-admin" });
  const gForm = h("form", { class: "inline", id: "put-grant" }, h("label", {}, "Kind", kind), gvL, gsL, gtL, h("label", { class: "check" }, gadm, "Admin"), h("button", { type: "submit" }, "Save grant"));
  gForm.addEventListener("submit", async ev => {
    ev.preventDefault();
    const split = v => v.split(",").map(x => x.trim()).filter(Boolean);
    const body = { servers: split(gs.value), toolsets: split(gt.value), admin: gadm.checked || undefined };
    try { await api("PUT", `/grants/${kind.value}/${encodeURIComponent(gv.value.trim())}`, body); say("Grant saved"); gForm.reset(); loadGrants(); }
    catch (e) { gOut.replaceChildren(errorBox(e)); }
  });
  async function loadGrants() {
    try {
      const gl = (await api("GET", "/grants")).grants || [];
      grants.replaceChildren(table("Grants of users, teams and roles (JWT callers)", [
        { label: "Kind", get: g => g.kind },
        { label: "Name", get: g => g.value },
        { label: "Servers", get: g => (g.servers || []).join(", ") },
        { label: "Toolsets", get: g => (g.toolsets || []).join(", ") },
        { label: "Admin", get: g => g.admin ? "yes" : "" },
        { label: "Source", get: g => g.source },
        { label: "", get: g => g.source !== "api" ? h("span", { class: "muted" }, "config file") :
          twoStep("Remove", "Confirm remove", async () => {
            try { await api("DELETE", `/grants/${g.kind}/${encodeURIComponent(g.value)}`); say("Grant removed"); loadGrants(); }
            catch (e) { gOut.replaceChildren(errorBox(e)); }
          }) },
      ], gl, "No grants: people who sign in with a company identity get nothing until one matches them."));
    } catch (e) { grants.replaceChildren(e instanceof APIError && e.status === 404 ? h("p", { class: "muted" }, "No identity issuer is configured.") : errorBox(e)); }
  }
  render(h("h1", {}, "Keys, users and teams"), list, editBox, h("h2", {}, "Create a key"), form, out,
    h("h2", {}, "Users, teams and roles"), grants, gForm, gOut,
    h("h2", {}, "Explain: may a key call a tool?"), exForm, explainOut);
  refresh();
  loadGrants();
}

// ---- playground ----

function playground() {
  const keySel = h("select", { id: "pg-key" }, h("option", { value: "" }, "the key I signed in with"));
  const [routeL, routeIn] = field("Route", { id: "pg-route", value: "/mcp" });
  const load = h("button", { type: "button", id: "pg-load" }, "Load tools");
  const toolSel = h("select", { id: "pg-tool", disabled: true });
  const formBox = h("div", { id: "pg-form" });
  const call = h("button", { type: "button", id: "pg-call", disabled: true }, "Call");
  const result = h("div", { id: "pg-result" });
  let tools = [];
  let form = null;
  api("GET", "/keys").then(ks => {
    for (const k of ks.keys) keySel.append(h("option", { value: k.alias }, k.alias + (k.user ? ` (${k.user})` : "")));
  }).catch(e => result.replaceChildren(errorBox(e)));
  function pick() {
    const t = tools.find(t => t.name === toolSel.value);
    if (!t) return;
    form = schemaForm(t.input_schema);
    formBox.replaceChildren(h("p", { class: "muted" }, t.description || ""), form.el);
    call.disabled = false;
  }
  load.addEventListener("click", async () => {
    try {
      const q = new URLSearchParams({ route: routeIn.value.trim() || "/mcp" });
      if (keySel.value) q.set("key", keySel.value);
      tools = (await api("GET", "/tools?" + q)).tools;
      toolSel.replaceChildren(...tools.map(t => h("option", { value: t.name }, t.name)));
      toolSel.disabled = !tools.length;
      result.replaceChildren(h("p", { class: "muted", id: "pg-count" }, `${tools.length} tools visible to ${keySel.value || "you"} on ${q.get("route")}`));
      pick();
    } catch (e) { result.replaceChildren(errorBox(e)); }
  });
  toolSel.addEventListener("change", pick);
  call.addEventListener("click", async () => {
    let args;
    try { args = form.read(); } catch (e) { result.replaceChildren(errorBox(e)); return; }
    const body = { name: toolSel.value, arguments: args, route: routeIn.value.trim() || "/mcp" };
    if (keySel.value) body.key = keySel.value;
    call.disabled = true;
    const started = new Date(Date.now() - 1000).toISOString();
    const t0 = performance.now();
    try {
      const res = await api("POST", "/tools/call", body);
      const ms = performance.now() - t0;
      result.replaceChildren(h("p", { id: "pg-latency" }, `${res.isError ? "Tool error" : "OK"} in ${ms.toFixed(0)} ms`),
        h("pre", { id: "pg-output", "aria-label": "Result" }, JSON.stringify(res, null, 2)));
      // The record is written through a queue: look for it a few times.
      const t = tools.find(t => t.name === toolSel.value);
      const q = new URLSearchParams({ server: t.server, tool: t.upstream_name, limit: "1", since: started });
      if (keySel.value) q.set("key", keySel.value);
      for (let i = 0; i < 10; i++) {
        const row = (await api("GET", "/audit?" + q)).calls[0];
        if (row) { result.append(h("h2", {}, "Audit record"), auditTable([row])); break; }
        await new Promise(r => setTimeout(r, 300));
      }
    } catch (e) {
      result.replaceChildren(errorBox(e));
    } finally { call.disabled = false; }
  });
  render(h("h1", {}, "Playground"),
    h("div", { class: "row" }, h("label", {}, "Call as", keySel), routeL, load),
    h("div", { class: "row" }, h("label", {}, "Tool", toolSel)), formBox, call, result);
}

// ---- sessions ----

function sessions() {
  const [filterL, filter] = field("Filter (user, key, client, route)", { id: "ses-filter", type: "search" });
  const list = region("Session list");
  const out = h("div", {});
  let all = [];
  function draw() {
    const f = filter.value.trim().toLowerCase();
    const rows = all.filter(s => !f || [s.user, s.key_alias, s.client_name, s.route].some(v => (v || "").toLowerCase().includes(f)));
    list.replaceChildren(table("Live sessions", [
      { label: "Session", get: s => s.id_prefix },
      { label: "User", get: s => s.user || "" },
      { label: "Key", get: s => s.key_alias || "" },
      { label: "Client", get: s => `${s.client_name || ""} ${s.client_version || ""}` },
      { label: "Route", get: s => s.route || "" },
      { label: "Created", get: s => when(s.created) },
      { label: "Idle", get: s => `${Math.round(s.idle_seconds || 0)} s` },
      { label: "In flight", get: s => s.in_flight ?? 0 },
      { label: "", get: s => twoStep("Terminate", "Confirm terminate", async () => {
        try { const r = await api("POST", "/sessions/terminate", { session_id_prefix: s.id_prefix }); say(`${r.terminated} session(s) terminated`);
          if (r.unconfirmed) warn(`${r.unconfirmed} of the ${r.terminated} session(s) terminated not confirmed ended by every replica within 2 s: a replica may serve them until it hears of their end.`);
          refresh(); }
        catch (e) { out.replaceChildren(errorBox(e)); }
      }) },
    ], rows, "No live sessions."));
  }
  async function refresh() {
    try { all = (await api("GET", "/sessions")).sessions || []; if (!armed(list)) draw(); } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  filter.addEventListener("input", draw);
  render(h("h1", {}, "Sessions"), filterL, list, out);
  every(3000, refresh);
}

// ---- audit ----

function auditTable(rows) {
  return table("Tool calls", [
    { label: "Time", get: c => when(c.time) },
    { label: "Key", get: c => c.key_alias || "" },
    { label: "User", get: c => c.user || "" },
    { label: "Server", get: c => c.server },
    { label: "Tool", get: c => c.tool },
    { label: "Outcome", get: c => h("span", { class: c.outcome === "ok" ? "state-ready" : "error" }, c.outcome) },
    { label: "Fault", get: c => c.fault || "" },
    { label: "ms", get: c => c.duration_ms },
  ], rows, "No tool calls match.");
}

// csv is the audit rows as CSV (RFC 4180). Tool names come from upstreams
// and user names from token claims: a cell a spreadsheet would read as a
// formula (it starts with =, +, -, @, TAB or CR; OWASP "CSV Injection")
// gets a leading single quote, inside a quoted cell, so it stays text.
function csv(rows) {
  const cols = ["time", "key_alias", "user", "team", "server", "tool", "outcome", "fault", "duration_ms", "session", "request_bytes", "response_bytes"];
  const q = v => {
    let s = v === undefined || v === null ? "" : String(v);
    const formula = /^[=+\-@\t\r]/.test(s);
    if (formula) s = "'" + s;
    return formula || /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
  };
  return [cols.join(","), ...rows.map(r => cols.map(c => q(r[c])).join(","))].join("\r\n") + "\r\n";
}

function audit() {
  const inputs = {};
  const fields = ["user", "key", "server", "tool", "outcome"].map(n => { const [l, i] = field(n[0].toUpperCase() + n.slice(1), { id: "audit-" + n, type: "search" }); inputs[n] = i; return l; });
  const live = h("input", { type: "checkbox", id: "audit-live" });
  const list = region("Audit records");
  const more = h("button", { type: "button", class: "secondary", id: "audit-more", hidden: true }, "Older");
  const exportB = h("button", { type: "button", class: "secondary", id: "audit-csv" }, "Export CSV");
  let rows = [];
  let next = "";
  const query = before => {
    const q = new URLSearchParams({ limit: "50" });
    for (const [n, i] of Object.entries(inputs)) if (i.value.trim()) q.set(n, i.value.trim());
    if (before) q.set("before", before);
    return "/audit?" + q;
  };
  async function load(reset) {
    try {
      const page = await api("GET", query(reset ? "" : next));
      rows = reset ? page.calls : rows.concat(page.calls);
      next = page.next || "";
      more.hidden = !next;
      list.replaceChildren(auditTable(rows));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  const form = h("form", { class: "inline" }, fields, h("button", { type: "submit" }, "Filter"), h("label", { class: "check" }, live, "Live tail"));
  form.addEventListener("submit", ev => { ev.preventDefault(); load(true); });
  more.addEventListener("click", () => load(false));
  exportB.addEventListener("click", () => {
    const blob = new Blob([csv(rows)], { type: "text/csv" });
    const a = h("a", { href: URL.createObjectURL(blob), download: "mcpgate-audit.csv" });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  });
  render(h("h1", {}, "Audit"), form, h("div", { class: "row" }, exportB), list, more);
  load(true);
  timers.push(setInterval(() => { if (live.checked) load(true); }, 2000));
}

// ---- my connections ----

function connections() {
  const need = region("Servers that need my account");
  const list = region("Connections");
  const out = h("div", {});
  const revoke = server => twoStep("Revoke", "Confirm revoke", async () => {
    try { await api("DELETE", `/me/connections/${encodeURIComponent(server)}`); say("Revoked"); refresh(); }
    catch (e) { out.replaceChildren(errorBox(e)); }
  });
  function action(s) {
    if (s.auth === "oauth2_user") {
      return h("span", { class: "row" }, h("a", { href: base + s.connect_url, "data-connect": s.server }, s.connected ? "Reconnect" : "Connect"), s.connected ? revoke(s.server) : null);
    }
    const [l, input] = field(`Your credential for ${s.server}`, { type: "password", autocomplete: "off", "data-credential": s.server });
    const save = h("button", { type: "button", "data-save": s.server }, s.connected ? "Replace" : "Save");
    save.addEventListener("click", async () => {
      try { await api("PUT", `/me/credentials/${encodeURIComponent(s.server)}`, { value: input.value }); input.value = ""; say(`Credential for ${s.server} saved`); refresh(); }
      catch (e) { out.replaceChildren(errorBox(e)); }
    });
    return h("span", { class: "row" }, l, save, s.connected ? revoke(s.server) : null);
  }
  async function refresh() {
    try {
      const [ms, cs] = await Promise.all([api("GET", "/me/servers"), api("GET", "/me/connections")]);
      need.replaceChildren(table("Servers that need your own account or credential", [
        { label: "Server", get: s => s.server },
        { label: "Needs", get: s => s.auth === "oauth2_user" ? "your account (connect once)" : "your credential" },
        { label: "State", get: s => h("span", { class: s.connected ? "state-ready" : "state-degraded", "data-connected": s.server }, s.connected ? "connected" : "not connected") },
        { label: "", get: action },
      ], ms.servers || [], "No server here needs your own account."));
      list.replaceChildren(table("My connections", [
        { label: "Server", get: c => c.server },
        { label: "Kind", get: c => c.kind },
        { label: "Scopes", get: c => (c.scopes || []).join(" ") },
        { label: "Expires", get: c => when(c.expires_at) },
        { label: "Last used", get: c => when(c.last_used_at) },
      ], cs.connections || [], "No connections yet."));
    } catch (e) {
      // The master key and an open gateway's anonymous caller are no
      // person: they have no connections of their own, which is no error.
      if (e instanceof APIError && e.status === 403) {
        need.replaceChildren(h("p", { class: "muted", id: "no-person" }, open() ? "Nobody is signed in (this gateway has no keys): connections belong to people, who sign in with their own key or account."
          : "You signed in with a key that is no person's (the master key): connections belong to people, who sign in with their own key or account. Their connections are listed by mcpgate connections list."));
        list.replaceChildren();
        return;
      }
      need.replaceChildren(errorBox(e));
    }
  }
  render(h("h1", {}, "My connections"), need, out, h("h2", {}, "Details"), list);
  refresh();
}

// ---- usage ----

function usage() {
  const by = h("select", { id: "usage-by" }, [["key", "key"], ["user", "user"], ["team", "team"]].map(([v, l]) => h("option", { value: v }, l)));
  const range = h("select", { id: "usage-range" }, [["24h", "the last 24 hours"], ["7d", "the last 7 days"], ["30d", "the last 30 days"]].map(([v, l]) => h("option", { value: v }, l)));
  const body = region("Usage");
  const money = v => (Math.round(v * 100) / 100).toString();
  async function load() {
    try {
      const u = await api("GET", "/usage/series?" + new URLSearchParams({ by: by.value, range: range.value }));
      const times = u.buckets.map(t => new Date(t));
      const name = g => g.group || `(no ${u.by})`;
      const series = f => u.groups.map(g => ({ name: name(g), values: f(g) }));
      body.replaceChildren(
        h("div", { class: "charts" },
          chart({ id: "chart-cost", title: `Cost per ${u.by}`, times, series: series(g => g.cost), fmt: money, kind: "bars", empty: "No priced calls in this period." }),
          chart({ id: "chart-calls", title: `Calls per ${u.by}`, times, series: series(g => g.calls), fmt: v => String(Math.round(v)), kind: "bars", empty: "No tool calls in this period." })),
        table(`Cost and calls per ${u.by}`, [
          { label: u.by[0].toUpperCase() + u.by.slice(1), get: g => name(g) },
          { label: "Calls", get: g => g.total_calls },
          { label: "Cost", get: g => money(g.total_cost) },
        ], u.groups, "No tool calls in this period."));
    } catch (e) { body.replaceChildren(errorBox(e)); }
  }
  by.addEventListener("change", load);
  range.addEventListener("change", load);
  render(h("h1", {}, "Usage"),
    h("p", { class: "muted" }, "Tool calls and their cost (servers.<name>.tools.costs), from the audit log."),
    h("div", { class: "row" }, h("label", {}, "Per", by), h("label", {}, "Over", range)), body);
  load();
}

// ---- toolsets ----

function toolsets() {
  const list = region("Toolset list");
  const out = h("div", {});
  const [nL, nI] = field("Name", { id: "ts-name", required: true, pattern: "[a-z0-9][a-z0-9_-]*" });
  const [sL, sI] = field("Tools, one server a line: server: tool, tool (* for every tool)", { tag: "textarea", id: "ts-servers", rows: 3, required: true });
  const form = h("form", { class: "inline", id: "put-toolset" }, nL, sL, h("button", { type: "submit" }, "Save toolset"));
  const parse = v => {
    const servers = {};
    for (const line of v.split("\n").map(l => l.trim()).filter(Boolean)) {
      const i = line.indexOf(":");
      if (i < 1) throw new Error(`each line is "server: tool, tool" (got "${line}")`);
      servers[line.slice(0, i).trim()] = line.slice(i + 1).split(",").map(x => x.trim()).filter(Boolean);
    }
    return servers;
  };
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    try {
      const name = nI.value.trim();
      await api("PUT", `/toolsets/${encodeURIComponent(name)}`, { servers: parse(sI.value) });
      say(`Toolset ${name} saved`);
      form.reset();
      out.replaceChildren();
      refresh();
    } catch (e) { out.replaceChildren(errorBox(e)); }
  });
  function editIt(t) {
    nI.value = t.name;
    sI.value = Object.entries(t.servers || {}).map(([srv, ts]) => `${srv}: ${ts.join(", ")}`).join("\n");
    sI.focus();
  }
  async function refresh() {
    try {
      const ts = (await api("GET", "/toolsets")).toolsets || [];
      if (armed(list)) return;
      list.replaceChildren(table("Toolsets", [
        { label: "Toolset", get: t => t.name },
        { label: "Tools", get: t => Object.entries(t.servers || {}).map(([srv, tools]) => `${srv}: ${tools.length ? tools.join(", ") : "*"}`).join("; ") },
        { label: "Source", get: t => t.source },
        { label: "", get: t => t.source !== "api" ? h("span", { class: "muted" }, "config file") : h("span", { class: "row" },
          h("button", { type: "button", class: "secondary", onclick: () => editIt(t), "aria-label": `Edit toolset ${t.name}` }, "Edit"),
          twoStep("Remove", "Confirm remove", async () => {
            try { await api("DELETE", `/toolsets/${encodeURIComponent(t.name)}`); say(`Toolset ${t.name} removed`); refresh(); }
            catch (e) { out.replaceChildren(errorBox(e)); }
          })) },
      ], ts, "No toolsets: a toolset names tools of several servers that keys and grants can be given at once."));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  render(h("h1", {}, "Toolsets"), list, h("h2", {}, "Create or replace a runtime toolset"), form, out);
  refresh();
}

// ---- admin events ----

function eventsTable(rows) {
  return table("Admin events", [
    { label: "Time", get: e => when(e.time) },
    { label: "Actor", get: e => e.actor },
    { label: "Action", get: e => e.action },
    { label: "Target", get: e => e.target || "" },
    { label: "Detail", get: e => e.detail ? h("code", {}, JSON.stringify(e.detail)) : "" },
  ], rows, "No admin events match.");
}

function events() {
  const [aL, aI] = field("Actor", { id: "ev-actor", type: "search" });
  const [cL, cI] = field("Action (e.g. key.create)", { id: "ev-action", type: "search" });
  const list = region("Admin events");
  const more = h("button", { type: "button", class: "secondary", id: "ev-more", hidden: true }, "Older");
  let rows = [];
  let next = "";
  async function load(reset) {
    try {
      const q = new URLSearchParams({ limit: "50" });
      if (aI.value.trim()) q.set("actor", aI.value.trim());
      if (cI.value.trim()) q.set("action", cI.value.trim());
      if (!reset && next) q.set("before", next);
      const page = await api("GET", "/audit/events?" + q);
      rows = reset ? page.events : rows.concat(page.events);
      next = page.next || "";
      more.hidden = !next;
      list.replaceChildren(eventsTable(rows));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  const form = h("form", { class: "inline" }, aL, cL, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", ev => { ev.preventDefault(); load(true); });
  more.addEventListener("click", () => load(false));
  render(h("h1", {}, "Admin events"), h("p", { class: "muted" }, "What was changed through the admin API, the CLI and reloads, by whom; never a secret."), form, list, more);
  load(true);
}

// ---- reload ----

function reload() {
  const out = h("div", { id: "reload-out" });
  const history = region("Reloads");
  const names = (label, v) => v && v.length ? h("li", {}, `${label}: ${v.join(", ")}`) : null;
  const go = h("button", { type: "button", id: "reload-go" }, "Reload the config file");
  go.addEventListener("click", async () => {
    go.disabled = true;
    try {
      const r = await api("POST", "/reload");
      const s = r.servers || {}, k = r.keys || {};
      out.replaceChildren(h("p", { id: "reload-result", class: "state-ready" }, r.changed ? "Reloaded: the changes below apply now." : "Reloaded: nothing changed."),
        h("ul", {}, names("Servers added", s.added), names("Servers removed", s.removed), names("Servers changed", s.changed),
          names("Keys added", k.added), names("Keys removed", k.removed), names("Keys changed", k.changed), names("Sections changed", r.sections),
          names("Need a restart", r.restart_required)));
    } catch (e) {
      const problems = e instanceof APIError && e.body && e.body.problems;
      out.replaceChildren(errorBox(e), problems ? table("Problems in the config file", [
        { label: "Field", get: p => p.path || "" },
        { label: "Line", get: p => p.line || "" },
        { label: "Problem", get: p => p.message },
      ], problems) : null);
    } finally { go.disabled = false; loadHistory(); }
  });
  async function loadHistory() {
    try {
      const [ok, bad] = await Promise.all([api("GET", "/audit/events?action=config.reload&limit=20"), api("GET", "/audit/events?action=config.reload_failed&limit=20")]);
      const rows = ok.events.concat(bad.events).sort((a, b) => (a.time < b.time ? 1 : -1)).slice(0, 20);
      history.replaceChildren(eventsTable(rows));
    } catch (e) { history.replaceChildren(errorBox(e)); }
  }
  render(h("h1", {}, "Reload"),
    h("p", { class: "muted" }, "Read the config file again and apply what changed, without dropping sessions (as SIGHUP and mcpgate reload do). A file with problems changes nothing."),
    go, out, h("h2", {}, "Recent reloads"), history);
  loadHistory();
}

// ---- tool integrity ----

// sideBySide lays a line diff ("  " kept, "- " removed, "+ " added) out
// as two columns, the approved definition left and the new one right,
// each run of removals beside the additions that replaced it.
function sideBySide(diff, id) {
  const rows = [];
  let dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i], adds[i]]);
    dels = []; adds = [];
  };
  for (const line of (diff || "").replace(/\n$/, "").split("\n")) {
    const mark = line.slice(0, 2), text = line.slice(2);
    if (mark === "- ") dels.push(text);
    else if (mark === "+ ") adds.push(text);
    else { flush(); rows.push([{ same: text }, { same: text }]); }
  }
  flush();
  const cell = (v, cls) => v === undefined ? h("td", { class: "diff-none" }) :
    typeof v === "object" ? h("td", {}, h("code", {}, v.same)) : h("td", { class: cls }, h("code", {}, v));
  return h("div", { class: "scroll" }, h("table", { class: "diff", id },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Approved"), h("th", { scope: "col" }, "Now offered"))),
    h("tbody", {}, rows.map(([l, r]) => h("tr", {}, cell(l, "diff-del"), cell(r, "diff-add"))))));
}

function integrity() {
  const list = region("Definitions awaiting review");
  const slug = c => `${c.server}-${c.kind}-${c.name}`.replace(/[^A-Za-z0-9_-]/g, "_");
  async function settle(server, names, verb) {
    try {
      const r = await api("POST", `/integrity/${encodeURIComponent(server)}/${verb}`, names ? { tools: names } : {});
      say(`${verb === "approve" ? "Approved" : "Rejected"}: ${server} ${r.settled.join(", ")}`);
    } catch (e) { say(e.message || String(e)); }
    load();
  }
  async function load() {
    try {
      const r = await api("GET", "/integrity");
      if (!r.changes.length) { list.replaceChildren(h("p", { class: "muted", id: "integrity-none" }, "Nothing awaits review: every definition served is the one approved.")); return; }
      list.replaceChildren(...r.changes.map(c => h("section", { class: "review", id: "review-" + slug(c) },
        h("h2", {}, `${c.server} / ${c.name}`, " ", h("span", { class: "muted" }, `(${c.kind}, ${c.status === "new" ? "new" : "changed"})`), " ",
          h("span", { class: c.held ? "state-down" : "state-degraded" }, c.held ? "held: hidden, calls refused" : "served (warn mode)")),
        c.findings.length ? h("ul", { class: "findings" }, c.findings.map(f =>
          h("li", {}, h("b", { class: f.severity === "quarantine" ? "error" : "" }, f.rule), ` (${f.severity}) at ${f.path}: `, h("code", {}, f.excerpt)))) : null,
        sideBySide(c.diff, "diff-" + slug(c)),
        h("div", { class: "row" },
          h("button", { type: "button", class: "approve", onclick: () => settle(c.server, [c.name], "approve") }, `Approve ${c.name}`),
          twoStep(`Reject ${c.name}`, `Reject ${c.name}: sure?`, () => settle(c.server, [c.name], "reject"))))));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  }
  render(h("h1", {}, "Integrity"),
    h("p", { class: "muted" }, "Tool, prompt and resource template definitions that changed since they were approved, or appeared later, with the scanner's findings. In pin mode they are hidden from every list and their calls refused until approved; rejected ones stay held while the server offers them."),
    list);
  load();
}

// ---- router ----

const pages = { overview, servers, keys, toolsets, playground, sessions, audit, usage, events, integrity, reload, connections };
const personPages = new Set(["connections"]);

let triedOpen = false;

function route() {
  clearTimers();
  const r = role();
  if (!r) {
    // An open gateway (no keys, loopback only) needs no sign-in: ask once
    // per page load whether the admin API lets this browser in as it is.
    if (!triedOpen) {
      triedOpen = true;
      probeOpen().then(ok => {
        if (ok) { setOpen(true); setRole("admin"); }
        route();
      });
      return;
    }
    login();
    return;
  }
  const nav = document.getElementById("nav");
  nav.hidden = false;
  document.getElementById("signout").hidden = open();
  document.getElementById("open-banner").hidden = !open();
  for (const a of nav.querySelectorAll("a")) a.hidden = r !== "admin" && !personPages.has(a.getAttribute("href").slice(2));
  let name = (location.hash.match(/^#\/([a-z]+)/) || [])[1] || (r === "admin" ? "overview" : "connections");
  if (!pages[name] || (r !== "admin" && !personPages.has(name))) name = r === "admin" ? "overview" : "connections";
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === "#/" + name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  pages[name]();
  view().focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
window.addEventListener("unhandledrejection", ev => {
  if (ev.reason instanceof APIError && ev.reason.status === 401) { signOut(); login(ev.reason); }
});
document.getElementById("signout").addEventListener("click", () => { signOut(); location.hash = ""; route(); });

// Back from the gateway's login page: redeem the code, then find the role.
auth.finish().then(async done => {
  if (done) {
    setRole(await probeRole());
    location.hash = role() === "admin" ? "#/overview" : "#/connections";
  }
  route();
}).catch(e => { signOut(); login(e); });
