import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ServerInfo, StatusParams } from "../../src/core/protocol";
import { plainLabel, shortGpuName, statusView } from "../../src/core/statusText";

const info: ServerInfo = { version: "0.1.0", pid: 42, torchLoaded: false, trusted: true, nvcc: { path: "/usr/local/cuda/bin/nvcc", version: "13.0" }, gpu: "NVIDIA H100 80GB HBM3" };
const status = (s: Partial<StatusParams>): StatusParams => ({ gpu: "NVIDIA H100 80GB HBM3", running: 0, queued: 0, trusted: true, lastReport: null, ...s });

describe("status bar text", () => {
  it("names the GPU shortly", () => {
    assert.equal(shortGpuName("NVIDIA H100 80GB HBM3"), "H100");
    assert.equal(shortGpuName("NVIDIA A100-SXM4-40GB"), "A100");
    assert.equal(shortGpuName("NVIDIA GeForce RTX 4090"), "RTX 4090");
    assert.equal(shortGpuName("NVIDIA L40S"), "L40S");
  });

  it("shows the GPU and running / queued jobs", () => {
    assert.equal(statusView("running", true, info, status({ running: 1 })).text, "$(zap) H100 · 1 running");
    assert.equal(statusView("running", true, info, status({ running: 1, queued: 2 })).text, "$(zap) H100 · 1 running · 2 queued");
    assert.equal(statusView("running", true, info, status({})).text, "$(zap) H100");
  });

  it("says no GPU when there is none", () => {
    assert.equal(statusView("running", true, { ...info, gpu: null }, undefined).text, "$(zap) no GPU");
    assert.equal(statusView("running", true, { ...info, gpu: null }, status({ gpu: null })).text, "$(zap) no GPU");
    assert.equal(statusView("running", true, info, status({ gpu: null, running: 1 })).text, "$(zap) H100 · 1 running", "detected before any job ran");
  });

  it("says restricted in an untrusted workspace, and explains it in the tooltip", () => {
    const view = statusView("running", false, { ...info, trusted: false }, undefined);
    assert.equal(view.text, "$(shield) H100 · restricted");
    assert.match(view.tooltip, /restricted mode/);
    assert.equal(statusView("running", false, info, status({ trusted: true })).text, "$(zap) H100", "the server's word after trust is granted");
  });

  it("shows starting and failed states", () => {
    assert.match(statusView("starting", true, undefined, undefined).text, /sync~spin/);
    const failed = statusView("failed", true, undefined, undefined, "stitch_lsp is not installed");
    assert.equal(failed.severity, "error");
    assert.match(failed.tooltip, /not installed/);
  });

  it("lists nvcc, the last report and what a click does in the tooltip", () => {
    const view = statusView("running", true, info, status({ lastReport: "/w/.stitch/reports/softmax.md" }));
    assert.match(view.tooltip, /nvcc: 13\.0/);
    assert.match(view.tooltip, /softmax\.md/);
    assert.match(view.tooltip, /Click for actions/);
  });

  it("says where the LLM Coder's key comes from, never the key", () => {
    const none = statusView("running", true, info, undefined, undefined, { configured: false, keySource: null, model: "m", coder: "auto" });
    assert.match(none.tooltip, /no API key/);
    const client = statusView("running", true, info, undefined, undefined, { configured: true, keySource: "client", model: "m", coder: "llm" });
    assert.match(client.tooltip, /secret storage/);
  });
});

describe("the status item's accessible label", () => {
  it("is plain words: no Markdown, no icon names", () => {
    const v = statusView("running", false, undefined, { gpu: null, running: 1, queued: 0, trusted: false, lastReport: null });
    assert.equal(v.ariaLabel, "Stitch: no GPU, 1 jobs running, 0 queued, restricted mode");
    assert.doesNotMatch(plainLabel(v.ariaLabel), /\*\*|\$\(|`/);
    assert.equal(plainLabel("$(zap) **Stitch** `x`"), "Stitch x");
  });
});
