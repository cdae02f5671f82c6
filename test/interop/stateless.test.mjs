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

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

import { buildGateway, goBuild, lazyFixture, logTail, startGateway, startLogged, stepper, stopChild, textOf, yamlQuote as q } from "./lib.mjs";

const REQ = { timeout: 15_000 }; // per-request SDK timeout
const OLD_ERA = "2025-11-25";
const ABOUT_URI = "info://statelessserver/about";
// Two gateway entries for the same upstream: the revision pinned, and probed.
const SERVERS = { pinned: "2026-07-28", probed: "auto" };
const UPSTREAM_TOOLS = ["echo", "region_echo", "ask_name", "ask_model", "ask_roots"];

// A distinctive value per run, so that no assertion can pass on a constant.
const tag = (what) => `${what}-${randomBytes(4).toString("hex")}`;

// ---------------------------------------------------------------------------
// fixtures: the stateless upstream, the gateway

let tmp;
let upstream; // { child, url }
let gateway; // { child, base, configPath }

async function startUpstream(bin) {
  const { child, value: url } = await startLogged({
    label: "statelessserver",
    cmd: bin,
    args: ["-addr", "127.0.0.1:0"],
    opts: { cwd: tmp },
    what: "statelessserver to print its LISTEN line",
    ms: 10_000,
    ready: (c) => /^LISTEN (\S+)$/m.exec(c.logText)?.[1],
  });
  return { child, url };
}

function gatewayConfig(listen, upstreamURL) {
  const lines = [`listen: ${listen}`, "servers:"];
  for (const [name, pv] of Object.entries(SERVERS)) {
    lines.push(`  ${name}:`, "    transport: http", `    url: ${q(`${upstreamURL}?via=${name}`)}`, `    protocol_version: ${q(pv)}`, "    timeout: 20s");
  }
  return lines.join("\n") + "\n";
}

function diag() {
  let out = "";
  if (gateway) out += `mcpgate output (last 40 lines):\n${logTail(gateway.child, 40)}\n`;
  if (upstream) out += `statelessserver output (last 20 lines):\n${logTail(upstream.child, 20)}\n`;
  return out;
}

/** Builds and starts the upstream and the gateway once, on first use. */
const fixtures = lazyFixture(
  async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-stateless-"));
    const [gwBin, upBin] = await Promise.all([
      buildGateway(tmp),
      goBuild(path.join(tmp, "statelessserver"), "./test/interop/statelessserver"),
    ]);
    upstream = await startUpstream(upBin);
    gateway = await startGateway({ bin: gwBin, dir: tmp, config: (listen) => gatewayConfig(listen, upstream.url) });
  },
  async () => {
    if (gateway) await stopChild(gateway.child, "SIGKILL", 1_000);
    if (upstream) await stopChild(upstream.child, "SIGKILL", 1_000);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  },
);

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

// ---------------------------------------------------------------------------
// the checks, once per gateway entry

for (const [server, pv] of Object.entries(SERVERS)) {
  // The timeout includes building mcpgate and the upstream on a cold cache.
  test(`stateless: handshake-era TS client -> mcpgate -> 2026-07-28 go-sdk upstream (${server}, protocol_version: ${pv})`, { timeout: 300_000 }, async (t) => {
    await fixtures();
    const step = stepper(t, diag, { timeout: 20_000 });
    const tool = (n) => `${server}__${n}`;
    const call = (c, n, args = {}) => c.client.callTool({ name: tool(n), arguments: args }, undefined, REQ);
    let c;
    try {
      c = await connectClient(`${gateway.base}/mcp`, server);
      const { client, seen } = c;

      await step("the client negotiated the handshake era with the gateway", async () => {
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
        // Nothing of the round trip leaks to the handshake-era client.
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
