// The test IdP (idp.mjs, oidc-provider) and the test browser (browser.mjs),
// proved against each other the way mcpgate will use them: discovery, an
// authorization code + PKCE flow for alice through the login and consent
// pages, the token endpoint, and the tokens' claims and signatures checked
// against the JWKS; PKCE enforced; the session and grant reused; a refresh;
// bob's claims; a key rotation.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/idp.test.mjs
//
// Env: INTEROP_VERBOSE=1 prints the IdP's output as it arrives.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, createPublicKey, randomBytes, verify } from "node:crypto";

import { Browser, parseForm } from "./browser.mjs";
import { lazyFixture, logTail, startIdP, stepper, stopChild } from "./lib.mjs";

const REDIRECT_URI = "http://127.0.0.1:1/oauth/callback"; // never fetched: the browser stops there
const RESOURCE = "http://127.0.0.1:1/mcp";
const CLIENT = { id: "mcpgate", secret: `secret-${randomBytes(6).toString("hex")}` };
const ALICE = { sub: "user-alice", login: "alice", password: `pw-${randomBytes(4).toString("hex")}` };

const CONFIG = {
  clients: [
    {
      client_id: CLIENT.id,
      client_secret: CLIENT.secret,
      redirect_uris: [REDIRECT_URI],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
    {
      client_id: "machine",
      client_secret: "machine-secret",
      redirect_uris: [],
      grant_types: ["client_credentials"],
      response_types: [],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  accounts: [
    {
      sub: ALICE.sub,
      password: ALICE.password,
      email: "alice@example.com",
      email_verified: true,
      preferred_username: ALICE.login,
      groups: ["platform"],
      realm_access: { roles: ["admin"] },
    },
    {
      sub: "user-bob",
      email: "bob@example.com",
      preferred_username: "bob",
      groups: ["support"],
      realm_access: { roles: ["reader"] },
    },
  ],
};

const b64url = (buf) => Buffer.from(buf).toString("base64url");

function pkce() {
  const verifier = b64url(randomBytes(32));
  return { verifier, challenge: b64url(createHash("sha256").update(verifier).digest()) };
}

/** Decodes a compact JWS and verifies its RS256 signature with a key of jwks. */
function verifyJWT(jwt, jwks) {
  const parts = jwt.split(".");
  assert.equal(parts.length, 3, `not a compact JWS: ${jwt.slice(0, 40)}...`);
  const header = JSON.parse(Buffer.from(parts[0], "base64url"));
  const payload = JSON.parse(Buffer.from(parts[1], "base64url"));
  assert.equal(header.alg, "RS256");
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  assert.ok(jwk, `kid ${header.kid} not in the JWKS (${jwks.keys.map((k) => k.kid)})`);
  const ok = verify("RSA-SHA256", Buffer.from(`${parts[0]}.${parts[1]}`), createPublicKey({ key: jwk, format: "jwk" }), Buffer.from(parts[2], "base64url"));
  assert.ok(ok, "signature does not verify");
  return { header, payload };
}

let idp;
const getIdP = lazyFixture(
  async () => (idp = await startIdP({ config: CONFIG })),
  async () => {
    if (idp) await stopChild(idp.child);
  },
);

async function getJSON(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200, `GET ${url}`);
  return res.json();
}

async function tokenRequest(meta, params, auth = CLIENT) {
  const res = await fetch(meta.token_endpoint, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      authorization: `Basic ${Buffer.from(`${auth.id}:${auth.secret}`).toString("base64")}`,
    },
    body: new URLSearchParams(params).toString(),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, body: await res.json() };
}

function authorizeURL(meta, { challenge, state, nonce, scope = "openid email profile mcp", resource = RESOURCE, method = "S256" }) {
  const u = new URL(meta.authorization_endpoint);
  const p = { response_type: "code", client_id: CLIENT.id, redirect_uri: REDIRECT_URI, scope, state, nonce };
  if (challenge) Object.assign(p, { code_challenge: challenge, code_challenge_method: method });
  if (resource) p.resource = resource;
  u.search = new URLSearchParams(p).toString();
  return u.href;
}

test("idp: authorization code + PKCE through the login and consent pages", { timeout: 60_000 }, async (t) => {
  const { issuer } = await getIdP();
  const step = stepper(t, () => `--- idp output ---\n${logTail(idp.child, 40)}`);
  let meta, jwks, tokens;
  const browser = new Browser();
  const { verifier, challenge } = pkce();
  const state = b64url(randomBytes(12));
  const nonce = b64url(randomBytes(12));

  await step("discovery", async () => {
    meta = await getJSON(`${issuer}/.well-known/openid-configuration`);
    assert.equal(meta.issuer, issuer);
    assert.match(issuer, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(meta.code_challenge_methods_supported, ["S256"]);
    assert.equal(meta.authorization_response_iss_parameter_supported, true);
    assert.ok(meta.grant_types_supported.includes("client_credentials"));
    jwks = await getJSON(meta.jwks_uri);
    assert.ok(jwks.keys.length >= 1 && jwks.keys.every((k) => k.kid && !k.d), "public keys with kids");
  });

  let page;
  await step("authorize -> login page", async () => {
    page = await browser.navigate(authorizeURL(meta, { challenge, state, nonce }), { stopAt: REDIRECT_URI });
    assert.equal(page.stopped, false, `redirected straight to ${page.url}`);
    assert.equal(page.status, 200);
    const form = parseForm(page.body, page.url);
    assert.ok(form, "login page has a form");
    assert.equal(form.method, "POST");
    assert.ok(form.names.has("login") && form.names.has("password"), `fields: ${[...form.names]}`);
    assert.ok(form.action.startsWith(`${issuer}/interaction/`), form.action);
  });

  await step("wrong password and unknown user are refused", async () => {
    const bad = await browser.submit(page, { login: ALICE.login, password: "wrong" }, { stopAt: REDIRECT_URI });
    assert.equal(bad.stopped, false);
    assert.equal(bad.status, 401);
    assert.match(bad.body, /Invalid username or password/);
    const nobody = await browser.submit(bad, { login: "mallory", password: "x" }, { stopAt: REDIRECT_URI });
    assert.equal(nobody.status, 401);
    page = nobody;
  });

  await step("login -> consent page", async () => {
    page = await browser.submit(page, { login: ALICE.login, password: ALICE.password }, { stopAt: REDIRECT_URI });
    assert.equal(page.stopped, false, `no consent page: went to ${page.url}`);
    assert.equal(page.status, 200);
    assert.match(page.body, /Authorize/);
    assert.match(page.body, new RegExp(RESOURCE.replace(/[.:/]/g, "\\$&")), "consent page names the resource");
    const form = parseForm(page.body, page.url);
    assert.ok(form.fields.some(([k, v]) => k === "prompt" && v === "consent"), "hidden prompt=consent");
  });

  let code;
  await step("consent -> redirect_uri with code, state and iss (RFC 9207)", async () => {
    const done = await browser.submit(page, {}, { stopAt: REDIRECT_URI });
    assert.equal(done.stopped, true, `not redirected to the client: at ${done.url} (${done.status})`);
    const u = new URL(done.url);
    assert.equal(u.origin + u.pathname, REDIRECT_URI);
    assert.equal(u.searchParams.get("error"), null, u.searchParams.get("error_description"));
    assert.equal(u.searchParams.get("state"), state);
    assert.equal(u.searchParams.get("iss"), issuer);
    code = u.searchParams.get("code");
    assert.ok(code);
  });

  await step("token endpoint: ID token claims, JWT access token for the resource", async () => {
    const res = await tokenRequest(meta, {
      grant_type: "authorization_code",
      code,
      redirect_uri: REDIRECT_URI,
      code_verifier: verifier,
      resource: RESOURCE,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    tokens = res.body;
    assert.equal(tokens.token_type, "Bearer");
    assert.ok(tokens.refresh_token, "refresh token for a client allowed refresh_token");

    const id = verifyJWT(tokens.id_token, jwks).payload;
    assert.equal(id.iss, issuer);
    assert.equal(id.aud, CLIENT.id);
    assert.equal(id.nonce, nonce);
    assert.equal(id.sub, ALICE.sub);
    assert.equal(id.email, "alice@example.com");
    assert.equal(id.email_verified, true);
    assert.equal(id.preferred_username, ALICE.login);
    assert.deepEqual(id.groups, ["platform"]);
    assert.deepEqual(id.realm_access, { roles: ["admin"] });
    assert.equal(id.password, undefined);

    const at = verifyJWT(tokens.access_token, jwks);
    assert.equal(at.header.typ, "at+jwt");
    assert.equal(at.payload.iss, issuer);
    assert.equal(at.payload.aud, RESOURCE);
    assert.equal(at.payload.sub, ALICE.sub);
    assert.equal(at.payload.client_id, CLIENT.id);
    assert.equal(at.payload.scope, "mcp");
    assert.equal(at.payload.email, "alice@example.com");
    assert.deepEqual(at.payload.groups, ["platform"]);
    assert.deepEqual(at.payload.realm_access, { roles: ["admin"] });
    assert.equal(at.payload.password, undefined);
    assert.ok(at.payload.exp > Date.now() / 1000);
  });

  let refreshToken;
  await step("refresh_token grant: a new JWT for the resource", async () => {
    const res = await tokenRequest(meta, { grant_type: "refresh_token", refresh_token: tokens.refresh_token, resource: RESOURCE });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    refreshToken = res.body.refresh_token ?? tokens.refresh_token;
    const at = verifyJWT(res.body.access_token, jwks).payload;
    assert.equal(at.aud, RESOURCE);
    assert.equal(at.sub, ALICE.sub);
    assert.notEqual(res.body.access_token, tokens.access_token);
  });

  await step("PKCE is required: no code_challenge is refused at the redirect_uri", async () => {
    const r = await browser.navigate(authorizeURL(meta, { state: "s1", nonce: "n1" }), { stopAt: REDIRECT_URI });
    assert.equal(r.stopped, true, `at ${r.url}`);
    const u = new URL(r.url);
    assert.equal(u.searchParams.get("error"), "invalid_request");
    assert.match(u.searchParams.get("error_description"), /PKCE/);
    assert.equal(u.searchParams.get("state"), "s1");
    assert.equal(u.searchParams.get("iss"), issuer);
    const plain = await browser.navigate(authorizeURL(meta, { challenge: "x".repeat(43), method: "plain", state: "s2", nonce: "n2" }), { stopAt: REDIRECT_URI });
    assert.equal(new URL(plain.url).searchParams.get("error"), "invalid_request", "plain is not accepted");
  });

  await step("session and grant reused: no page the second time; a wrong code_verifier is refused", async () => {
    const p = pkce();
    const r = await browser.navigate(authorizeURL(meta, { challenge: p.challenge, state: "s3", nonce: "n3" }), { stopAt: REDIRECT_URI });
    assert.equal(r.stopped, true, `expected an immediate redirect, got a page at ${r.url}`);
    const c = new URL(r.url).searchParams.get("code");
    assert.ok(c);
    const res = await tokenRequest(meta, { grant_type: "authorization_code", code: c, redirect_uri: REDIRECT_URI, code_verifier: verifier, resource: RESOURCE });
    assert.equal(res.status, 400);
    assert.equal(res.body.error, "invalid_grant");
  });

  await step("without a resource: an opaque userinfo token, the claims still in the ID token", async () => {
    const p = pkce();
    const r = await browser.navigate(authorizeURL(meta, { challenge: p.challenge, state: "s4", nonce: "n4", scope: "openid email profile", resource: null }), { stopAt: REDIRECT_URI });
    assert.equal(r.stopped, true, `expected an immediate redirect, got a page at ${r.url}`);
    const c = new URL(r.url).searchParams.get("code");
    const res = await tokenRequest(meta, { grant_type: "authorization_code", code: c, redirect_uri: REDIRECT_URI, code_verifier: p.verifier });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.access_token.split(".").length, 1, "opaque access token");
    const id = verifyJWT(res.body.id_token, jwks).payload;
    assert.equal(id.email, "alice@example.com");
    assert.deepEqual(id.groups, ["platform"]);
    assert.deepEqual(id.realm_access, { roles: ["admin"] });
    const ui = await fetch(meta.userinfo_endpoint, { headers: { authorization: `Bearer ${res.body.access_token}` } });
    assert.equal(ui.status, 200);
    const info = await ui.json();
    assert.equal(info.sub, ALICE.sub);
    assert.deepEqual(info.groups, ["platform"]);
  });

  // Last: a replayed code revokes the grant (RFC 6749 4.1.2), and with it
  // the refresh token.
  await step("a code is single-use; its replay revokes the grant", async () => {
    const res = await tokenRequest(meta, { grant_type: "authorization_code", code, redirect_uri: REDIRECT_URI, code_verifier: verifier });
    assert.equal(res.status, 400);
    assert.equal(res.body.error, "invalid_grant");
    const rt = await tokenRequest(meta, { grant_type: "refresh_token", refresh_token: refreshToken });
    assert.equal(rt.status, 400, JSON.stringify(rt.body));
    assert.equal(rt.body.error, "invalid_grant");
  });
});

test("idp: bob through Browser.authorize; client_credentials; key rotation", { timeout: 60_000 }, async (t) => {
  const { issuer } = await getIdP();
  const step = stepper(t, () => `--- idp output ---\n${logTail(idp.child, 40)}`);
  const meta = await getJSON(`${issuer}/.well-known/openid-configuration`);

  await step("bob's ID token: his groups and roles", async () => {
    const { verifier, challenge } = pkce();
    const pages = [];
    const redirect = await new Browser().authorize(authorizeURL(meta, { challenge, state: "sb", nonce: "nb" }), {
      stopAt: REDIRECT_URI,
      fields: { login: "bob@example.com", password: "any" },
      onPage: (p) => pages.push(new URL(p.url).pathname),
    });
    assert.equal(pages.length, 2, `login and consent pages, got ${pages}`);
    const code = new URL(redirect).searchParams.get("code");
    const res = await tokenRequest(meta, { grant_type: "authorization_code", code, redirect_uri: REDIRECT_URI, code_verifier: verifier });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const id = verifyJWT(res.body.id_token, await getJSON(meta.jwks_uri)).payload;
    assert.equal(id.sub, "user-bob");
    assert.deepEqual(id.groups, ["support"]);
    assert.deepEqual(id.realm_access.roles, ["reader"]);
    // The resource came with the authorization request only: the token
    // request without resource still gets the resource's JWT.
    const at = verifyJWT(res.body.access_token, await getJSON(meta.jwks_uri)).payload;
    assert.equal(at.aud, RESOURCE);
  });

  await step("client_credentials, rotation, JWKS fetch count", async () => {
    const machine = { id: "machine", secret: "machine-secret" };
    const before = await idp.stats();
    const jwks1 = await getJSON(meta.jwks_uri);
    const t1 = await tokenRequest(meta, { grant_type: "client_credentials", resource: RESOURCE, scope: "mcp" }, machine);
    assert.equal(t1.status, 200, JSON.stringify(t1.body));
    const a = verifyJWT(t1.body.access_token, jwks1);
    assert.equal(a.payload.sub, "machine");
    assert.equal(a.payload.aud, RESOURCE);

    const rot = await idp.rotate();
    assert.notEqual(rot.kid, a.header.kid);
    const t2 = await tokenRequest(meta, { grant_type: "client_credentials", resource: RESOURCE, scope: "mcp" }, machine);
    const jwks2 = await getJSON(meta.jwks_uri);
    const b = verifyJWT(t2.body.access_token, jwks2);
    assert.equal(b.header.kid, rot.kid);
    assert.ok(jwks2.keys.some((k) => k.kid === a.header.kid), "the old key stays published");
    assert.equal(jwks1.keys.some((k) => k.kid === rot.kid), false, "the new key was not published before the rotation");

    const after = await idp.stats();
    assert.equal(after.jwksFetches - before.jwksFetches, 2);
    assert.equal(after.rotations, before.rotations + 1);
    assert.equal(after.kid, rot.kid);
  });
});
