// Era-bridging interop test: an OLD-era client, the MCP TypeScript SDK
// (speaks up to 2025-11-25), talks through mcpgate to a NEW-era upstream,
// test/interop/statelessserver (the official go-sdk in stateless mode,
// speaking only 2026-07-28 over streamable HTTP).
//
// The upstream asks for client input with Multi Round-Trip Requests: its
// first answer to ask_name / ask_model / ask_roots is input_required
// (elicitation/create, sampling/createMessage, roots/list + requestState).
// The gateway must ask the TypeScript client those questions as ordinary
// server->client requests on its session, retry the upstream with
// inputResponses + requestState, and hand the client one ordinary result.
//
// The upstream is configured twice: "pinned" (protocol_version: 2026-07-28)
// and "probed" (protocol_version: auto, which probes server/discover); every
// check runs against both.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/stateless.test.mjs
//
// Env:
//   INTEROP_GATEWAY_BIN=... use this mcpgate binary instead of building one.
//   INTEROP_VERBOSE=1       print gateway and upstream output as it arrives.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..", "..");
const VERBOSE = process.env.INTEROP_VERBOSE === "1";

const REQ = { timeout: 15_000 }; // per-request SDK timeout
const OLD_ERA = "2025-11-25";
const ABOUT_URI = "info://statelessserver/about";
// Two gateway entries for the same upstream: the revision pinned, and probed.
const SERVERS = { pinned: "2026-07-28", probed: "auto" };
const UPSTREAM_TOOLS = ["echo", "region_echo", "ask_name", "ask_model", "ask_roots"];

// A distinctive value per run, so that no assertion can pass on a constant.
const tag = (what) => `${what}-${randomBytes(4).toString("hex")}`;

// ---------------------------------------------------------------------------
// helpers (the same approach as everything.test.mjs)

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  const srv = net.createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/** Polls until fn() returns a truthy value; throws after ms with a message. */
async function waitFor(what, ms, fn) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** A child process whose stderr/stdout are kept (bounded) for diagnostics. */
function spawnLogged(label, cmd, args, opts = {}) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
  child.logText = "";
  const keep = (chunk) => {
    const s = chunk.toString();
    child.logText += s;
    if (child.logText.length > 400_000) child.logText = child.logText.slice(-300_000);
    if (VERBOSE) process.stderr.write(s.replace(/^/gm, `[${label}] `));
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  child.exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return child;
}

async function stopChild(child, signal = "SIGTERM", graceMs = 5_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exited;
  child.kill(signal);
  const res = await Promise.race([child.exited, sleep(graceMs).then(() => null)]);
  if (res) return res;
  child.kill("SIGKILL");
  await child.exited;
  return { code: null, signal: "SIGKILL", timedOut: true };
}

function textOf(result) {
  assert.ok(Array.isArray(result?.content), `result has no content array: ${JSON.stringify(result)}`);
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

async function goBuild(out, pkg) {
  await promisify(execFile)("go", ["build", "-o", out, pkg], {
    cwd: ROOT,
    timeout: 240_000,
    maxBuffer: 16 << 20,
  }).catch((err) => {
    throw new Error(`go build ${pkg} failed:\n${err.stderr || err.message}`);
  });
  return out;
}

// ---------------------------------------------------------------------------
// fixtures: the stateless upstream, the gateway

let tmp;
let upstream; // { child, url }
let gateway; // { child, base }

async function startUpstream(bin) {
  const child = spawnLogged("statelessserver", bin, ["-addr", "127.0.0.1:0"], { cwd: tmp });
  try {
    const url = await waitFor("statelessserver to print its LISTEN line", 10_000, () => {
      if (child.exitCode !== null) throw new Error(`statelessserver exited ${child.exitCode}:\n${child.logText}`);
      return /^LISTEN (\S+)$/m.exec(child.logText)?.[1];
    });
    return { child, url };
  } catch (err) {
    await stopChild(child, "SIGKILL");
    throw err;
  }
}

function gatewayConfig(listen, upstreamURL) {
  // JSON strings are valid YAML scalars.
  const q = (s) => JSON.stringify(s);
  const lines = [`listen: ${listen}`, "servers:"];
  for (const [name, pv] of Object.entries(SERVERS)) {
    lines.push(`  ${name}:`, "    transport: http", `    url: ${q(`${upstreamURL}?via=${name}`)}`, `    protocol_version: ${q(pv)}`, "    timeout: 20s");
  }
  return lines.join("\n") + "\n";
}

async function startGateway(bin, upstreamURL) {
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    const listen = `127.0.0.1:${await freePort()}`;
    const configPath = path.join(tmp, "mcpgate.yaml");
    writeFileSync(configPath, gatewayConfig(listen, upstreamURL));
    const child = spawnLogged("mcpgate", bin, ["serve", "--config", configPath, "--listen", listen, "--log-level", "debug"], {
      cwd: tmp,
    });
    const base = `http://${listen}`;
    try {
      await waitFor("mcpgate GET /healthz = 200", 20_000, async () => {
        if (child.exitCode !== null) throw new Error(`mcpgate exited ${child.exitCode}:\n${child.logText}`);
        try {
          const res = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(1_000) });
          await res.arrayBuffer();
          return res.status === 200;
        } catch {
          return false;
        }
      });
      return { child, base };
    } catch (err) {
      lastErr = err;
      await stopChild(child, "SIGKILL");
      if (!/EADDRINUSE|address already in use/.test(child.logText)) break;
    }
  }
  throw lastErr;
}

function diag() {
  let out = "";
  if (gateway) out += `mcpgate output (last 40 lines):\n${gateway.child.logText.split("\n").slice(-40).join("\n")}\n`;
  if (upstream) out += `statelessserver output (last 20 lines):\n${upstream.child.logText.split("\n").slice(-20).join("\n")}\n`;
  return out;
}

let fixturesStarted; // promise of the running upstream and gateway

/**
 * Builds and starts the upstream and the gateway once, on first use. Not in
 * a before hook: node:test runs hooks even when a --test-name-pattern
 * selects none of this file's tests, and then does not wait for them.
 */
function fixtures() {
  fixturesStarted ??= (async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-stateless-"));
    const [gwBin, upBin] = await Promise.all([
      process.env.INTEROP_GATEWAY_BIN
        ? path.resolve(process.env.INTEROP_GATEWAY_BIN)
        : goBuild(path.join(tmp, "mcpgate"), "./cmd/mcpgate"),
      goBuild(path.join(tmp, "statelessserver"), "./test/interop/statelessserver"),
    ]);
    upstream = await startUpstream(upBin);
    gateway = await startGateway(gwBin, upstream.url);
  })();
  return fixturesStarted;
}

after(async () => {
  if (!fixturesStarted) return;
  await fixturesStarted.catch(() => {});
  if (gateway) await stopChild(gateway.child, "SIGKILL", 1_000);
  if (upstream) await stopChild(upstream.child, "SIGKILL", 1_000);
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// the downstream client

/**
 * Connects an SDK client declaring elicitation, sampling and roots. Its
 * handlers record the requests they get and answer with c.answers (which a
 * check may change).
 */
async function connectClient(url, name) {
  const client = new Client(
    { name: `mcpgate-stateless-${name}`, version: "1.0.0" },
    { capabilities: { elicitation: {}, sampling: {}, roots: { listChanged: true } } },
  );
  const c = {
    client,
    seen: { elicitation: [], sampling: [], roots: 0, errors: [] },
    answers: {
      elicitation: { action: "accept", content: { name: tag("Ada") } },
      sampling: { model: "interop-model", role: "assistant", content: { type: "text", text: tag("sampled") }, stopReason: "endTurn" },
      roots: { roots: [{ uri: `file:///tmp/${tag("root")}`, name: "r1" }] },
    },
  };
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    c.seen.elicitation.push(req.params);
    const a = c.answers.elicitation;
    if (a instanceof Error) throw a;
    return a;
  });
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    c.seen.sampling.push(req.params);
    return c.answers.sampling;
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    c.seen.roots++;
    return c.answers.roots;
  });
  client.onerror = (err) => c.seen.errors.push(String(err?.message ?? err));
  c.transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(c.transport, REQ);
  return c;
}

async function closeClient(c) {
  if (!c) return;
  if (c.transport.sessionId) await c.transport.terminateSession().catch(() => {});
  await c.client.close().catch(() => {});
}

/** Returns step(name, fn): a subtest of t whose failure carries diag(). */
function stepper(t) {
  return (name, fn) =>
    t.test(name, { timeout: 20_000 }, async () => {
      try {
        await fn();
      } catch (err) {
        err.message += `\n--- diagnostics ---\n${diag()}`;
        throw err;
      }
    });
}

// ---------------------------------------------------------------------------
// the checks, once per gateway entry

for (const [server, pv] of Object.entries(SERVERS)) {
  // The timeout includes building mcpgate and the upstream on a cold cache.
  test(`stateless: old-era TS client -> mcpgate -> 2026-07-28 go-sdk upstream (${server}, protocol_version: ${pv})`, { timeout: 300_000 }, async (t) => {
    await fixtures();
    const step = stepper(t);
    const tool = (n) => `${server}__${n}`;
    const call = (c, n, args = {}) => c.client.callTool({ name: tool(n), arguments: args }, undefined, REQ);
    let c;
    try {
      c = await connectClient(`${gateway.base}/mcp`, server);
      const { client, seen } = c;

      await step("the client negotiated the old era with the gateway", async () => {
        assert.equal(c.transport.protocolVersion, OLD_ERA);
        const caps = client.getServerCapabilities();
        assert.ok(caps?.tools && caps?.prompts && caps?.resources, `server capabilities: ${JSON.stringify(caps)}`);
      });

      await step("tools/list has the upstream's tools, prefixed", async () => {
        const { tools } = await client.listTools(undefined, REQ);
        const names = tools.map((x) => x.name);
        for (const n of UPSTREAM_TOOLS) assert.ok(names.includes(tool(n)), `${tool(n)} in tools/list: ${names.join(", ")}`);
        const region = tools.find((x) => x.name === tool("region_echo"));
        assert.equal(region.inputSchema.properties.region["x-mcp-header"], "Region", JSON.stringify(region.inputSchema));
      });

      await step("tools/call echo", async () => {
        const text = tag("echo ✓");
        const r = await call(c, "echo", { text });
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        assert.equal(textOf(r), text);
      });

      await step("tools/call region_echo (the gateway must send Mcp-Param-Region)", async () => {
        const query = tag("q");
        const r = await call(c, "region_echo", { region: "eu-west-1", query });
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        assert.equal(textOf(r), `region=eu-west-1 query=${query}`);
      });

      await step("ask_name: input_required elicitation is asked on the client's session", async () => {
        const before = seen.elicitation.length;
        const name = c.answers.elicitation.content.name;
        const r = await call(c, "ask_name");
        assert.equal(seen.elicitation.length, before + 1, "elicitation handler called once");
        const req = seen.elicitation.at(-1);
        assert.equal(req.message, "statelessserver wants your name");
        assert.equal(req.requestedSchema.type, "object");
        assert.equal(req.requestedSchema.properties.name.type, "string");
        assert.deepEqual(req.requestedSchema.required, ["name"]);
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        assert.equal(textOf(r), `hello ${name}`);
        // Nothing of the round trip leaks to the old-era client.
        assert.equal(r.inputRequests, undefined, JSON.stringify(r));
        assert.equal(r.requestState, undefined, JSON.stringify(r));
      });

      await step("ask_model: input_required sampling is asked on the client's session", async () => {
        const before = seen.sampling.length;
        const r = await call(c, "ask_model");
        assert.equal(seen.sampling.length, before + 1, "sampling handler called once");
        const req = seen.sampling.at(-1);
        assert.equal(req.maxTokens, 64);
        assert.equal(req.systemPrompt, "You are the statelessserver interop test.");
        assert.equal(req.messages[0].role, "user");
        assert.equal(req.messages[0].content.text, "Say something for statelessserver.");
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        assert.equal(textOf(r), `model said: ${c.answers.sampling.content.text}`);
      });

      await step("ask_roots: input_required roots/list is asked on the client's session", async () => {
        const before = seen.roots;
        c.answers.roots = { roots: [{ uri: `file:///tmp/${tag("a")}`, name: "a" }, { uri: `file:///tmp/${tag("b")}`, name: "b" }] };
        const r = await call(c, "ask_roots");
        assert.ok(seen.roots > before, "roots/list handler called");
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        assert.equal(textOf(r), `roots: ${c.answers.roots.roots.map((x) => x.uri).join(" ")}`);
      });

      await step("ask_name declined: the upstream sees the decline and answers a tool error", async () => {
        const before = seen.elicitation.length;
        c.answers.elicitation = { action: "decline" };
        const r = await call(c, "ask_name");
        assert.equal(seen.elicitation.length, before + 1, "elicitation handler called once");
        assert.equal(r.isError, true, JSON.stringify(r));
        assert.equal(textOf(r), 'ask_name: the user chose "decline"');
      });

      await step("ask_name with a failing elicitation handler: the call fails with its error, no hang", async () => {
        const msg = tag("elicitation handler failed");
        c.answers.elicitation = new Error(msg);
        const err = await call(c, "ask_name").then(
          (r) => assert.fail(`expected an error, got ${JSON.stringify(r)}`),
          (e) => e,
        );
        assert.ok(err instanceof McpError, String(err));
        assert.ok(err.message.includes(msg), err.message);
        // The next call works again.
        c.answers.elicitation = { action: "accept", content: { name: tag("Grace") } };
        assert.equal(textOf(await call(c, "ask_name")), `hello ${c.answers.elicitation.content.name}`);
      });

      await step("a client without elicitation, sampling or roots gets an error naming what is missing", async () => {
        const plain = new Client({ name: `mcpgate-stateless-${server}-plain`, version: "1.0.0" }, { capabilities: {} });
        const transport = new StreamableHTTPClientTransport(new URL(`${gateway.base}/mcp`));
        await plain.connect(transport, REQ);
        try {
          for (const [n, method] of [
            ["ask_name", "elicitation/create"],
            ["ask_model", "sampling/createMessage"],
            ["ask_roots", "roots/list"],
          ]) {
            const err = await plain.callTool({ name: tool(n), arguments: {} }, undefined, REQ).then(
              (r) => assert.fail(`${n}: expected an error, got ${JSON.stringify(r)}`),
              (e) => e,
            );
            assert.ok(err instanceof McpError, `${n}: ${err}`);
            assert.ok(err.message.includes(method), `${n}: ${err.message}`);
          }
        } finally {
          await closeClient({ client: plain, transport });
        }
      });

      await step("prompts/get greeting", async () => {
        const { prompts } = await client.listPrompts(undefined, REQ);
        assert.ok(prompts.some((p) => p.name === tool("greeting")), prompts.map((p) => p.name).join(", "));
        const who = tag("Linus");
        const p = await client.getPrompt({ name: tool("greeting"), arguments: { name: who } }, REQ);
        assert.equal(p.messages.length, 1);
        assert.equal(p.messages[0].content.text, `Please greet ${who} from statelessserver.`);
      });

      await step(`resources/read ${ABOUT_URI} on /mcp/${server}`, async () => {
        const one = await connectClient(`${gateway.base}/mcp/${server}`, `${server}-single`);
        try {
          const { resources } = await one.client.listResources(undefined, REQ);
          assert.ok(resources.some((r) => r.uri === ABOUT_URI), resources.map((r) => r.uri).join(", "));
          const r = await one.client.readResource({ uri: ABOUT_URI }, REQ);
          assert.equal(r.contents.length, 1);
          assert.equal(r.contents[0].uri, ABOUT_URI);
          assert.equal(r.contents[0].text, "statelessserver speaks only 2026-07-28");
        } finally {
          await closeClient(one);
        }
      });

      await step("the gateway spoke only 2026-07-28 to the upstream", async () => {
        // statelessserver logs every HTTP request it gets; the config tells
        // the two entries apart by their URL's query (?via=NAME).
        const reqs = [...upstream.child.logText.matchAll(/REQUEST via=(\S+) http=(\S+) method=(\S+) version=(\S+)/g)]
          .filter((m) => m[1] === server)
          .map(([, , http, method, version]) => ({ http, method, version }));
        const methods = new Set(reqs.map((r) => r.method));
        for (const m of ["tools/list", "tools/call", "prompts/get", "resources/read"]) assert.ok(methods.has(m), `${m} reached the upstream: ${[...methods].join(", ")}`);
        if (pv === "auto") assert.ok(methods.has("server/discover"), `auto probed server/discover: ${[...methods].join(", ")}`);
        const legacy = reqs.filter((r) => r.http !== "POST" || r.method === "initialize" || (!r.method.startsWith("notifications/") && r.version !== "2026-07-28"));
        assert.deepEqual(legacy, [], "requests not in the 2026-07-28 form");
      });

      await step("no transport errors", async () => {
        assert.deepEqual(seen.errors, []);
      });
    } finally {
      await closeClient(c);
    }
  });
}
