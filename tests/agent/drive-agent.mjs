#!/usr/bin/env node
// Drives an UNMODIFIED tabby-agent 1.5.0 (node_modules/tabby-agent/dist/cli.js) against a Tabby
// server and prints one JSON line describing what happened.
//
//   node drive-agent.mjs <server-url>
//
// tabby-agent 1.5.0 has two front ends (see the last line of dist/cli.js:
// `argv.indexOf("--lsp")>=0 ? new LspServer : new JsonLineServer`), and this script uses both:
//
// 1. `cli.js --lsp --stdio`: a language server. Its `initialize` only forwards `clientInfo`, so the
//    server endpoint comes from `~/.tabby-client/agent/config.toml` (HOME points at a temp dir).
//    It implements `textDocument/completion` only (no inline completion, no events).
// 2. `cli.js` with no arguments: the JSON-lines protocol the Vim plugin uses. Each request is a line
//    `[id, {"func": <agent method>, "args": [...]}]`, each answer `[id, result]`, and agent events
//    arrive as `[0, {"event": ...}]`. The endpoint is passed as client config to `initialize`, as
//    IDE plugins do. This front end exposes `postEvent`, which is how 1.5.0 reports that a
//    completion was viewed or selected (`POST /v1/events`).
//
// Exit status: 0 when both front ends surfaced a completion and both events were accepted by the
// server; 1 on any failure (the reason goes to stderr and into the JSON line as "error"); the whole
// run is bounded by a hard deadline, so it never hangs.

import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const AGENT_PKG = path.join(HERE, "node_modules", "tabby-agent");
const AGENT_CLI = path.join(AGENT_PKG, "dist", "cli.js");
const DEADLINE_MS = 55_000;
const STEP_TIMEOUT_MS = 20_000;

// The document both front ends complete: the cursor is at the end of `    return`.
const PREFIX = "def add(a, b):\n    return";
const SUFFIX = "\n\n\nprint(add(1, 2))\n";
const TEXT = PREFIX + SUFFIX;
const CURSOR = { line: 1, character: "    return".length };
const GIT_REMOTE = "https://github.com/example/demo.git";

const result = { ok: false };
const children = new Set();
const homes = [];

function fail(message) {
  throw new Error(message);
}

function finish(code) {
  for (const child of children) {
    try {
      child.kill("SIGKILL");
    } catch {}
  }
  if (code !== 0) {
    for (const home of homes) dumpAgentLog(home);
  }
  for (const home of homes) {
    try {
      fs.rmSync(home, { recursive: true, force: true });
    } catch {}
  }
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(code));
}

// The agent logs (debug level, configured below) to ~/.tabby-client/agent/logs/*.log.
function dumpAgentLog(home) {
  const dir = path.join(home, ".tabby-client", "agent", "logs");
  let files = [];
  try {
    // Skip the `current.log` symlink to the dated file.
    files = fs.readdirSync(dir, { withFileTypes: true })
      .filter((f) => f.isFile() && f.name.endsWith(".log"))
      .map((f) => f.name);
  } catch {
    return;
  }
  for (const file of files) {
    const lines = fs.readFileSync(path.join(dir, file), "utf8").trimEnd().split("\n");
    process.stderr.write(`--- agent log ${path.join(dir, file)} (last 40 lines) ---\n`);
    process.stderr.write(lines.slice(-40).map((l) => l.slice(0, 1000)).join("\n") + "\n");
  }
}

function withTimeout(promise, what, ms = STEP_TIMEOUT_MS) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function tempHome(tag) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), `tabby-agent-${tag}-`));
  homes.push(home);
  return home;
}

function spawnAgent(args, home, stderrSink) {
  const child = spawn(process.execPath, [AGENT_CLI, ...args], {
    cwd: home,
    env: { ...process.env, HOME: home, USERPROFILE: home, NO_PROXY: "*", no_proxy: "*" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  children.add(child);
  child.stderr.on("data", (chunk) => stderrSink.push(chunk.toString()));
  child.stdin.on("error", () => {});
  child.exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
  });
  return child;
}

// SIGTERM (1.5.0's JSON-lines front end finalizes and exits on it), then SIGKILL after 3 s.
async function stopAgent(child) {
  if (!children.has(child)) return;
  child.kill("SIGTERM");
  const stopped = await Promise.race([
    child.exited.then(() => true),
    new Promise((resolve) => setTimeout(() => resolve(false), 3_000)),
  ]);
  if (!stopped) child.kill("SIGKILL");
}

// ---------------------------------------------------------------------------------------------
// Phase 1: LSP over stdio (Content-Length framing written by hand).

class LspClient {
  constructor(child) {
    this.child = child;
    this.nextId = 1;
    this.pending = new Map();
    this.notifications = [];
    this.serverRequests = [];
    this.buffer = Buffer.alloc(0);
    child.stdout.on("data", (chunk) => this.onData(chunk));
    child.exited.then(({ code, signal }) => {
      for (const { reject } of this.pending.values()) {
        reject(new Error(`agent exited (code ${code}, signal ${signal}) with a request pending`));
      }
      this.pending.clear();
    });
  }

  onData(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      const headerEnd = this.buffer.indexOf("\r\n\r\n");
      if (headerEnd < 0) return;
      const header = this.buffer.subarray(0, headerEnd).toString("ascii");
      const match = /Content-Length:\s*(\d+)/i.exec(header);
      if (!match) fail(`LSP: message without Content-Length: ${JSON.stringify(header)}`);
      const length = Number(match[1]);
      if (this.buffer.length < headerEnd + 4 + length) return;
      const body = this.buffer.subarray(headerEnd + 4, headerEnd + 4 + length).toString("utf8");
      this.buffer = this.buffer.subarray(headerEnd + 4 + length);
      this.onMessage(JSON.parse(body));
    }
  }

  onMessage(message) {
    if (message.id !== undefined && message.method === undefined) {
      const waiter = this.pending.get(message.id);
      if (!waiter) return;
      this.pending.delete(message.id);
      if (message.error) {
        waiter.reject(new Error(`LSP error for ${waiter.method}: ${JSON.stringify(message.error)}`));
      } else {
        waiter.resolve(message.result);
      }
    } else if (message.id !== undefined) {
      // A request from the server (none expected from 1.5.0): answer null so it never blocks.
      this.serverRequests.push(message.method);
      this.write({ jsonrpc: "2.0", id: message.id, result: null });
    } else {
      this.notifications.push({ method: message.method, params: message.params });
    }
  }

  write(message) {
    const body = Buffer.from(JSON.stringify(message), "utf8");
    this.child.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
    this.child.stdin.write(body);
  }

  request(method, params) {
    const id = this.nextId++;
    const promise = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, method }));
    this.write({ jsonrpc: "2.0", id, method, params });
    return withTimeout(promise, `LSP ${method}`);
  }

  notify(method, params) {
    this.write({ jsonrpc: "2.0", method, params });
  }
}

function offsetAt(text, position) {
  const lines = text.split("\n");
  let offset = 0;
  for (let i = 0; i < position.line; i++) offset += lines[i].length + 1;
  return offset + position.character;
}

async function runLsp(serverUrl) {
  const home = tempHome("lsp");
  const configDir = path.join(home, ".tabby-client", "agent");
  fs.mkdirSync(configDir, { recursive: true });
  fs.writeFileSync(
    path.join(configDir, "config.toml"),
    [
      "[server]",
      `endpoint = ${JSON.stringify(serverUrl)}`,
      "",
      "[logs]",
      'level = "debug"',
      "",
      "[anonymousUsageTracking]",
      "disable = true",
      "",
    ].join("\n"),
  );
  const stderr = [];
  const child = spawnAgent(["--lsp", "--stdio"], home, stderr);
  const lsp = new LspClient(child);
  const out = { front_end: "lsp" };
  result.lsp = out;
  try {
    const init = await lsp.request("initialize", {
      processId: process.pid,
      clientInfo: { name: "drive-agent", version: "1.0.0" },
      rootUri: null,
      workspaceFolders: null,
      capabilities: {
        textDocument: {
          synchronization: { dynamicRegistration: false },
          completion: { completionItem: { snippetSupport: false, labelDetailsSupport: true } },
        },
        window: { showMessage: {} },
      },
    });
    out.server_info = init.serverInfo;
    out.capabilities = init.capabilities;
    if (!init.capabilities?.completionProvider) fail("LSP: agent did not offer completionProvider");
    lsp.notify("initialized", {});

    const docPath = path.join(home, "add.py");
    fs.writeFileSync(docPath, TEXT);
    const uri = pathToFileURL(docPath).href;
    lsp.notify("textDocument/didOpen", {
      textDocument: { uri, languageId: "python", version: 1, text: TEXT },
    });

    // `initialize` awaited the agent's health check; a failed one shows up as a window/showMessage
    // warning ("Tabby agent status: disconnected"), which would make the completion empty.
    const list = await lsp.request("textDocument/completion", {
      textDocument: { uri },
      position: CURSOR,
      context: { triggerKind: 1 },
    });
    const items = Array.isArray(list) ? list : (list?.items ?? []);
    out.items = items.length;
    out.messages = lsp.notifications.filter((n) => n.method === "window/showMessage").map((n) => n.params);
    out.ready = out.messages.length === 0;
    if (lsp.serverRequests.length) out.server_requests = lsp.serverRequests;
    if (items.length === 0) {
      fail(`LSP: textDocument/completion returned no items; showMessage: ${JSON.stringify(out.messages)}`);
    }
    const item = items[0];
    out.label = item.label;
    out.new_text = item.textEdit?.newText;
    out.data = item.data;
    // The agent replaces the word before the cursor ("return") with word + completion.
    const range = item.textEdit?.range;
    if (!range) fail(`LSP: completion item without textEdit: ${JSON.stringify(item)}`);
    const replaced = TEXT.slice(offsetAt(TEXT, range.start), offsetAt(TEXT, range.end));
    if (!out.new_text.startsWith(replaced)) {
      fail(`LSP: newText ${JSON.stringify(out.new_text)} does not start with replaced text ${JSON.stringify(replaced)}`);
    }
    out.completion = out.new_text.slice(replaced.length);
    out.completion_id = item.data?.completionId;

    await lsp.request("shutdown", null);
    lsp.notify("exit", null);
    const exit = await withTimeout(child.exited, "the LSP agent to exit", 5_000).catch(() => null);
    out.exit_code = exit?.code ?? null;
  } finally {
    out.stderr = stderr.join("").slice(-2000) || undefined;
    await stopAgent(child);
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 2: the JSON-lines protocol (Vim plugin's), which exposes the agent's `postEvent`.

class JsonLineClient {
  constructor(child) {
    this.child = child;
    this.nextId = 1;
    this.pending = new Map();
    this.events = [];
    this.eventWaiters = [];
    this.noise = [];
    this.partial = "";
    child.stdout.on("data", (chunk) => {
      this.partial += chunk.toString("utf8");
      let newline;
      while ((newline = this.partial.indexOf("\n")) >= 0) {
        const line = this.partial.slice(0, newline).trim();
        this.partial = this.partial.slice(newline + 1);
        if (line) this.onLine(line);
      }
    });
    child.exited.then(({ code, signal }) => {
      for (const { reject } of this.pending.values()) {
        reject(new Error(`agent exited (code ${code}, signal ${signal}) with a request pending`));
      }
      this.pending.clear();
    });
  }

  onLine(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch {}
    if (!Array.isArray(message)) {
      // 1.5.0's log rotation prints a notice to stdout ("[FileStreamRotator] Date format not
      // suitable for daily rotation..."); like the Vim plugin, skip what is not a message.
      this.noise.push(line);
      return;
    }
    const [id, payload] = message;
    if (id === 0) {
      this.events.push(payload);
      this.eventWaiters = this.eventWaiters.filter((w) => !w(payload));
      return;
    }
    const waiter = this.pending.get(id);
    if (waiter) {
      this.pending.delete(id);
      waiter.resolve(payload);
    }
  }

  // The agent answers `[id, null]` when the function threw (it logs the error).
  call(func, ...args) {
    const id = this.nextId++;
    const promise = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    this.child.stdin.write(JSON.stringify([id, { func, args }]) + "\n");
    return withTimeout(promise, `agent.${func}()`);
  }

  waitForEvent(predicate, what) {
    const seen = this.events.find(predicate);
    if (seen) return Promise.resolve(seen);
    return withTimeout(
      new Promise((resolve) =>
        this.eventWaiters.push((event) => (predicate(event) ? (resolve(event), true) : false)),
      ),
      what,
    );
  }
}

async function runJsonLines(serverUrl) {
  const home = tempHome("jsonl");
  const workspace = path.join(home, "project");
  fs.mkdirSync(workspace, { recursive: true });
  const docPath = path.join(workspace, "add.py");
  fs.writeFileSync(docPath, TEXT);
  const stderr = [];
  const child = spawnAgent([], home, stderr);
  const agent = new JsonLineClient(child);
  const out = { front_end: "json-lines" };
  result.jsonl = out;
  try {
    const initialized = await agent.call("initialize", {
      config: {
        server: { endpoint: serverUrl },
        logs: { level: "debug" },
        anonymousUsageTracking: { disable: true },
      },
      clientProperties: {
        session: {
          client: "drive-agent 1.0.0",
          ide: { name: "drive-agent", version: "1.0.0" },
          tabby_plugin: { name: "TabbyML/drive-agent", version: "1.0.0" },
        },
      },
    });
    if (initialized !== true) fail(`JSON-lines: initialize returned ${JSON.stringify(initialized)}`);
    await agent
      .waitForEvent((e) => e?.event === "statusChanged" && e.status === "ready", "status ready")
      .catch(async (error) => {
        out.status = await agent.call("getStatus").catch(() => undefined);
        out.issues = await agent.call("getIssues").catch(() => undefined);
        out.connection_failed = await agent
          .call("getIssueDetail", { name: "connectionFailed" })
          .catch(() => undefined);
        throw error;
      });
    out.status = await agent.call("getStatus");
    out.ready = out.status === "ready";
    out.server_health = await agent.call("getServerHealthState");
    out.endpoint = (await agent.call("getConfig"))?.server?.endpoint;

    const response = await agent.call("provideCompletions", {
      filepath: docPath,
      language: "python",
      text: TEXT,
      position: PREFIX.length,
      manually: false,
      workspace,
      git: { root: workspace, remotes: [{ name: "origin", url: GIT_REMOTE }] },
    });
    if (!response) fail("JSON-lines: provideCompletions failed (the agent answered null; see its log)");
    out.completion_id = response.id;
    out.choices = response.choices;
    if (!response.choices?.length) fail(`JSON-lines: no completion choices: ${JSON.stringify(response)}`);
    const choice = response.choices[0];
    out.completion = choice.text.slice(PREFIX.length - choice.replaceRange.start);

    // What an editor reports once the ghost text is shown and then accepted (a line of it).
    const viewId = `view-${response.id}`;
    out.events = {};
    out.events.view = await agent.call("postEvent", {
      type: "view",
      completion_id: response.id,
      choice_index: choice.index,
      view_id: viewId,
    });
    out.events.select = await agent.call("postEvent", {
      type: "select",
      select_kind: "line",
      completion_id: response.id,
      choice_index: choice.index,
      view_id: viewId,
      elapsed: 1234,
    });
    if (out.events.view !== true || out.events.select !== true) {
      fail(`JSON-lines: postEvent was not accepted: ${JSON.stringify(out.events)}`);
    }
    out.finalized = await agent.call("finalize");
    out.stdout_noise = agent.noise.length ? agent.noise : undefined;
  } finally {
    out.stderr = stderr.join("").slice(-2000) || undefined;
    child.stdin.end();
    await stopAgent(child);
  }
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const serverUrl = process.argv[2];
  if (!serverUrl || !/^https?:\/\//.test(serverUrl)) {
    fail("usage: node drive-agent.mjs <server-url>   (e.g. http://127.0.0.1:8080)");
  }
  if (!fs.existsSync(AGENT_CLI)) {
    fail(`${AGENT_CLI} is missing: run \`npm ci\` in ${HERE}`);
  }
  result.agent_version = JSON.parse(fs.readFileSync(path.join(AGENT_PKG, "package.json"), "utf8")).version;
  result.node_version = process.version;
  result.server = serverUrl;
  result.document = { language: "python", text: TEXT, cursor: CURSOR, git_remote: GIT_REMOTE };
  await runLsp(serverUrl);
  await runJsonLines(serverUrl);
  if (!result.lsp.completion) fail("LSP: empty completion");
  if (!result.jsonl.completion) fail("JSON-lines: empty completion");
  result.ok = true;
}

const deadline = setTimeout(() => {
  result.error = `drive-agent: gave up after ${DEADLINE_MS} ms`;
  process.stderr.write(result.error + "\n");
  finish(1);
}, DEADLINE_MS);

process.on("uncaughtException", (error) => {
  clearTimeout(deadline);
  result.error = error?.message ?? String(error);
  process.stderr.write(`drive-agent: ${result.error}\n`);
  finish(1);
});

main().then(
  () => {
    clearTimeout(deadline);
    finish(0);
  },
  (error) => {
    clearTimeout(deadline);
    result.error = error?.message ?? String(error);
    process.stderr.write(`drive-agent: ${result.error}\n`);
    finish(1);
  },
);
