/**
 * The launch contract, end to end: the real Python server, started through the
 * extension's own launch code (buildLaunch / spawnServer), driven over stdio with
 * vscode-jsonrpc the way VS Code drives it.
 *
 * initialize (untrusted, as a fresh workspace is) → open a .cu with a planted rule
 * violation → diagnostics (pulled, as VS Code does, and pushed to a client without
 * pull) → a command with a work-done token → shutdown → exit → the process is gone.
 *
 * Progress: in a trusted session, `stitch.verifyKernel` on a paired kernel runs a
 * real job (the Verifier is the CPU stand-in the server's own job tests use, a
 * real worker process) that reports work-done progress begin → report → end and
 * `stitch/status`; `stitch.showReport` then answers with the report file.
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
import {
  SERVER_INFO_REQUEST,
  STATUS_NOTIFICATION,
  type InitializationOptions,
  type ServerInfo,
  type StatusParams,
} from "../../src/core/protocol";
import { reportTarget } from "../../src/core/report";
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
  progress: { token: unknown; value: { kind: string; title?: string; message?: string } }[];
  statuses: StatusParams[];
  pushed: Map<string, Diagnostic[]>;
  onPush: (() => void)[];
}

const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "stitch-contract-"));
const kernelPath = path.join(workspace, "scale.cu");
fs.writeFileSync(kernelPath, KERNEL);
const kernelUri = pathToFileURL(kernelPath).href;
after(() => fs.rmSync(workspace, { recursive: true, force: true }));

function start(extraEnv: NodeJS.ProcessEnv = {}, cwd = workspace): Session {
  const spec = buildLaunch({ python: testPython(), cwd, baseEnv: serverEnv(extraEnv), apiKey: KEY });
  assert.equal(spec.env[API_KEY_ENV], KEY);
  const child = spawnServer(spec);
  const stderr: string[] = [];
  child.stderr?.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
  const conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  const session: Session = { child, conn, stderr, progress: [], statuses: [], pushed: new Map(), onPush: [] };
  conn.onRequest("workspace/configuration", (params: { items: unknown[] }) => params.items.map(() => ({})));
  conn.onRequest("client/registerCapability", () => null);
  conn.onRequest("client/unregisterCapability", () => null);
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.onRequest("workspace/diagnostic/refresh", () => null);
  conn.onRequest("workspace/inlayHint/refresh", () => null);
  conn.onNotification(STATUS_NOTIFICATION, (p: StatusParams) => {
    session.statuses.push(p);
  });
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

async function initialize(s: Session, pull: boolean, trusted = false, root = workspace): Promise<{ capabilities: Record<string, any> }> {
  const initializationOptions: InitializationOptions = {
    trusted,
    handles: [],
    // The merged view names a workspace nvcc; the user's own scope names theirs.
    settings: { onSave: { compile: false, verify: false }, nvccPath: "./workspace-nvcc" },
    userSettings: { nvccPath: "/opt/user-cuda/bin/nvcc" },
  };
  const result = await withTimeout(
    s.conn.sendRequest<{ capabilities: Record<string, any> }>("initialize", {
      processId: process.pid,
      clientInfo: { name: "stitch-contract-test" },
      rootUri: pathToFileURL(root).href,
      workspaceFolders: [{ uri: pathToFileURL(root).href, name: "w" }],
      capabilities: capabilities(pull),
      initializationOptions,
    }),
    60_000,
  );
  await s.conn.sendNotification("initialized", {});
  return result;
}

function open(s: Session, uri = kernelUri, text = KERNEL): Promise<void> {
  return s.conn.sendNotification("textDocument/didOpen", {
    textDocument: { uri, languageId: "cuda-cpp", version: 1, text },
  });
}

async function until<T>(what: string, probe: () => T | undefined | false, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

// A kernel paired with a KernelBench reference (the pairing comment), as in the server's job tests.
const REFERENCE = `import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) * 2.0


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
`;
const PAIRED = `#include <cuda_runtime.h>

// stitch: reference=ref/gelu_ref.py
__global__ void fused_gelu_scale(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}

void launch(const float* x, float* out, int n) {
    fused_gelu_scale<<<(n + 255) / 256, 256>>>(x, out, n);
}
`;

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

describe("launch contract: the real server over stdio", { timeout: 300_000 }, () => {
  it("initialize → diagnostics (pulled) → command → shutdown → exit → gone", async () => {
    const s = start();
    try {
      const init = await initialize(s, true);
      const commands: string[] = init.capabilities.executeCommandProvider?.commands ?? [];
      assert.ok(commands.includes("stitch.serverInfo"), `commands: ${commands}`);
      assert.ok(init.capabilities.textDocumentSync, "document sync");

      await open(s);
      let diagnostics: Diagnostic[] = [];
      // Time-based, not a count of tries: CI machines can be slow and busy.
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && !diagnostics.some((d) => d.code === "STC001")) {
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
      const chosen = (info as unknown as { settings: { nvcc_path: string } }).settings.nvcc_path;
      assert.equal(chosen, "/opt/user-cuda/bin/nvcc", "untrusted: the user's nvcc, never the workspace's");
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

  it("a trusted verify reports work-done progress and status, and its report opens", async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "stitch-contract-verify-"));
    fs.mkdirSync(path.join(root, "ref"));
    fs.writeFileSync(path.join(root, "ref", "gelu_ref.py"), REFERENCE);
    const cu = path.join(root, "gelu.cu");
    fs.writeFileSync(cu, PAIRED);
    const uri = pathToFileURL(cu).href;
    const s = start(
      {
        STITCH_TEST_VERIFIER: "tests.jobs.stand_in_verifier:StandInVerifier",
        STAND_IN_SECONDS: "0.3",
        STAND_IN_LOG: path.join(root, "stand_in.jsonl"),
      },
      root,
    );
    try {
      const init = await initialize(s, true, true, root);
      const commands: string[] = init.capabilities.executeCommandProvider?.commands ?? [];
      for (const c of ["stitch.verifyKernel", "stitch.profileKernel", "stitch.showReport", "stitch.cancelAll"]) {
        assert.ok(commands.includes(c), `the server provides ${c}`);
      }
      await open(s, uri, PAIRED);
      // What the palette sends: [uri, position] of the cursor, on the kernel's name.
      const answer = await s.conn.sendRequest<{ ok: boolean; kernel: string }>("workspace/executeCommand", {
        command: "stitch.verifyKernel",
        arguments: [uri, { line: 3, character: 20 }],
      });
      assert.equal(answer.ok, true, JSON.stringify(answer));
      assert.equal(answer.kernel, "fused_gelu_scale");
      const token = await until("progress to begin", () => s.progress.find((p) => p.value.kind === "begin")?.token);
      const ended = await until("progress to end", () =>
        s.progress.find((p) => p.token === token && p.value.kind === "end"),
      );
      const kinds = s.progress.filter((p) => p.token === token).map((p) => p.value.kind);
      assert.equal(kinds[0], "begin");
      assert.ok(kinds.includes("report"), `reports: ${kinds}`);
      assert.equal(ended.value.message, "done");
      assert.match(String(s.progress.find((p) => p.token === token)?.value.title), /Verify fused_gelu_scale/);
      // The status bar's feed: a running job, then idle, trusted.
      await until("a status with a running job", () => s.statuses.some((st) => st.running === 1));
      const idle = await until("an idle status", () => {
        const last = s.statuses[s.statuses.length - 1];
        return last && last.running === 0 && last.queued === 0 ? last : undefined;
      });
      assert.equal(idle.trusted, true);
      // Show Last Report: the answer names a Markdown file the client opens in the preview.
      const report = await s.conn.sendRequest<unknown>("workspace/executeCommand", {
        command: "stitch.showReport",
        arguments: [uri, { line: 3, character: 20 }],
      });
      const target = reportTarget(report, (p) => fs.existsSync(p));
      assert.equal(target.kind, "file", JSON.stringify(report));
      assert.ok(target.kind === "file" && fs.readFileSync(target.path, "utf8").includes("fused_gelu_scale"));
      assert.equal(await shutdown(s), 0);
    } finally {
      if (s.child.exitCode === null) {
        s.child.kill("SIGKILL");
      }
      fs.rmSync(root, { recursive: true, force: true });
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
      await withTimeout(pushed, 60_000);
      assertPlantedRule(s.pushed.get(kernelUri) ?? []);
      assert.equal(await shutdown(s), 0);
    } finally {
      if (s.child.exitCode === null) {
        s.child.kill("SIGKILL");
      }
    }
  });
});
