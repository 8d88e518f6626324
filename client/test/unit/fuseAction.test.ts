import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { pickFuseAction } from "../../src/core/fuseAction";

const run = {
  title: "Stitch: fuse 3 ops into a CUDA kernel",
  kind: "refactor.rewrite",
  command: { title: "Stitch: fuse 3 ops into a CUDA kernel", command: "stitch.fuse", arguments: ["file:///w/m.py", 4, 5, 5] },
};

describe("pickFuseAction (the server's fuse code action, for the palette command)", () => {
  it("runs the server's fuse command with the server's own arguments", () => {
    assert.deepEqual(pickFuseAction([{ title: "Organize imports" }, run]), {
      kind: "run",
      title: run.title,
      command: run.command,
    });
  });

  it("passes on why fusing is not possible, with the shape-comment quick fix", () => {
    const fix = { title: "Stitch: add a shape comment for x, w", kind: "quickfix", edit: { changes: {} } };
    const disabled = { title: run.title, kind: "refactor.rewrite", disabled: { reason: "no shapes for x, w" } };
    assert.deepEqual(pickFuseAction([fix, disabled]), { kind: "disabled", reason: "no shapes for x, w", fix });
    assert.deepEqual(pickFuseAction([disabled]), { kind: "disabled", reason: "no shapes for x, w", fix: undefined });
  });

  it("says there is nothing to fuse when the server offers no fuse action", () => {
    assert.deepEqual(pickFuseAction([]), { kind: "none" });
    assert.deepEqual(pickFuseAction(null), { kind: "none" });
    assert.deepEqual(pickFuseAction([{ title: "Extract method", command: { title: "x", command: "other" } }]), { kind: "none" });
  });
});
