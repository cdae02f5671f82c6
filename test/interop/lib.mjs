// Helpers shared by the interop tests (test/interop/*.test.mjs): building
// mcpgate and other Go packages (INTEROP_GATEWAY_BIN), free ports, polling,
// child processes whose output is kept for diagnostics (INTEROP_VERBOSE=1
// streams it), starting the gateway on a YAML config, starting the test IdP
// (idp.mjs), subtests that carry diagnostics, and fixtures set up on first
// use and torn down after the file.

import { after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, "..", "..");
export const VERBOSE = process.env.INTEROP_VERBOSE === "1";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function freePort() {
  const srv = net.createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/** Polls until fn() returns a truthy value; throws after ms with a message. */
export async function waitFor(what, ms, fn) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** A child process whose stderr/stdout are kept (bounded) for diagnostics. */
export function spawnLogged(label, cmd, args, opts = {}) {
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

/** Sends signal, then SIGKILL after graceMs; resolves to how the child exited. */
export async function stopChild(child, signal = "SIGTERM", graceMs = 10_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exited;
  child.kill(signal);
  // The grace timer is cleared once the child exits: left running, it kept
  // the test file's process alive for graceMs after its last test.
  let timer;
  const res = await Promise.race([child.exited, new Promise((r) => (timer = setTimeout(() => r(null), graceMs)))]);
  clearTimeout(timer);
  if (res) return res;
  child.kill("SIGKILL");
  await child.exited;
  return { code: null, signal: "SIGKILL", timedOut: true };
}

/** The last n lines of what a spawnLogged child printed. */
export function logTail(child, n) {
  return child.logText.split("\n").slice(-n).join("\n");
}

/**
 * Spawns a logged child (label, cmd, args, opts as for spawnLogged) and waits
 * up to ms for ready(child) to return a truthy value, failing early when the
 * child exits (name is what the error calls it). Returns { child, value }
 * with ready's value; on failure kills the child and throws an error that
 * carries it as err.child.
 */
export async function startLogged({ label, name = label, cmd, args, opts, what, ms, ready }) {
  const child = spawnLogged(label, cmd, args, opts);
  try {
    const value = await waitFor(what, ms, () => {
      if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}:\n${child.logText}`);
      return ready(child);
    });
    return { child, value };
  } catch (err) {
    await stopChild(child, "SIGKILL");
    throw Object.assign(err, { child });
  }
}

export function textOf(result) {
  assert.ok(Array.isArray(result?.content), `result has no content array: ${JSON.stringify(result)}`);
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

/** Returns step(name, [opts,] fn): a subtest of t whose failure carries diag(). */
export function stepper(t, diag = () => "", defaults = { timeout: 30_000 }) {
  return (name, opts, fn) => {
    if (typeof opts === "function") [opts, fn] = [{}, opts];
    return t.test(name, { ...defaults, ...opts }, async () => {
      try {
        await fn();
      } catch (err) {
        const extra = diag();
        if (extra) err.message += `\n--- diagnostics ---\n${extra}`;
        throw err;
      }
    });
  };
}

// ---------------------------------------------------------------------------
// building and starting the gateway

/** Builds the Go package pkg (relative to the repository root) into out. */
export async function goBuild(out, pkg) {
  await promisify(execFile)("go", ["build", "-o", out, pkg], {
    cwd: ROOT,
    timeout: 240_000,
    maxBuffer: 16 << 20,
  }).catch((err) => {
    throw new Error(`go build ${pkg} failed:\n${err.stderr || err.message}`);
  });
  return out;
}

/** The mcpgate binary: $INTEROP_GATEWAY_BIN, or one built into dir. */
export async function buildGateway(dir) {
  if (process.env.INTEROP_GATEWAY_BIN) return path.resolve(process.env.INTEROP_GATEWAY_BIN);
  return goBuild(path.join(dir, "mcpgate"), "./cmd/mcpgate");
}

/** Quotes s for YAML: JSON strings are valid YAML scalars, whatever they hold. */
export const yamlQuote = (s) => JSON.stringify(s);

/**
 * Starts bin serve on a free port with the config config(listen) written to
 * dir/mcpgate.yaml (and run in dir), and waits for GET /healthz = 200.
 * Retries on another port when the first is taken. With listen
 * ("127.0.0.1:PORT") it serves there, once, with no retry: for a gateway
 * whose URL others had to know before it started (an IdP's redirect URI).
 * env: variables added to this process's environment for the gateway (e.g.
 * SSL_CERT_FILE, the roots Go's TLS trusts). Returns { child, base, configPath }.
 */
export async function startGateway({ bin, dir, config, listen: fixed, env }) {
  let lastErr;
  for (let attempt = 0; attempt < (fixed ? 1 : 3); attempt++) {
    const listen = fixed ?? `127.0.0.1:${await freePort()}`;
    const configPath = path.join(dir, "mcpgate.yaml");
    writeFileSync(configPath, config(listen));
    const base = `http://${listen}`;
    try {
      const { child } = await startLogged({
        label: "mcpgate",
        cmd: bin,
        args: ["serve", "--config", configPath, "--listen", listen, "--log-level", "debug"],
        opts: { cwd: dir, ...(env && { env: { ...process.env, ...env } }) },
        what: "mcpgate GET /healthz = 200",
        ms: 20_000,
        ready: async () => {
          try {
            const res = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(1_000) });
            await res.arrayBuffer();
            return res.status === 200;
          } catch {
            return false;
          }
        },
      });
      return { child, base, configPath };
    } catch (err) {
      lastErr = err;
      if (!/EADDRINUSE|address already in use/.test(err.child?.logText)) break;
    }
  }
  throw lastErr;
}

// ---------------------------------------------------------------------------
// fixtures

/**
 * Returns get(): it runs setup() once, on first use, and returns its promise.
 * Registers an after hook that, when setup was started, waits for it to
 * settle (whatever its outcome) and then runs teardown().
 *
 * Not a before hook: node:test runs hooks even when a --test-name-pattern
 * selects none of a file's tests, and then does not wait for them, so an
 * after hook would tear down a setup that is still starting.
 */
export function lazyFixture(setup, teardown) {
  let started;
  after(async () => {
    if (!started) return;
    await started.catch(() => {});
    await teardown();
  });
  return () => (started ??= setup());
}

// ---------------------------------------------------------------------------
// the test IdP (idp.mjs)

/**
 * Starts idp.mjs (oidc-provider on loopback) as a child of this process
 * with config (see the top of idp.mjs; undefined: its DEFAULT_CONFIG) and
 * waits for its ready line. Its stdin is a pipe that only this process
 * holds, so it exits when this process does. Returns
 * { child, issuer, pid, rotate(), stats() } (the control endpoints).
 */
export async function startIdP({ config, port = 0, label = "idp" } = {}) {
  const env = { ...process.env };
  delete env.IDP_CONFIG_FILE;
  if (config === undefined) delete env.IDP_CONFIG;
  else env.IDP_CONFIG = JSON.stringify(config);
  const { child, value } = await startLogged({
    label,
    cmd: process.execPath,
    args: [path.join(HERE, "idp.mjs"), "--port", String(port)],
    opts: { env, stdio: ["pipe", "pipe", "pipe"] },
    what: "idp.mjs to print its ready line",
    ms: 15_000,
    ready: (c) => {
      const line = /^(\{"issuer"[^\n]*\})\n/m.exec(c.logText)?.[1];
      return line ? JSON.parse(line) : undefined;
    },
  });
  const control = async (method, what) => {
    const res = await fetch(`${value.issuer}/__control/${what}`, { method, signal: AbortSignal.timeout(10_000) });
    if (res.status !== 200) throw new Error(`${method} /__control/${what}: HTTP ${res.status}`);
    return res.json();
  };
  return {
    child,
    issuer: value.issuer,
    pid: value.pid,
    rotate: () => control("POST", "rotate"),
    stats: () => control("GET", "stats"),
  };
}
