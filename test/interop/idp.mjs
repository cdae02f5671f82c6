// A real OpenID Provider on loopback for mcpgate's identity tests:
// oidc-provider (panva's certified OpenID Provider, pinned in package.json)
// with static clients and accounts, PKCE (S256) required, resource
// indicators (RFC 8707) that yield JWT access tokens (RFC 9068) whose aud is
// the requested resource, RFC 9207 iss in every authorization response, a
// login and a consent page of its own, and control endpoints to rotate the
// signing key and count JWKS fetches. Test use only: plain http, keys made
// at start and kept in memory.
//
// Run:
//   node idp.mjs [--port N] [--config FILE] [--ignore-stdin]
//   IDP_CONFIG='{"accounts":[...]}' node idp.mjs
// When it listens it prints one JSON line on stdout, and nothing else:
//   {"issuer":"http://127.0.0.1:PORT","pid":1234,"port":PORT}
// Everything else (oidc-provider's notices, errors) goes to stderr. It exits
// when its stdin closes (so a parent that dies never leaves it running;
// --ignore-stdin turns that off, e.g. for `node idp.mjs &` by hand) and on
// SIGTERM or SIGINT.
//
// Port: --port N (or "port" in the config); 0 or absent picks a free one.
// Config: --config FILE, else $IDP_CONFIG_FILE, else $IDP_CONFIG (JSON
// text), else the built-in DEFAULT_CONFIG below. A JSON object:
//   clients   [{client_id, client_secret, redirect_uris, grant_types,
//              response_types, token_endpoint_auth_method, scope, ...,
//              claims}]  static clients: any oidc-provider client metadata;
//              "claims" (not metadata) is an object of claims added to the
//              client's client_credentials access tokens. An application_type
//              "native" client may use its loopback redirect_uris on any port.
//   accounts  [{sub, password, ...claims}]  sub is the account id; the login
//              form takes the sub, preferred_username or email; "password",
//              if set, must match, else any non-empty password is accepted.
//              Every other member is a claim (email, email_verified,
//              preferred_username, name, groups, realm_access: {roles}, ...).
//   claims    scope -> claim names (oidc-provider's "claims"); default
//              CLAIMS below: groups and realm_access come with openid.
//   resourceScope  space-separated scopes any resource server accepts
//              (default "mcp mcp:admin"); requested scopes outside it are
//              dropped from its access tokens.
//   resources {"<resource url>": {scope}}  a scope set per resource.
//   accessTokenTTL  seconds (default 600).
//
// Tokens: the ID token carries the claims of the granted scopes
// (conformIdTokenClaims: false), so sub, groups, realm_access with openid,
// email/email_verified with email, preferred_username/name with profile.
// A token request (or an authorization request) with resource=<absolute
// http(s) URL> gets a JWT access token signed RS256, with aud = that URL,
// scope, client_id, and for a person every account claim but sub/password
// (email, preferred_username, groups, realm_access, ...); for
// client_credentials sub = client_id and the client's "claims". A token
// request without resource reuses the authorization request's
// (useGrantedResource); without any resource the access token is opaque
// (userinfo only). Refresh tokens go to every client allowed the
// refresh_token grant (no offline_access needed).
//
// Control endpoints (not OIDC; no authentication, loopback only):
//   POST /__control/rotate  adds a new RSA key at the head of the JWKS and
//        signs everything from then on with it (older keys stay published);
//        answers {"kid":NEW,"kids":[all, newest first]}.
//   GET  /__control/stats   {"jwksFetches":N,"rotations":N,"kid":CURRENT,
//        "kids":[...]}: jwksFetches counts the GET /jwks requests so far.
//
// Importable too: startIdP(config, {port}) resolves to {issuer, port,
// server, rotate(), stats(), close()} in this process.

import * as crypto from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import { fileURLToPath } from "node:url";
import Provider, { errors } from "oidc-provider";

/** Scope -> claims released in the ID token (and at userinfo). */
export const CLAIMS = {
  openid: ["sub", "groups", "realm_access"],
  email: ["email", "email_verified"],
  profile: ["preferred_username", "name", "given_name", "family_name"],
};

/** The configuration used when none is given. */
export const DEFAULT_CONFIG = {
  clients: [
    {
      client_id: "mcpgate",
      client_secret: "mcpgate-secret",
      redirect_uris: ["http://127.0.0.1:8080/oauth/callback"],
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
      claims: { realm_access: { roles: ["service"] } },
    },
  ],
  accounts: [
    {
      sub: "user-alice",
      email: "alice@example.com",
      email_verified: true,
      preferred_username: "alice",
      name: "Alice Admin",
      groups: ["platform"],
      realm_access: { roles: ["admin"] },
    },
    {
      sub: "user-bob",
      email: "bob@example.com",
      email_verified: true,
      preferred_username: "bob",
      name: "Bob Reader",
      groups: ["support"],
      realm_access: { roles: ["reader"] },
    },
  ],
};

const NOT_CLAIMS = new Set(["sub", "password"]);

function newSigningKey() {
  const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = privateKey.export({ format: "jwk" });
  return { ...jwk, use: "sig", alg: "RS256", kid: crypto.randomBytes(9).toString("base64url") };
}

const html = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function page(title, body) {
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${html(title)}</title></head>
<body><h1>${html(title)}</h1>
${body}
</body></html>`;
}

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const c of req) {
    size += c.length;
    if (size > 64 << 10) throw new Error("form body too large");
    chunks.push(c);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString("utf8"));
}

/**
 * Starts the provider in this process. config as described at the top of
 * this file; opts.port (0: a free one). Resolves to
 * {issuer, port, server, rotate(), stats(), close()}.
 */
export async function startIdP(config = DEFAULT_CONFIG, { port = 0 } = {}) {
  const accounts = new Map();
  for (const a of config.accounts ?? []) {
    if (!a.sub) throw new Error(`account without sub: ${JSON.stringify(a)}`);
    accounts.set(a.sub, a);
  }
  const findLogin = (login) =>
    accounts.get(login) ??
    [...accounts.values()].find((a) => a.preferred_username === login || a.email === login);

  const clientClaims = new Map();
  const clients = (config.clients ?? []).map(({ claims, ...metadata }) => {
    if (claims) clientClaims.set(metadata.client_id, claims);
    return metadata;
  });
  const resourceScope = config.resourceScope ?? "mcp mcp:admin";
  const accessTokenTTL = config.accessTokenTTL ?? 600;
  const cookieKeys = [crypto.randomBytes(32).toString("base64url")];

  const keys = [newSigningKey()]; // newest first: it signs
  const counters = { jwksFetches: 0, rotations: 0 };

  const server = http.createServer();
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const actualPort = server.address().port;
  const issuer = `http://127.0.0.1:${actualPort}`;

  const configuration = () => ({
    clients,
    jwks: { keys: keys.map((k) => ({ ...k })) },
    cookies: { keys: cookieKeys },
    claims: config.claims ?? CLAIMS,
    responseTypes: ["code"],
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => oneOf,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resourceIndicator) => {
          let u;
          try {
            u = new URL(resourceIndicator);
          } catch {
            throw new errors.InvalidTarget();
          }
          if ((u.protocol !== "http:" && u.protocol !== "https:") || u.hash) throw new errors.InvalidTarget();
          return {
            scope: config.resources?.[resourceIndicator]?.scope ?? resourceScope,
            audience: resourceIndicator,
            accessTokenTTL,
            accessTokenFormat: "jwt",
            jwt: { sign: { alg: "RS256", kid: keys[0].kid } },
          };
        },
      },
    },
    extraTokenClaims: (_ctx, token) => {
      if (token.accountId) {
        const a = accounts.get(token.accountId);
        if (!a) return undefined;
        return Object.fromEntries(Object.entries(a).filter(([k]) => !NOT_CLAIMS.has(k)));
      }
      if (token.kind === "ClientCredentials") return clientClaims.get(token.clientId);
      return undefined;
    },
    issueRefreshToken: (_ctx, client) => client.grantTypeAllowed("refresh_token"),
    findAccount: (_ctx, sub) => {
      const a = accounts.get(sub);
      if (!a) return undefined;
      return {
        accountId: sub,
        claims: () => Object.fromEntries(Object.entries(a).filter(([k]) => k !== "password")),
      };
    },
    ttl: { AccessToken: accessTokenTTL, ClientCredentials: accessTokenTTL },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  });

  // A new Provider on every rotation: the JWKS is fixed when one is made.
  // Grants, sessions, codes and interactions live in oidc-provider's
  // in-memory adapter, which every Provider in the process shares, and the
  // cookie keys stay the same, so a flow under way survives a rotation.
  let provider;
  let callback;
  const makeProvider = () => {
    provider = new Provider(issuer, configuration());
    for (const ev of ["server_error", "grant.error", "authorization.error", "introspection.error"]) {
      provider.on(ev, (_ctx, err) => console.error(`idp: ${ev}: ${err?.message} ${err?.error_description ?? ""}`));
    }
    callback = provider.callback();
  };
  makeProvider();

  const rotate = () => {
    keys.unshift(newSigningKey());
    counters.rotations++;
    makeProvider();
    return { kid: keys[0].kid, kids: keys.map((k) => k.kid) };
  };
  const stats = () => ({ ...counters, kid: keys[0].kid, kids: keys.map((k) => k.kid) });

  const json = (res, status, body) => {
    res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
    res.end(JSON.stringify(body));
  };
  const sendHTML = (res, status, body) => {
    res.writeHead(status, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
    res.end(body);
  };

  function loginPage(uid, details, error = "") {
    return page(
      "Sign in",
      `${error ? `<p class="error">${html(error)}</p>` : ""}
<form method="post" action="/interaction/${html(uid)}/login" autocomplete="off">
<input type="hidden" name="prompt" value="login">
<label>Username <input type="text" name="login" value="${html(details.params.login_hint ?? "")}" required></label>
<label>Password <input type="password" name="password" required></label>
<button type="submit">Sign in</button>
</form>
<form method="post" action="/interaction/${html(uid)}/abort"><button type="submit">Cancel</button></form>`,
    );
  }

  function consentPage(uid, details, clientId) {
    const d = details.prompt.details;
    const scopes = [...(d.missingOIDCScope ?? []), ...Object.values(d.missingResourceScopes ?? {}).flat()];
    const resources = Object.keys(d.missingResourceScopes ?? {});
    return page(
      "Authorize",
      `<p>${html(clientId)} asks for: ${html(scopes.join(" ") || "(nothing new)")}</p>
${resources.length ? `<p>for ${resources.map(html).join(", ")}</p>` : ""}
<form method="post" action="/interaction/${html(uid)}/confirm">
<input type="hidden" name="prompt" value="consent">
<button type="submit" autofocus>Continue</button>
</form>
<form method="post" action="/interaction/${html(uid)}/abort"><button type="submit">Deny</button></form>`,
    );
  }

  async function interaction(req, res, uid, action) {
    const details = await provider.interactionDetails(req, res);
    if (details.uid !== uid) throw new Error("interaction cookie is for another interaction");
    const { prompt, params } = details;
    if (req.method === "GET" && !action) {
      if (prompt.name === "login") return sendHTML(res, 200, loginPage(uid, details));
      if (prompt.name === "consent") return sendHTML(res, 200, consentPage(uid, details, params.client_id));
      return sendHTML(res, 501, page("Error", `<p>prompt ${html(prompt.name)} not implemented</p>`));
    }
    if (req.method !== "POST") return sendHTML(res, 405, page("Error", "<p>method not allowed</p>"));
    const form = await readForm(req);
    switch (action) {
      case "login": {
        if (prompt.name !== "login") throw new Error(`login submitted, prompt is ${prompt.name}`);
        const a = findLogin(form.get("login") ?? "");
        const pw = form.get("password") ?? "";
        const ok = a && pw !== "" && (a.password === undefined || a.password === pw);
        if (!ok) return sendHTML(res, 401, loginPage(uid, details, "Invalid username or password."));
        return provider.interactionFinished(
          req,
          res,
          { login: { accountId: a.sub, amr: ["pwd"] } },
          { mergeWithLastSubmission: false },
        );
      }
      case "confirm": {
        if (prompt.name !== "consent") throw new Error(`consent submitted, prompt is ${prompt.name}`);
        const d = prompt.details;
        const grant = details.grantId
          ? await provider.Grant.find(details.grantId)
          : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
        if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(" "));
        if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
        for (const [indicator, scope] of Object.entries(d.missingResourceScopes ?? {})) {
          grant.addResourceScope(indicator, scope.join(" "));
        }
        const grantId = await grant.save();
        return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
      }
      case "abort":
        return provider.interactionFinished(
          req,
          res,
          { error: "access_denied", error_description: "End-User aborted interaction" },
          { mergeWithLastSubmission: false },
        );
      default:
        return sendHTML(res, 404, page("Error", "<p>not found</p>"));
    }
  }

  server.on("request", async (req, res) => {
    const path = new URL(req.url, issuer).pathname;
    try {
      if (path === "/__control/rotate") {
        if (req.method !== "POST") return json(res, 405, { error: "POST only" });
        return json(res, 200, rotate());
      }
      if (path === "/__control/stats") return json(res, 200, stats());
      const m = /^\/interaction\/([^/]+)(?:\/(login|confirm|abort))?$/.exec(path);
      if (m) return await interaction(req, res, m[1], m[2]);
      if (path === "/jwks" && req.method === "GET") counters.jwksFetches++;
      return callback(req, res);
    } catch (err) {
      console.error(`idp: ${req.method} ${path}: ${err?.stack ?? err}`);
      if (!res.headersSent) sendHTML(res, 400, page("Error", `<p>${html(err?.message ?? err)}</p>`));
      else res.end();
    }
  });

  const close = () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return { issuer, port: actualPort, server, rotate, stats, close };
}

function parseArgs(argv) {
  const out = { port: undefined, config: undefined, ignoreStdin: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--port") out.port = Number(val());
    else if (a.startsWith("--port=")) out.port = Number(a.slice(7));
    else if (a === "--config") out.config = val();
    else if (a.startsWith("--config=")) out.config = a.slice(9);
    else if (a === "--ignore-stdin") out.ignoreStdin = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (out.port !== undefined && !(Number.isInteger(out.port) && out.port >= 0 && out.port < 65536)) {
    throw new Error("--port must be 0..65535");
  }
  return out;
}

function loadConfig(file) {
  file ??= process.env.IDP_CONFIG_FILE || undefined;
  if (file) return JSON.parse(readFileSync(file, "utf8"));
  if (process.env.IDP_CONFIG) return JSON.parse(process.env.IDP_CONFIG);
  return DEFAULT_CONFIG;
}

async function main() {
  // stdout carries the ready line only: oidc-provider's notices
  // (console.info) go to stderr with everything else.
  console.log = console.info = (...args) => console.error(...args);
  let args, config;
  try {
    args = parseArgs(process.argv.slice(2));
    config = loadConfig(args.config);
  } catch (err) {
    console.error(`idp: ${err.message}`);
    process.exit(2);
  }
  const idp = await startIdP(config, { port: args.port ?? config.port ?? 0 });
  let stopping = false;
  const stop = async (why) => {
    if (stopping) return;
    stopping = true;
    console.error(`idp: stopping (${why})`);
    await idp.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  if (!args.ignoreStdin) {
    process.stdin.on("end", () => stop("stdin closed"));
    process.stdin.on("error", () => stop("stdin error"));
    process.stdin.resume();
  }
  process.stdout.write(JSON.stringify({ issuer: idp.issuer, pid: process.pid, port: idp.port }) + "\n");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err) => {
    console.error(`idp: ${err?.stack ?? err}`);
    process.exit(1);
  });
}
