import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, it } from "node:test";
import {
  CLIENT_ONLY_KEYS,
  changeNeedsRestart,
  contributedKeys,
  explicitSettingValue,
  restrictedKeys,
  serverSettingKeys,
  serverSettings,
  toSnakeCase,
  userSettingValue,
} from "../../src/core/settings";
import { readPackageJson, repoRoot, serverEnv, testPython } from "../helpers";

const pkg = readPackageJson();
const contributed = contributedKeys(pkg);
const properties: Record<string, { type: string; default: unknown; markdownDescription?: string; description?: string }> =
  Object.assign({}, ...((pkg.contributes as { configuration: { properties: object }[] }).configuration.map((c) => c.properties)));

/** Server `Settings` fields that no editor setting maps to, and why. */
const SERVER_ONLY_FIELDS: Record<string, string> = {
  trusted: "set from VS Code's workspace trust (initializationOptions.trusted / stitch/setTrusted), never from settings",
};

/** The server's Settings fields (dotted for nested attrs classes) and their defaults, read from Python. */
function pythonSettings(): Record<string, unknown> {
  const script = `
import json, attrs
from stitch_lsp.settings import Settings
def dump(cls, prefix=""):
    out = {}
    for f in attrs.fields(cls):
        default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
        if attrs.has(type(default)):
            out.update(dump(type(default), prefix + f.name + "."))
        else:
            out[prefix + f.name] = default
    return out
print(json.dumps(dump(Settings)))
`;
  const out = execFileSync(testPython(), ["-c", script], { env: serverEnv(), cwd: repoRoot(), encoding: "utf8" });
  return JSON.parse(out) as Record<string, unknown>;
}

describe("settings contributed in package.json", () => {
  const serverKeys = serverSettingKeys(contributed);
  const fields = pythonSettings();

  it("has one editor setting for every server Settings field, and no setting the server lacks", () => {
    const fromEditor = new Set(serverKeys.map(toSnakeCase));
    const fromServer = new Set(Object.keys(fields).filter((f) => !(f in SERVER_ONLY_FIELDS)));
    const missingInEditor = [...fromServer].filter((f) => !fromEditor.has(f));
    const unknownToServer = [...fromEditor].filter((f) => !fromServer.has(f));
    assert.deepEqual(missingInEditor, [], `server Settings fields with no stitch.* setting in package.json: ${missingInEditor}`);
    assert.deepEqual(unknownToServer, [], `stitch.* settings the server's Settings does not have: ${unknownToServer}`);
  });

  it("uses the server's defaults and matching JSON types", () => {
    const jsonType = (v: unknown) =>
      Array.isArray(v) ? "array" : v === null ? "null" : typeof v === "object" ? "object" : typeof v === "boolean" ? "boolean" : typeof v === "number" ? "number" : "string";
    for (const key of serverKeys) {
      const prop = properties[`stitch.${key}`];
      const serverDefault = fields[toSnakeCase(key)];
      assert.deepEqual(prop.default, serverDefault, `default of stitch.${key}`);
      const declared = prop.type === "integer" ? "number" : prop.type;
      assert.equal(declared, jsonType(serverDefault), `type of stitch.${key}`);
      if (prop.type === "integer") {
        assert.ok(Number.isInteger(serverDefault), `stitch.${key} is an integer setting but the server default is ${serverDefault}`);
      }
    }
  });

  it("describes every setting", () => {
    for (const key of contributed) {
      const text = properties[key].markdownDescription ?? properties[key].description ?? "";
      assert.ok(text.length > 20, `stitch setting ${key} needs a description`);
    }
  });

  it("keeps client-only settings (the interpreter's trace) out of what the server gets", () => {
    assert.ok(contributed.includes("stitch.trace.server"));
    assert.ok(!serverKeys.includes("trace.server"));
    assert.deepEqual(CLIENT_ONLY_KEYS, ["trace.server"]);
    assert.ok(serverKeys.includes("python"), "stitch.python also tells the server which Python runs its workers");
  });

  it("restricts, in untrusted workspaces, every setting that names a program or flags to run", () => {
    const restricted = restrictedKeys(pkg);
    for (const key of ["stitch.python", "stitch.nvccPath", "stitch.extraFlags"]) {
      assert.ok(restricted.includes(key), key);
      assert.ok(contributed.includes(key), key);
    }
  });
});

describe("serverSettings", () => {
  it("sends only what the user set, nesting dotted keys", () => {
    const set: Record<string, unknown> = { nvccPath: "/opt/cuda/bin/nvcc", "onSave.profile": true, gpuIndex: 1 };
    const result = serverSettings(["nvccPath", "onSave.compile", "onSave.profile", "gpuIndex", "arch"], (k) => set[k]);
    assert.deepEqual(result, { nvccPath: "/opt/cuda/bin/nvcc", onSave: { profile: true }, gpuIndex: 1 });
  });

  it("sends nothing when nothing is set, so pyproject's [tool.stitch] is not overridden by editor defaults", () => {
    assert.deepEqual(serverSettings(["nvccPath", "onSave.compile"], () => undefined), {});
  });

  it("takes the most specific level, and only user settings for restricted keys in untrusted workspaces", () => {
    const inspected = { globalValue: "/usr/bin/python3", workspaceValue: "./.venv/bin/python" };
    assert.equal(explicitSettingValue(inspected, true, true), "./.venv/bin/python");
    assert.equal(explicitSettingValue(inspected, false, true), "/usr/bin/python3");
    assert.equal(explicitSettingValue(inspected, false, false), "./.venv/bin/python");
    assert.equal(explicitSettingValue({ workspaceFolderValue: 2, workspaceValue: 1 }, true, false), 2);
    assert.equal(explicitSettingValue(undefined, true, false), undefined);
  });

  it("sends user-scope values apart, never a workspace's", () => {
    const inspected = { globalValue: "/usr/local/cuda/bin/nvcc", workspaceValue: "./evil.sh", workspaceFolderValue: "./x" };
    assert.equal(userSettingValue(inspected), "/usr/local/cuda/bin/nvcc");
    assert.equal(userSettingValue({ workspaceValue: "./evil.sh" }), undefined);
    assert.equal(userSettingValue(undefined), undefined);
  });

  it("restarts the server only for the interpreter", () => {
    assert.equal(changeNeedsRestart((s) => s === "stitch.python"), true);
    assert.equal(changeNeedsRestart((s) => s === "stitch.nvccPath"), false);
    assert.equal(changeNeedsRestart((s) => s === "stitch.trace.server"), false);
  });

  it("maps camelCase to the server's snake_case fields", () => {
    assert.equal(toSnakeCase("compileTimeoutS"), "compile_timeout_s");
    assert.equal(toSnakeCase("onSave.compile"), "on_save.compile");
    assert.equal(toSnakeCase("cacheMaxMb"), "cache_max_mb");
  });
});
