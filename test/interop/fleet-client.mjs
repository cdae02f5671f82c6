// A TypeScript-SDK client for the fleet proof (test/fleet, Go): connects
// to one MCP endpoint with a gateway key, runs a fixed sequence of
// requests on one session, and prints what it saw as one JSON object on
// stdout ({protocolVersion, sessionId, results: {request: result}}). The
// Go test runs it against one replica and through its round-robin
// balancer and compares the two. Not a node --test file.
//
// Usage: node test/interop/fleet-client.mjs <endpoint URL> <key>

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: fleet-client.mjs <endpoint URL> <key>");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-Mcpgate-Api-Key": key } },
});
const client = new Client({ name: "fleet-proof-ts", version: "1" });
const REQ = { timeout: 15_000 };
await client.connect(transport, REQ);

const results = {};
results["tools/list"] = await client.listTools(undefined, REQ);
for (const [name, args] of [
  ["notes__list_notes", {}],
  ["notes__get_note", { title: "alpha" }],
  ["notes__get_note", { title: "gamma" }],
  ["notes__search_notes", { query: "milk" }],
]) {
  results[`tools/call ${name} ${JSON.stringify(args)}`] = await client.callTool({ name, arguments: args }, undefined, REQ);
}
results["prompts/list"] = await client.listPrompts(undefined, REQ);
results["prompts/get"] = await client.getPrompt({ name: "notes__summarize_notes", arguments: { query: "milk" } }, REQ);
const resources = await client.listResources(undefined, REQ);
results["resources/list"] = resources;
results["resources/read"] = await client.readResource({ uri: resources.resources[0].uri }, REQ);

const out = { protocolVersion: transport.protocolVersion, sessionId: transport.sessionId, results };
await transport.terminateSession().catch(() => {});
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
