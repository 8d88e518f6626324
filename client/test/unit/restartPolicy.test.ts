import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CrashPolicy, TimeoutError, withTimeout } from "../../src/core/restartPolicy";

const MIN = 60_000;

describe("CrashPolicy", () => {
  it("never restarts a server that crashed before answering initialize", () => {
    const p = new CrashPolicy();
    p.starting();
    assert.deepEqual(p.closed(0), { action: "stop", reason: "crashed-at-start", crashesInWindow: 1 });
  });

  it("restarts twice, then stops at the third crash within three minutes", () => {
    const p = new CrashPolicy();
    const decisions = [0, 1, 2].map((i) => {
      p.starting();
      p.started();
      return p.closed(i * MIN);
    });
    assert.deepEqual(decisions.map((d) => d.action), ["restart", "restart", "stop"]);
    assert.equal(decisions[2].action === "stop" && decisions[2].reason, "too-many-crashes");
  });

  it("keeps restarting crashes that are far apart", () => {
    const p = new CrashPolicy();
    for (let i = 0; i < 10; i++) {
      p.starting();
      p.started();
      assert.equal(p.closed(i * 2 * MIN).action, "restart", `crash ${i}`);
    }
  });

  it("stops a server that crashes at start after an earlier restart (no loop)", () => {
    const p = new CrashPolicy();
    p.starting();
    p.started();
    assert.equal(p.closed(0).action, "restart");
    p.starting(); // the restart: crashes before initialize
    assert.equal(p.closed(1000).action, "stop");
  });

  it("forgets crashes when the user restarts", () => {
    const p = new CrashPolicy();
    for (const t of [0, 1]) {
      p.starting();
      p.started();
      p.closed(t);
    }
    p.reset();
    p.starting();
    p.started();
    assert.equal(p.closed(2).action, "restart");
  });
});

describe("withTimeout", () => {
  it("rejects with TimeoutError and calls onTimeout when the promise hangs", async () => {
    let killed = false;
    await assert.rejects(
      withTimeout(new Promise(() => undefined), 50, () => {
        killed = true;
      }),
      TimeoutError,
    );
    assert.ok(killed);
  });

  it("passes values and errors through", async () => {
    assert.equal(await withTimeout(Promise.resolve(3), 1000), 3);
    await assert.rejects(withTimeout(Promise.reject(new Error("boom")), 1000), /boom/);
  });
});
