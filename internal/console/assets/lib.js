// Helpers shared by the console's pages: the admin API client and DOM
// building. Every text goes in with textContent, never as HTML, so no
// value from the gateway (a tool description, an error) can become markup.

import { token, refresh, base } from "./auth.js";

export { base };

const keyItem = "mcpgate.key";
const roleItem = "mcpgate.role";
const openItem = "mcpgate.open";

export function key() { return sessionStorage.getItem(keyItem) || ""; }
export function setKey(k) { k ? sessionStorage.setItem(keyItem, k) : sessionStorage.removeItem(keyItem); }

// open is true when this tab uses the console without signing in: the
// gateway has no keys and listens on loopback only (the quickstart), so
// the admin API lets callers from this host in without one.
export function open() { return sessionStorage.getItem(openItem) === "1"; }
export function setOpen(v) { v ? sessionStorage.setItem(openItem, "1") : sessionStorage.removeItem(openItem); }

// role is what the signed-in caller may do here: "admin" (every page) or
// "person" (their own connections); "" when nobody is signed in.
export function role() { return (key() || token() || open()) ? sessionStorage.getItem(roleItem) || "" : ""; }
export function setRole(r) { r ? sessionStorage.setItem(roleItem, r) : sessionStorage.removeItem(roleItem); }

export class APIError extends Error {
  constructor(status, body) {
    super(APIError.text(body) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }

  // text is the message of an admin API error ({error, details}) or of a
  // JSON-RPC one ({error: {message}}), whichever the body is.
  static text(body) {
    if (!body) return "";
    const e = body.error;
    if (e && typeof e === "object") return e.message || JSON.stringify(e);
    return [e, body.details].filter(Boolean).join(": ");
  }
}

// api calls the admin API as the signed-in caller: the key in a header,
// or the token from the gateway's login as a bearer token (renewed once
// when it has run out), or nothing on an open gateway. k, when given, is
// a key to try instead ("": no credential at all).
export async function api(method, path, body, k) {
  const send = () => {
    const headers = {};
    const t = token();
    if (k !== undefined) { if (k) headers["X-Mcpgate-Api-Key"] = k; }
    else if (t) headers["Authorization"] = "Bearer " + t.access;
    else if (key()) headers["X-Mcpgate-Api-Key"] = key();
    const init = { method, headers, credentials: "omit", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(base + "/admin/v1" + path, init);
  };
  let resp = await send();
  if (resp.status === 401 && k === undefined && token() && await refresh()) resp = await send();
  const text = await resp.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { error: text }; } }
  // A change made, but not confirmed by every replica of a fleet in time
  // (the admin API's X-Mcpgate-Unconfirmed): said apart from the status
  // line, which the caller's own message replaces; also when a refusal
  // follows a committed change (a grant stored, its reload failed).
  const unconfirmed = Number(resp.headers.get("X-Mcpgate-Unconfirmed"));
  if (unconfirmed > 0) warn(`Done, but ${unconfirmed === 1 ? "this change was" : unconfirmed + " changes were"} not confirmed by every replica within 2 s: ` +
    "a replica may serve what it replaced until it hears of it or resynchronises (the gateway's log says which).");
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

// h builds an element: h("td", {class: "x"}, "text", child, ...).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// table renders rows (objects) under columns [{label, get}]. Each cell
// carries its column's label, which a narrow screen shows beside the
// value when rows become cards (style.css), so no button is off screen.
export function table(caption, columns, rows, empty = "None.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("div", { class: "scroll" }, h("table", { class: "cards-narrow" },
    h("caption", { class: "muted" }, caption),
    h("thead", {}, h("tr", {}, columns.map(c => h("th", { scope: "col" }, c.label)))),
    h("tbody", {}, rows.map(r => h("tr", {}, columns.map(c => h("td", { "data-label": c.label || null }, c.get(r))))))));
}

// ---- charts ----

const svgNS = "http://www.w3.org/2000/svg";

function s(tag, attrs, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function clock(t) { return t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }); }
function day(t) { return t.toLocaleDateString([], { month: "short", day: "numeric" }); }

// chart draws series (each {name, values}) over times (Dates, one per
// value) as lines in an inline SVG, drawn here with no library: a value
// of null is a gap. fmt formats the axis values; kind "bars" stacks bars.
// has says whether there is anything to draw (default: a value but 0).
export function chart({ id, title, times, series, fmt = v => String(v), kind = "lines", empty = "No data yet.", has }) {
  const W = 640, H = 180, L = 52, R = 8, T = 8, B = 22;
  const fig = h("figure", { class: "chart", id, "data-chart": id });
  fig.append(h("figcaption", {}, title));
  if (has === undefined) has = series.some(x => x.values.some(v => v !== null && v !== 0));
  if (!times.length || !has) {
    fig.append(h("p", { class: "muted empty" }, empty));
    return fig;
  }
  const n = times.length;
  let top = 0;
  if (kind === "bars") {
    for (let i = 0; i < n; i++) top = Math.max(top, series.reduce((a, x) => a + (x.values[i] || 0), 0));
  } else {
    for (const x of series) for (const v of x.values) if (v !== null) top = Math.max(top, v);
  }
  top = niceMax(top);
  const X = i => L + (n === 1 ? 0 : i * (W - L - R) / (n - 1));
  const Y = v => T + (H - T - B) * (1 - v / top);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}: chart of ${series.map(x => x.name).join(", ")}` });
  for (const f of [0, 0.5, 1]) {
    svg.append(s("line", { class: "grid", x1: L, x2: W - R, y1: Y(top * f), y2: Y(top * f) }));
    svg.append(s("text", { class: "axis", x: L - 4, y: Y(top * f) + 4, "text-anchor": "end" }, fmt(top * f)));
  }
  const label = (n > 1 && times[n - 1] - times[0] > 36 * 3600e3) ? day : clock;
  svg.append(s("text", { class: "axis", x: L, y: H - 6, "text-anchor": "start" }, label(times[0])));
  svg.append(s("text", { class: "axis", x: W - R, y: H - 6, "text-anchor": "end" }, label(times[n - 1])));
  series.forEach((x, k) => {
    const c = "c" + (k % 8);
    if (kind === "bars") {
      const bw = Math.max(1, (W - L - R) / n - 2);
      x.values.forEach((v, i) => {
        if (!v) return;
        const below = series.slice(0, k).reduce((a, y) => a + (y.values[i] || 0), 0);
        svg.append(s("rect", { class: "bar " + c, x: L + i * (W - L - R) / n + 1, y: Y(below + v), width: bw, height: Y(below) - Y(below + v), "data-series": x.name },
          s("title", {}, `${x.name} ${label(times[i])}: ${fmt(v)}`)));
      });
      return;
    }
    let d = "";
    x.values.forEach((v, i) => {
      if (v === null) return;
      const prevGap = i === 0 || x.values[i - 1] === null;
      d += `${prevGap ? "M" : "L"}${X(i).toFixed(1)},${Y(v).toFixed(1)}`;
      // A lone point has no segment to draw: a dot shows it.
      if (prevGap && (i === n - 1 || x.values[i + 1] === null)) svg.append(s("circle", { class: "dot " + c, cx: X(i).toFixed(1), cy: Y(v).toFixed(1), r: 2.5 }));
    });
    if (d) svg.append(s("path", { class: "line " + c, d, "data-series": x.name }));
  });
  fig.append(svg, h("ul", { class: "legend" }, series.map((x, k) => h("li", { class: "c" + (k % 8) }, x.name))));
  return fig;
}

// warn shows msg in the alert region until dismissed or replaced.
export function warn(msg) {
  const w = document.getElementById("warning");
  w.replaceChildren(h("span", {}, msg), " ", h("button", { type: "button", class: "link", onclick: () => w.replaceChildren() }, "Dismiss"));
}

export function say(msg) {
  const s = document.getElementById("status");
  s.textContent = msg;
  clearTimeout(say.t);
  say.t = setTimeout(() => { s.textContent = ""; }, 4000);
}

export function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, err instanceof APIError ? `${err.message} (HTTP ${err.status})` : String(err.message || err));
}

export function when(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString();
}

// field is a labelled input.
export function field(label, attrs) {
  const input = h(attrs.tag || "input", { ...attrs, tag: undefined });
  return [h("label", {}, label, input), input];
}

// twoStep is a button that asks once more before it acts.
export function twoStep(label, confirmLabel, act) {
  const b = h("button", { type: "button", class: "danger" }, label);
  b.addEventListener("click", async () => {
    if (b.dataset.armed !== "1") {
      b.dataset.armed = "1";
      b.textContent = confirmLabel;
      setTimeout(() => { b.dataset.armed = ""; b.textContent = label; }, 5000);
      return;
    }
    b.dataset.armed = "";
    b.textContent = label;
    b.disabled = true;
    try { await act(); } finally { b.disabled = false; }
  });
  return b;
}
