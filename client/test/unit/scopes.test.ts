import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SCOPES_KEY, scopedServerSettings, scopedSettingValue, settingsCommand } from "../../src/core/settings";

describe("scopedServerSettings (the $scopes the server's settings reader trusts)", () => {
  const inspected: Record<string, { globalValue?: unknown; workspaceValue?: unknown; workspaceFolderValue?: unknown }> = {
    python: { globalValue: "/home/me/venv/bin/python" },
    nvccPath: { globalValue: "/usr/local/cuda/bin/nvcc", workspaceValue: "./evil-nvcc" },
    "onSave.verify": { workspaceFolderValue: false, workspaceValue: true },
    rounds: {},
  };
  const result = scopedServerSettings(Object.keys(inspected), (k) => inspected[k]);

  it("sends the user's own value with scope 'user', so an untrusted workspace keeps it", () => {
    assert.equal(result.python, "/home/me/venv/bin/python");
    assert.equal((result[SCOPES_KEY] as Record<string, string>).python, "user");
  });

  it("sends a workspace value with its scope, so the server can drop and name it", () => {
    assert.equal(result.nvccPath, "./evil-nvcc");
    assert.equal((result[SCOPES_KEY] as Record<string, string>).nvccPath, "workspace");
    assert.deepEqual(result.onSave, { verify: false });
    assert.equal((result[SCOPES_KEY] as Record<string, string>)["onSave.verify"], "workspaceFolder");
  });

  it("leaves defaults out (pyproject.toml is not overridden by editor defaults)", () => {
    assert.equal("rounds" in result, false);
    assert.equal("rounds" in (result[SCOPES_KEY] as object), false);
  });

  it("computes $scopes itself: a setting of that name never reaches the server", () => {
    const forged = scopedServerSettings(["$scopes", "python"], (k) =>
      k === "$scopes" ? { workspaceValue: { python: "user" } } : { workspaceValue: "./evil-python" },
    );
    assert.deepEqual(forged[SCOPES_KEY], { python: "workspace" });
  });

  it("names the most specific level", () => {
    assert.deepEqual(scopedSettingValue({ globalValue: 1, workspaceValue: 2 }), { value: 2, scope: "workspace" });
    assert.equal(scopedSettingValue({}), undefined);
  });
});

describe("settingsCommand", () => {
  it("opens the Remote tab in a remote window, where a machine-overridable setting is read", () => {
    assert.equal(settingsCommand("ssh-remote"), "workbench.action.openRemoteSettings");
    assert.equal(settingsCommand(undefined), "workbench.action.openSettings");
  });
});
