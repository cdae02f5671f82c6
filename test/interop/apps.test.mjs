// MCP Apps interop test: views (the io.modelcontextprotocol/ui extension,
// SEP-1865) through mcpgate, with SDKs we did not write on every side.
//
//   upstreams  two MCP TypeScript SDK servers, "weather" and "maps", whose
//              tools and views are registered with the ext-apps server
//              helpers (registerAppTool, registerAppResource), over
//              streamable HTTP;
//   host       the TypeScript SDK client declaring the extension, and the
//              ext-apps AppBridge, which forwards a view's calls to it;
//   view       the ext-apps App, connected to the bridge in memory (the
//              postMessage transport of a browser is not what is tested).
//
// Through /mcp (names prefixed) the host finds each tool's view under the
// namespaced ui:// URI and reads it from the right server; the view calls
// its own server's tools by their own names, and a name two servers' views
// may call is refused with the prefixed candidates. A client that runs no
// views does not see app-only tools. Through /mcp/weather nothing is
// renamed. The TypeScript SDK speaks the handshake era (2025-11-25); the
// 2026-07-28 era is covered by internal/gateway's TestAppsMergedRoute.
//
// Run with Node 22 (scripts/interop-ts.sh does this):
//   node --test test/interop/apps.test.mjs

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { App } from "@modelcontextprotocol/ext-apps";
import { AppBridge } from "@modelcontextprotocol/ext-apps/app-bridge";
import { EXTENSION_ID, RESOURCE_MIME_TYPE, getUiCapability, registerAppResource, registerAppTool } from "@modelcontextprotocol/ext-apps/server";

import { buildGateway, lazyFixture, logTail, startGateway, stepper, stopChild, textOf, yamlQuote as q } from "./lib.mjs";

const REQ = { timeout: 15_000 };
const run = randomBytes(4).toString("hex"); // in every view, so no check passes on a constant

// ---------------------------------------------------------------------------
// the upstreams

const declared = {}; // server name -> the extension's settings in the gateway's initialize

/** One ext-apps server: a view, a tool showing it, app-only tools. */
function appServer(name) {
  const server = new McpServer({ name, version: "1.0.0" }, { capabilities: { extensions: { [EXTENSION_ID]: {} } } });
  const view = `ui://${name}/view.html`;
  const answer = (tool) => async () => ({ content: [{ type: "text", text: `${name}:${tool}` }] });
  registerAppResource(server, `${name} view`, view, {}, async (uri) => ({
    contents: [{
      uri: uri.href,
      mimeType: RESOURCE_MIME_TYPE,
      text: `<!doctype html><p>${name} ${uri.href} ${run}`,
      _meta: { ui: { csp: { connectDomains: [`https://api.${name}.example`] }, domain: `${name}.views.example`, prefersBorder: true } },
    }],
  }));
  registerAppTool(server, "show", { description: `${name} view`, _meta: { ui: { resourceUri: view } } }, answer("show"));
  registerAppTool(server, "refresh", { description: "view only", _meta: { ui: { resourceUri: view, visibility: ["app"] } } }, answer("refresh"));
  if (name === "weather") {
    registerAppTool(server, "poll", { description: "view only", _meta: { ui: { resourceUri: view, visibility: ["app"] } } }, answer("poll"));
  }
  // Whether the gateway told this server that views can be shown (in its
  // initialize: the server is stateless, one instance per request).
  server.registerTool("ui_declared", { description: "ui capability seen" }, async () => ({
    content: [{ type: "text", text: JSON.stringify(declared[name] ?? null) }],
  }));
  return server;
}

/** Serves appServer(name) statelessly over streamable HTTP on a free port. */
async function serveApp(name) {
  const srv = http.createServer(async (req, res) => {
    const server = appServer(name);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => {
      const caps = server.server.getClientCapabilities(); // set by an initialize only
      if (caps) declared[name] = getUiCapability(caps) ?? null;
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { srv, url: `http://127.0.0.1:${srv.address().port}/mcp` };
}

// ---------------------------------------------------------------------------
// fixtures

let tmp;
let gateway;
const upstreams = {};

function diag() {
  return gateway ? `mcpgate output (last 40 lines):\n${logTail(gateway.child, 40)}\n` : "";
}

const fixtures = lazyFixture(
  async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-apps-"));
    const bin = await buildGateway(tmp);
    for (const name of ["weather", "maps"]) upstreams[name] = await serveApp(name);
    gateway = await startGateway({
      bin,
      dir: tmp,
      config: (listen) =>
        [`listen: ${listen}`, "servers:", ...Object.entries(upstreams).flatMap(([name, u]) => [`  ${name}:`, "    transport: http", `    url: ${q(u.url)}`, "    timeout: 20s"])].join("\n") + "\n",
    });
  },
  async () => {
    if (gateway) await stopChild(gateway.child, "SIGKILL", 1_000);
    for (const u of Object.values(upstreams)) u.srv.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  },
);

// ---------------------------------------------------------------------------
// host and view

/** A client of url; host: it declares the extension (runs views). */
async function connect(url, host) {
  const capabilities = host ? { extensions: { [EXTENSION_ID]: { mimeTypes: [RESOURCE_MIME_TYPE] } } } : {};
  const client = new Client({ name: host ? "apps-host" : "model-only", version: "1.0.0" }, { capabilities });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport, REQ);
  return { client, transport };
}

/** A view (ext-apps App) behind an AppBridge forwarding to client. */
async function openView(client) {
  const bridge = new AppBridge(client, { name: "apps-host", version: "1.0.0" }, { serverTools: {}, serverResources: {} });
  const [hostSide, viewSide] = InMemoryTransport.createLinkedPair();
  const app = new App({ name: "view", version: "1.0.0" }, {}, { autoResize: false });
  await bridge.connect(hostSide);
  await app.connect(viewSide);
  return { app, bridge };
}

async function close(...cs) {
  for (const c of cs) {
    if (!c) continue;
    if (c.transport?.sessionId) await c.transport.terminateSession().catch(() => {});
    await c.client?.close().catch(() => {});
    await c.app?.close?.().catch(() => {});
  }
}

const uiOf = (tool) => tool?._meta?.ui?.resourceUri;

// ---------------------------------------------------------------------------
// the checks

test("apps: ext-apps views through /mcp (names prefixed)", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag, { timeout: 20_000 });
  let host, model, view;
  try {
    host = await connect(`${gateway.base}/mcp`, true);
    model = await connect(`${gateway.base}/mcp`, false);

    await step("the route advertises the extension its servers declare", async () => {
      const caps = host.client.getServerCapabilities();
      assert.ok(caps?.extensions?.[EXTENSION_ID], JSON.stringify(caps));
    });

    await step("each tool names its view in its server's namespace (both forms)", async () => {
      const { tools } = await host.client.listTools(undefined, REQ);
      const by = Object.fromEntries(tools.map((x) => [x.name, x]));
      for (const s of ["weather", "maps"]) {
        assert.equal(uiOf(by[`${s}__show`]), `ui://${s}__${s}/view.html`);
        assert.equal(by[`${s}__show`]._meta["ui/resourceUri"], `ui://${s}__${s}/view.html`);
        assert.equal(uiOf(by[`${s}__refresh`]), `ui://${s}__${s}/view.html`, "a host gets the app-only tools");
      }
    });

    await step("the host reads a view by its namespaced URI from the right server, _meta intact", async () => {
      const r = await host.client.readResource({ uri: "ui://maps__maps/view.html" }, REQ);
      const [c] = r.contents;
      assert.equal(c.uri, "ui://maps__maps/view.html");
      assert.equal(c.mimeType, RESOURCE_MIME_TYPE);
      assert.equal(c.text, `<!doctype html><p>maps ui://maps/view.html ${run}`);
      assert.deepEqual(c._meta, { ui: { csp: { connectDomains: ["https://api.maps.example"] }, domain: "maps.views.example", prefersBorder: true } });
      const { resources } = await host.client.listResources(undefined, REQ);
      const uris = resources.map((x) => x.uri);
      assert.ok(uris.includes("ui://weather__weather/view.html") && uris.includes("ui://maps__maps/view.html"), uris.join(", "));
    });

    await step("the gateway told the upstreams that views can be shown", async () => {
      const r = await host.client.callTool({ name: "weather__ui_declared", arguments: {} }, undefined, REQ);
      assert.deepEqual(JSON.parse(textOf(r)), { mimeTypes: [RESOURCE_MIME_TYPE] });
    });

    view = await openView(host.client);
    await step("a view calls its server's tool by its own name", async () => {
      const r = await view.app.callServerTool({ name: "poll", arguments: {} });
      assert.equal(textOf(r), "weather:poll");
    });

    await step("a name two servers' views may call is refused with the prefixed candidates", async () => {
      await assert.rejects(view.app.callServerTool({ name: "refresh", arguments: {} }), (err) => {
        assert.match(String(err.message), /maps__refresh, weather__refresh/);
        return true;
      });
    });

    await step("a client that runs no views: app-only tools not listed, still callable by name, no unprefixed names", async () => {
      const { tools } = await model.client.listTools(undefined, REQ);
      const names = tools.map((x) => x.name);
      assert.ok(names.includes("weather__show") && !names.includes("weather__refresh") && !names.includes("weather__poll"), names.join(", "));
      const r = await model.client.callTool({ name: "weather__refresh", arguments: {} }, undefined, REQ);
      assert.equal(textOf(r), "weather:refresh");
      await assert.rejects(model.client.callTool({ name: "poll", arguments: {} }, undefined, REQ), /Unknown tool: poll/);
    });
  } finally {
    await close(view, host, model);
  }
});

test("apps: ext-apps views through /mcp/weather (nothing renamed)", { timeout: 300_000 }, async (t) => {
  await fixtures();
  const step = stepper(t, diag, { timeout: 20_000 });
  let host, view;
  try {
    host = await connect(`${gateway.base}/mcp/weather`, true);
    await step("tools name their server's own views", async () => {
      const { tools } = await host.client.listTools(undefined, REQ);
      const show = tools.find((x) => x.name === "show");
      assert.equal(uiOf(show), "ui://weather/view.html");
      assert.equal(show._meta["ui/resourceUri"], "ui://weather/view.html");
    });
    await step("the view is read under its own URI", async () => {
      const r = await host.client.readResource({ uri: "ui://weather/view.html" }, REQ);
      assert.equal(r.contents[0].text, `<!doctype html><p>weather ui://weather/view.html ${run}`);
      assert.equal(r.contents[0]._meta.ui.domain, "weather.views.example");
    });
    view = await openView(host.client);
    await step("the view calls its tools by their names", async () => {
      assert.equal(textOf(await view.app.callServerTool({ name: "refresh", arguments: {} })), "weather:refresh");
    });
  } finally {
    await close(view, host);
  }
});
