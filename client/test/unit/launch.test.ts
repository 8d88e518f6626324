import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { API_KEY_ENV, buildLaunch, describeLaunch, isAlive, spawnServer, terminate } from "../../src/core/launch";

describe("buildLaunch", () => {
  it("runs `<python> -m stitch_lsp` in the workspace", () => {
    const spec = buildLaunch({ python: "/usr/bin/python3", cwd: "/w", baseEnv: { PATH: "/usr/bin" } });
    assert.equal(spec.command, "/usr/bin/python3");
    assert.deepEqual(spec.args, ["-m", "stitch_lsp"]);
    assert.equal(spec.cwd, "/w");
    assert.equal(spec.env.PATH, "/usr/bin");
    assert.equal(spec.env.PYTHONUNBUFFERED, "1");
  });

  it("injects the stored API key into the environment only, and never into the description", () => {
    const key = "sk-ant-api03-SECRETSECRETSECRET";
    const baseEnv = { PATH: "/usr/bin" };
    const spec = buildLaunch({ python: "python3", cwd: "/w", baseEnv, apiKey: key });
    assert.equal(spec.env[API_KEY_ENV], key);
    assert.ok(!spec.args.join(" ").includes(key));
    const text = describeLaunch(spec);
    assert.ok(!text.includes(key), text);
    assert.match(text, /python3 -m stitch_lsp/);
    assert.match(text, /API key passed in the environment/);
    assert.equal((baseEnv as NodeJS.ProcessEnv)[API_KEY_ENV], undefined, "the editor's environment is not changed");
  });

  it("keeps an inherited key when none is stored", () => {
    const spec = buildLaunch({ python: "python3", baseEnv: { [API_KEY_ENV]: "from-shell-env-1234" } });
    assert.equal(spec.env[API_KEY_ENV], "from-shell-env-1234");
  });
});

describe("spawnServer / terminate", () => {
  it("ends a process that ignores SIGTERM", async () => {
    const spec = buildLaunch({ python: "/bin/sh", baseEnv: process.env });
    spec.args = ["-c", "trap '' TERM; while true; do sleep 0.1; done"];
    const child = spawnServer(spec);
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(isAlive(child.pid));
    await terminate(child, 300);
    assert.ok(!isAlive(child.pid), "the process is gone");
  });
});
