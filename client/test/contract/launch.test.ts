/**
 * The launch contract, end to end: the real Python server, started through the
 * extension's own launch code (buildLaunch / spawnServer), driven over stdio with
 * vscode-jsonrpc the way VS Code drives it.
 *
 * initialize (untrusted, as a fresh workspace is) → open a .cu with a planted rule
 * violation → diagnostics (pulled, as VS Code does, and pushed to a client without
 * pull) → a command with a work-done token → shutdown → exit → the process is gone.
 *
 * Progress: no server command on main reports work-done progress yet (verify /
 * profile / fuse are not there), so the command run here is `stitch.serverInfo`
 * with a workDoneToken; the test checks the answer, and any progress sent on that
 * token is well formed (begin … end).
 */

import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { after, describe, it } from "node:test";
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import { API_KEY_ENV, buildLaunch, isAlive, spawnServer, waitForExit } from "../../src/core/launch";
import { SERVER_INFO_REQUEST, type InitializationOptions, type ServerInfo } from "../../src/core/protocol";
import { withTimeout } from "../../src/core/restartPolicy";
import { serverEnv, testPython } from "../helpers";

const KEY = "sk-ant-api03-contract-test-key-0000000000";

// STC001: a grid-wide index written with no bounds check.
const KERNEL = `#include <cuda_runtime.h>

__global__ void scale(float* out, const float* in, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] * s;
}
`;

interface Diagnostic {
  range: { start: { line: number } };
  code?: string | number;
  source?: string;
  message: string;
}

interface Session {
  child: ChildProcess;
  conn: MessageConnection;
  stderr: string[];
  progress: { token: unknown; value: { kind: string } }[];
  pushed: Map<string, Diagnostic[]>;
  onPush: (() => void)[];
}

const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "stitch-contract-"));
const kernelPath = path.join(workspace, "scale.cu");
fs.writeFileSync(kernelPath, KERNEL);
const kernelUri = pathToFileURL(kernelPath).href;
after(() => fs.rmSync(workspace, { recursive: true, force: true }));

function start(): Session {
  const spec = buildLaunch({ python: testPython(), cwd: workspace, baseEnv: serverEnv(), apiKey: KEY });
  assert.equal(spec.env[API_KEY_ENV], KEY);
  const child = spawnServer(spec);
  const stderr: string[] = [];
  child.stderr?.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
  const conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  const session: Session = { child, conn, stderr, progress: [], pushed: new Map(), onPush: [] };
  conn.onRequest("workspace/configuration", (params: { items: unknown[] }) => params.items.map(() => ({})));
  conn.onRequest("client/registerCapability", () => null);
  conn.onRequest("client/unregisterCapability", () => null);
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.onRequest("workspace/diagnostic/refresh", () => null);
  conn.onRequest("workspace/inlayHint/refresh", () => null);
  conn.onNotification("$/progress", (p: { token: unknown; value: { kind: string } }) => {
    session.progress.push(p);
  });
  conn.onNotification("textDocument/publishDiagnostics", (p: { uri: string; diagnostics: Diagnostic[] }) => {
    session.pushed.set(p.uri, p.diagnostics);
    session.onPush.forEach((f) => f());
  });
  conn.listen();
  return session;
}

function capabilities(pull: boolean): Record<string, unknown> {
  return {
    workspace: {
      configuration: true,
      didChangeConfiguration: { dynamicRegistration: true },
      executeCommand: { dynamicRegistration: true },
      workspaceFolders: true,
      ...(pull ? { diagnostics: { refreshSupport: true }, inlayHint: { refreshSupport: true } } : {}),
    },
    textDocument: {
      synchronization: { dynamicRegistration: true, didSave: true, willSave: false },
      publishDiagnostics: { relatedInformation: true, versionSupport: true, codeDescriptionSupport: true },
      ...(pull ? { diagnostic: { dynamicRegistration: true, relatedDocumentSupport: false } } : {}),
      hover: { contentFormat: ["markdown", "plaintext"] },
      inlayHint: { dynamicRegistration: true },
      codeAction: { codeActionLiteralSupport: { codeActionKind: { valueSet: ["quickfix", "refactor"] } } },
    },
    window: { workDoneProgress: true, showMessage: {}, showDocument: { support: true } },
    general: { positionEncodings: ["utf-16"] },
  };
}

async function initialize(s: Session, pull: boolean): Promise<{ capabilities: Record<string, any> }> {
  const initializationOptions: InitializationOptions = { trusted: false, settings: { onSave: { compile: false } } };
  const result = await withTimeout(
    s.conn.sendRequest<{ capabilities: Record<string, any> }>("initialize", {
      processId: process.pid,
      clientInfo: { name: "stitch-contract-test" },
      rootUri: pathToFileURL(workspace).href,
      workspaceFolders: [{ uri: pathToFileURL(workspace).href, name: "w" }],
      capabilities: capabilities(pull),
      initializationOptions,
    }),
    60_000,
  );
  await s.conn.sendNotification("initialized", {});
  return result;
}

function open(s: Session): Promise<void> {
  return s.conn.sendNotification("textDocument/didOpen", {
    textDocument: { uri: kernelUri, languageId: "cuda-cpp", version: 1, text: KERNEL },
  });
}

async function shutdown(s: Session): Promise<number | null> {
  await withTimeout(s.conn.sendRequest("shutdown"), 15_000);
  await s.conn.sendNotification("exit");
  const exited = await waitForExit(s.child, 15_000);
  assert.ok(exited, "the server exits after shutdown + exit");
  s.conn.dispose();
  return s.child.exitCode;
}

function assertPlantedRule(diagnostics: Diagnostic[]): void {
  const rule = diagnostics.find((d) => d.code === "STC001");
  assert.ok(rule, `expected STC001 on scale.cu, got ${JSON.stringify(diagnostics)}`);
  assert.equal(rule.range.start.line, 4, "on the unguarded write");
}

describe("launch contract: the real server over stdio", { timeout: 120_000 }, () => {
  it("initialize → diagnostics (pulled) → command → shutdown → exit → gone", async () => {
    const s = start();
    try {
      const init = await initialize(s, true);
      const commands: string[] = init.capabilities.executeCommandProvider?.commands ?? [];
      assert.ok(commands.includes("stitch.serverInfo"), `commands: ${commands}`);
      assert.ok(init.capabilities.textDocumentSync, "document sync");

      await open(s);
      let diagnostics: Diagnostic[] = [];
      for (let i = 0; i < 40 && !diagnostics.some((d) => d.code === "STC001"); i++) {
        const report = await s.conn.sendRequest<{ kind: string; items?: Diagnostic[] }>("textDocument/diagnostic", {
          textDocument: { uri: kernelUri },
        });
        diagnostics = report.items ?? [];
        if (!diagnostics.some((d) => d.code === "STC001")) {
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      assertPlantedRule(diagnostics);

      const info = await s.conn.sendRequest<ServerInfo>(SERVER_INFO_REQUEST, {});
      assert.equal(info.trusted, false, "initializationOptions.trusted reached the server");
      assert.equal(info.torchLoaded, false, "the server process never imports torch");
      assert.equal(info.pid, s.child.pid);

      const token = "contract-progress-1";
      const result = await s.conn.sendRequest<ServerInfo>("workspace/executeCommand", {
        command: "stitch.serverInfo",
        arguments: [],
        workDoneToken: token,
      });
      assert.equal(result.version, info.version);
      const kinds = s.progress.filter((p) => p.token === token).map((p) => p.value.kind);
      if (kinds.length > 0) {
        assert.equal(kinds[0], "begin");
        assert.equal(kinds[kinds.length - 1], "end");
      }

      await s.conn.sendNotification("stitch/setTrusted", { trusted: true });
      const trusted = await s.conn.sendRequest<ServerInfo>(SERVER_INFO_REQUEST, {});
      assert.equal(trusted.trusted, true, "stitch/setTrusted reached the server");

      const pid = s.child.pid;
      const code = await shutdown(s);
      assert.equal(code, 0, `exit code; stderr:\n${s.stderr.join("")}`);
      assert.ok(!isAlive(pid), "the process is gone");
      assert.ok(!s.stderr.join("").includes(KEY), "the server's log does not contain the API key");
    } finally {
      if (s.child.exitCode === null) {
        s.child.kill("SIGKILL");
      }
    }
  });

  it("pushes diagnostics to a client without pull diagnostics", async () => {
    const s = start();
    try {
      await initialize(s, false);
      const pushed = new Promise<void>((resolve) => {
        const check = () => {
          if ((s.pushed.get(kernelUri) ?? []).some((d) => d.code === "STC001")) {
            resolve();
          }
        };
        s.onPush.push(check);
      });
      await open(s);
      await withTimeout(pushed, 20_000);
      assertPlantedRule(s.pushed.get(kernelUri) ?? []);
      assert.equal(await shutdown(s), 0);
    } finally {
      if (s.child.exitCode === null) {
        s.child.kill("SIGKILL");
      }
    }
  });
});
