// Helpers shared by the console's pages: the admin API client and DOM
// building. Every text goes in with textContent, never as HTML, so no
// value from the gateway (a tool description, an error) can become markup.

import { token, refresh, base } from "./auth.js";

export { base };

const keyItem = "mcpgate.key";
const roleItem = "mcpgate.role";

export function key() { return sessionStorage.getItem(keyItem) || ""; }
export function setKey(k) { k ? sessionStorage.setItem(keyItem, k) : sessionStorage.removeItem(keyItem); }

// role is what the signed-in caller may do here: "admin" (every page) or
// "person" (their own connections); "" when nobody is signed in.
export function role() { return (key() || token()) ? sessionStorage.getItem(roleItem) || "" : ""; }
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
// when it has run out). k, when given, is a key to try instead.
export async function api(method, path, body, k) {
  const send = () => {
    const headers = {};
    const t = token();
    if (k !== undefined) headers["X-Mcpgate-Api-Key"] = k;
    else if (t) headers["Authorization"] = "Bearer " + t.access;
    else headers["X-Mcpgate-Api-Key"] = key();
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

// table renders rows (objects) under columns [{label, get}].
export function table(caption, columns, rows, empty = "None.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("div", { class: "scroll" }, h("table", {},
    h("caption", { class: "muted", style: null }, caption),
    h("thead", {}, h("tr", {}, columns.map(c => h("th", { scope: "col" }, c.label)))),
    h("tbody", {}, rows.map(r => h("tr", {}, columns.map(c => h("td", {}, c.get(r))))))));
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
