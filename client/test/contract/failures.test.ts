/**
 * The bad starts, through the same launch code as the extension: a server that never
 * answers initialize is stopped by the timeout (the process is gone), and one that
 * crashes at start yields its exit code and the Python exception's line for the one
 * message the user sees. Fake interpreters stand in for broken installs.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, it } from "node:test";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { buildLaunch, isAlive, spawnServer, terminate, waitForExit } from "../../src/core/launch";
import { lastLine } from "../../src/core/probe";
import { CrashPolicy, TimeoutError, withTimeout } from "../../src/core/restartPolicy";
import { fakePython } from "../helpers";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "stitch-failures-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function launch(python: string) {
  const child = spawnServer(buildLaunch({ python, cwd: tmp, baseEnv: process.env }));
  const stderr: string[] = [];
  child.stderr?.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
  const conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  conn.onError(() => undefined);
  conn.listen();
  const initialize = conn.sendRequest("initialize", { processId: process.pid, rootUri: null, capabilities: {} });
  return { child, conn, stderr, initialize };
}

describe("bad starts", { timeout: 30_000 }, () => {
  it("a server that never answers initialize is stopped by the timeout, and is gone", async () => {
    const python = fakePython(tmp, "python-hangs", "exec sleep 600");
    const { child, conn, initialize } = launch(python);
    const policy = new CrashPolicy();
    policy.starting();
    await assert.rejects(withTimeout(initialize, 500, () => void terminate(child, 500)), TimeoutError);
    assert.ok(await waitForExit(child, 3000), "the process exited");
    assert.ok(!isAlive(child.pid));
    assert.equal(policy.closed(Date.now()).action, "stop", "and it is not restarted");
    conn.dispose();
  });

  it("a crash at start gives the exit code and the exception's line, and no restart", async () => {
    const python = fakePython(
      tmp,
      "python-crashes",
      `echo "Traceback (most recent call last):" >&2; echo "  File \\"<frozen runpy>\\", line 198" >&2; echo "ModuleNotFoundError: No module named 'pygls'" >&2; exit 3`,
    );
    const { child, conn, stderr, initialize } = launch(python);
    const policy = new CrashPolicy();
    policy.starting();
    await assert.rejects(withTimeout(initialize, 10_000));
    assert.ok(await waitForExit(child, 3000));
    assert.equal(child.exitCode, 3);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(lastLine(stderr.join("")), "ModuleNotFoundError: No module named 'pygls'");
    assert.deepEqual(policy.closed(Date.now()), { action: "stop", reason: "crashed-at-start", crashesInWindow: 1 });
    conn.dispose();
  });
});
