import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, it } from "node:test";
import { findSourceCheckout, installAdvice, installProblem, probeServer, shellQuote } from "../../src/core/probe";
import { fakePython, repoRoot, serverEnv, testPython } from "../helpers";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "stitch-probe-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe("probeServer", () => {
  it("finds stitch_lsp in the real Python and reports its version", async () => {
    const r = await probeServer(testPython(), { env: serverEnv(), cwd: tmp });
    assert.equal(r.ok, true, JSON.stringify(r));
    assert.match(r.ok ? r.version : "", /^\d+\.\d+/);
  });

  it("reports a missing interpreter", async () => {
    const r = await probeServer(path.join(tmp, "no-such-python"));
    assert.equal(!r.ok && r.kind, "not-found");
  });

  it("reports a Python without stitch_lsp", async () => {
    const py = fakePython(tmp, "python-without", `echo "ModuleNotFoundError: No module named 'stitch_lsp'" >&2; exit 1`);
    const r = await probeServer(py);
    assert.equal(!r.ok && r.kind, "not-importable");
  });

  it("catches a broken install in the real Python (the package imports, the server does not)", async () => {
    // PYTHONPATH puts stitch_lsp on the path, but -I (isolated) drops it and site-packages stay:
    // instead, run the system's bare interpreter against the checkout, which lacks pygls there.
    const bare = fakePython(tmp, "python-bare", `exec env -u PYTHONPATH PYTHONNOUSERSITE=1 python3 -S "$@"`);
    const r = await probeServer(bare, { cwd: repoRoot() });
    assert.equal(r.ok, false, JSON.stringify(r));
    assert.equal(!r.ok && r.kind, "failed", JSON.stringify(r));
    assert.match(!r.ok ? r.detail : "", /No module named '(pygls|lsprotocol|attrs|cattrs)/);
  });

  it("reports a broken install (a dependency missing) with the error line", async () => {
    const py = fakePython(tmp, "python-broken", `echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'pygls'" >&2; exit 1`);
    const r = await probeServer(py);
    assert.equal(!r.ok && r.kind, "failed");
    assert.match(!r.ok ? r.detail : "", /pygls/);
  });

  it("gives up on an interpreter that hangs", async () => {
    const py = fakePython(tmp, "python-hangs", `sleep 30`);
    const r = await probeServer(py, { timeoutMs: 300 });
    assert.equal(!r.ok && r.kind, "timeout");
  });
});

describe("installAdvice", () => {
  it("gives the exact pip commands for that interpreter", () => {
    const a = installAdvice("/opt/my py/bin/python", { ok: false, kind: "not-importable", detail: "" }, undefined, "linux");
    // There is no stitch-lsp on PyPI: a checkout or a wheel, never a package name pip cannot find.
    assert.doesNotMatch(a.message, /pip install stitch-lsp/);
    assert.match(a.message, /'\/opt\/my py\/bin\/python' -m pip install -e '<path to your Stitch checkout>'/);
    assert.match(a.message, /pip install <path to stitch_lsp-\*\.whl>/);
    assert.equal(a.command, "'/opt/my py/bin/python' -m pip install -e '<path to your Stitch checkout>'");
  });

  it("offers the editable install of a source checkout open in the workspace", () => {
    const checkout = findSourceCheckout([tmp, repoRoot()]);
    assert.equal(checkout, repoRoot());
    const a = installAdvice("python3", { ok: false, kind: "not-importable", detail: "" }, checkout, "linux");
    assert.equal(a.command, `python3 -m pip install -e ${shellQuote(repoRoot(), "linux")}`);
  });

  it("tells a missing Python apart from a missing package", () => {
    const a = installAdvice("python3", { ok: false, kind: "not-found", detail: "python3: no such file or command" }, undefined, "linux");
    assert.match(a.message, /could not start Python/);
    assert.match(a.message, /stitch\.python/);
  });
});

describe("installProblem (the server started directly, no probe)", () => {
  it("names a missing interpreter from the spawn error", () => {
    assert.equal(installProblem("/no/python", "ENOENT", "")?.kind, "not-found");
  });

  it("names a missing package from the server's own traceback", () => {
    const stderr = "Traceback (most recent call last):\n  ...\n/usr/bin/python3: No module named stitch_lsp";
    const p = installProblem("python3", undefined, stderr);
    assert.equal(p?.kind, "not-importable");
    assert.match(p?.detail ?? "", /No module named stitch_lsp/);
  });

  it("names a broken install (a dependency missing)", () => {
    assert.equal(installProblem("python3", undefined, "ModuleNotFoundError: No module named 'pygls'")?.kind, "failed");
  });

  it("leaves other failures to the general message", () => {
    assert.equal(installProblem("python3", undefined, "RuntimeError: something else"), undefined);
  });
});
