// Sign-in through mcpgate's own authorization server (auth.login): the
// console is an OAuth 2.1 public client of it. It registers itself once
// (RFC 7591, the redirect URI is this page), sends the browser to the
// authorization endpoint with PKCE (S256) and state, and redeems the code
// for a token whose audience is the admin API (RFC 8707 resource
// <origin>/admin/v1). The token lives in session storage like a key.

// base is the path the gateway is served under: "" at the root, "/x"
// behind a proxy that serves it at /x (public_url with a path).
export const base = location.pathname.replace(/\/ui(\/.*)?$/, "");
const asMeta = base + "/.well-known/oauth-authorization-server";
const clientItem = "mcpgate.console.client";
const flowItem = "mcpgate.console.flow";
const tokenItem = "mcpgate.token";

export function token() {
  try { return JSON.parse(sessionStorage.getItem(tokenItem) || "null"); } catch { return null; }
}
export function setToken(t) { t ? sessionStorage.setItem(tokenItem, JSON.stringify(t)) : sessionStorage.removeItem(tokenItem); }

export function resource() { return location.origin + base + "/admin/v1"; }
function redirectURI() { return location.origin + base + "/ui/"; }

// metadata is the authorization server's metadata, or null when the
// gateway has none (no auth.login).
export async function metadata() {
  const resp = await fetch(asMeta, { credentials: "omit", cache: "no-store" });
  if (!resp.ok) return null;
  const m = await resp.json().catch(() => null);
  return m && m.authorization_endpoint && m.token_endpoint ? m : null;
}

function b64url(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function random() { return b64url(crypto.getRandomValues(new Uint8Array(32))); }

async function client(meta) {
  const saved = JSON.parse(localStorage.getItem(clientItem) || "null");
  if (saved && saved.issuer === meta.issuer && saved.redirect === redirectURI()) return saved.id;
  if (!meta.registration_endpoint) throw new Error("the authorization server offers no client registration");
  const resp = await fetch(meta.registration_endpoint, {
    method: "POST", credentials: "omit", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ client_name: "mcpgate console", redirect_uris: [redirectURI()], token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"], response_types: ["code"] }),
  });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok || !body.client_id) throw new Error(`registration refused: ${body.error_description || body.error || resp.status}`);
  localStorage.setItem(clientItem, JSON.stringify({ issuer: meta.issuer, redirect: redirectURI(), id: body.client_id }));
  return body.client_id;
}

// start sends the browser to the authorization server.
export async function start(meta) {
  if (!crypto.subtle) throw new Error("this page is not a secure context (use https, or a loopback address)");
  const id = await client(meta);
  const verifier = random();
  const state = random();
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  sessionStorage.setItem(flowItem, JSON.stringify({ verifier, state, id, issuer: meta.issuer, token: meta.token_endpoint }));
  const q = new URLSearchParams({ response_type: "code", client_id: id, redirect_uri: redirectURI(), state,
    code_challenge: challenge, code_challenge_method: "S256", resource: resource() });
  location.assign(meta.authorization_endpoint + "?" + q);
}

async function tokenRequest(endpoint, form) {
  const resp = await fetch(endpoint, { method: "POST", credentials: "omit", body: new URLSearchParams(form),
    headers: { "Content-Type": "application/x-www-form-urlencoded" } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok || !body.access_token) throw new Error(`sign-in refused: ${body.error_description || body.error || resp.status}`);
  return body;
}

// finish redeems the code the authorization server sent back in the
// page's URL, if any; true when a token was stored. The URL is cleaned
// either way, so the code never stays in the history.
export async function finish() {
  const q = new URLSearchParams(location.search);
  if (!q.has("code") && !q.has("error")) return false;
  history.replaceState(null, "", location.pathname + location.hash);
  const flow = JSON.parse(sessionStorage.getItem(flowItem) || "null");
  sessionStorage.removeItem(flowItem);
  if (q.has("error")) throw new Error(`sign-in ended: ${q.get("error_description") || q.get("error")}`);
  if (!flow || q.get("state") !== flow.state) throw new Error("the sign-in answer does not match a sign-in this tab started");
  if (q.has("iss") && q.get("iss") !== flow.issuer) throw new Error("the sign-in answer came from another issuer"); // RFC 9207
  const t = await tokenRequest(flow.token, { grant_type: "authorization_code", code: q.get("code"), redirect_uri: redirectURI(),
    client_id: flow.id, code_verifier: flow.verifier, resource: resource() });
  setToken({ access: t.access_token, refresh: t.refresh_token || "", endpoint: flow.token, client: flow.id });
  return true;
}

// refresh renews the access token once; false when it cannot.
export async function refresh() {
  const t = token();
  if (!t || !t.refresh) return false;
  try {
    const n = await tokenRequest(t.endpoint, { grant_type: "refresh_token", refresh_token: t.refresh, client_id: t.client, resource: resource() });
    setToken({ ...t, access: n.access_token, refresh: n.refresh_token || t.refresh });
    return true;
  } catch { return false; }
}
