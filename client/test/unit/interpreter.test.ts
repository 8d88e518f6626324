import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { expandPath, resolveInterpreter } from "../../src/core/interpreter";

const base = { workspaceFolders: ["/work/proj"], trusted: true, platform: "linux" as const, homeDir: "/home/u" };

describe("resolveInterpreter", () => {
  it("prefers stitch.python over the Python extension", async () => {
    let asked = false;
    const r = await resolveInterpreter({
      ...base,
      configured: "/opt/py/bin/python",
      pythonExtension: async () => {
        asked = true;
        return "/usr/bin/python3.12";
      },
    });
    assert.deepEqual([r.command, r.source], ["/opt/py/bin/python", "setting"]);
    assert.equal(asked, false, "the Python extension is not consulted when the setting is set");
  });

  it("uses the Python extension's active interpreter when the setting is empty", async () => {
    const r = await resolveInterpreter({ ...base, configured: "  ", pythonExtension: async () => "/usr/bin/python3.12" });
    assert.deepEqual([r.command, r.source], ["/usr/bin/python3.12", "python-extension"]);
  });

  it("falls back to python3 without the Python extension, or when it fails", async () => {
    const none = await resolveInterpreter({ ...base, configured: undefined, pythonExtension: async () => undefined });
    assert.deepEqual([none.command, none.source], ["python3", "default"]);
    const broken = await resolveInterpreter({
      ...base,
      configured: "",
      pythonExtension: async () => {
        throw new Error("activation failed");
      },
    });
    assert.deepEqual([broken.command, broken.source], ["python3", "default"]);
    assert.match(broken.skipped[0], /activation failed/);
  });

  it("uses python on Windows", async () => {
    const r = await resolveInterpreter({ ...base, platform: "win32", configured: "", pythonExtension: async () => undefined });
    assert.equal(r.command, "python");
  });

  it("does not run an interpreter inside an untrusted workspace", async () => {
    const r = await resolveInterpreter({
      ...base,
      trusted: false,
      configured: "",
      pythonExtension: async () => "/work/proj/.venv/bin/python",
    });
    assert.deepEqual([r.command, r.source], ["python3", "default"]);
    assert.match(r.skipped[0], /untrusted/);
    const outside = await resolveInterpreter({ ...base, trusted: false, configured: "", pythonExtension: async () => "/usr/bin/python3" });
    assert.equal(outside.source, "python-extension");
  });
});

describe("expandPath", () => {
  it("expands ${workspaceFolder}, ~ and workspace-relative paths, and leaves bare names for PATH", () => {
    assert.equal(expandPath("${workspaceFolder}/.venv/bin/python", ["/w"], "/h"), "/w/.venv/bin/python");
    assert.equal(expandPath("~/venvs/s/bin/python", ["/w"], "/h"), "/h/venvs/s/bin/python");
    assert.equal(expandPath(".venv/bin/python", ["/w"], "/h"), "/w/.venv/bin/python");
    assert.equal(expandPath("python3.12", ["/w"], "/h"), "python3.12");
  });
});
