import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stderrEntry, stderrLevel } from "../../src/core/logLines";
import { needsEditorArguments, reportTarget } from "../../src/core/report";

describe("reportTarget", () => {
  it("tells a report file from Markdown text", () => {
    assert.deepEqual(reportTarget("/w/.stitch/reports/softmax.md"), { kind: "file", path: "/w/.stitch/reports/softmax.md" });
    assert.deepEqual(reportTarget(".stitch/reports/a.md"), { kind: "file", path: ".stitch/reports/a.md" });
    assert.deepEqual(reportTarget("# Report\n\nspeedup 2.1x"), { kind: "markdown", text: "# Report\n\nspeedup 2.1x" });
    assert.deepEqual(reportTarget("file:///w/r.md"), { kind: "uri", uri: "file:///w/r.md" });
    assert.deepEqual(reportTarget("/w/report", (p) => p === "/w/report"), { kind: "file", path: "/w/report" });
  });

  it("accepts an object answer and treats nothing as no report", () => {
    assert.deepEqual(reportTarget({ path: "/r.md" }), { kind: "file", path: "/r.md" });
    assert.deepEqual(reportTarget({ markdown: "# R" }), { kind: "markdown", text: "# R" });
    assert.deepEqual(reportTarget({ path: null, message: "no verdict yet" }), { kind: "none", message: "no verdict yet" });
    assert.deepEqual(reportTarget(null), { kind: "none" });
    assert.deepEqual(reportTarget(""), { kind: "none" });
  });
});

describe("needsEditorArguments", () => {
  it("fills in arguments for palette and context-menu invocations only", () => {
    assert.equal(needsEditorArguments([]), true);
    assert.equal(needsEditorArguments([{ scheme: "file", path: "/a.cu" }]), true);
    assert.equal(needsEditorArguments(["file:///a.cu", { line: 1, character: 0 }]), false);
  });
});

describe("stderrLevel", () => {
  it("reads Python logging levels and tracebacks", () => {
    assert.equal(stderrLevel("2026-11-21 18:00:00 INFO stitch_lsp.lsp: ready"), "info");
    assert.equal(stderrLevel("WARNING:stitch_lsp.jobs:queue full"), "warn");
    assert.equal(stderrLevel("Traceback (most recent call last):"), "error");
    assert.equal(stderrLevel("ModuleNotFoundError: No module named 'pygls'"), "error");
    assert.equal(stderrLevel("  File \"x.py\", line 3"), "info");
  });
});

describe("stderrEntry", () => {
  it("drops Python's own timestamp and level, which the log channel shows anyway", () => {
    assert.deepEqual(stderrEntry("2026-11-21 18:11:07,405 INFO stitch_lsp.lsp: ready"), { level: "info", text: "stitch_lsp.lsp: ready" });
    assert.deepEqual(stderrEntry("2026-11-21 18:11:07,405 ERROR boom"), { level: "error", text: "boom" });
    assert.deepEqual(stderrEntry("plain line"), { level: "info", text: "plain line" });
  });
});
