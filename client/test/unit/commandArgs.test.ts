import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { editorArguments, type EditorState } from "../../src/core/commandArgs";

const at = (line: number, character: number) => ({ line, character });
const editor = (selection: EditorState["selection"], cursor = selection.end): EditorState => ({
  uri: "file:///w/model.py",
  selection,
  cursor,
});

describe("editorArguments (palette and context-menu invocations)", () => {
  it("sends the selection's range for fuse, as the server's [uri, range]", () => {
    const sel = { start: at(5, 4), end: at(5, 33) };
    assert.deepEqual(editorArguments("stitch.fuseSelection", editor(sel)), { ok: true, args: ["file:///w/model.py", sel] });
  });

  it("asks for a selection instead of fusing nothing", () => {
    const r = editorArguments("stitch.fuseSelection", editor({ start: at(5, 4), end: at(5, 4) }));
    assert.equal(r.ok, false);
    assert.match(!r.ok ? r.message : "", /select the PyTorch code/);
  });

  it("sends the cursor for verify and profile, as [uri, position]", () => {
    const e = editor({ start: at(3, 20), end: at(3, 20) });
    assert.deepEqual(editorArguments("stitch.verifyKernel", e), { ok: true, args: ["file:///w/model.py", at(3, 20)] });
    assert.deepEqual(editorArguments("stitch.profileKernel", e), { ok: true, args: ["file:///w/model.py", at(3, 20)] });
  });

  it("needs an editor for kernel commands, but not for the report or cancel", () => {
    assert.equal(editorArguments("stitch.verifyKernel", undefined).ok, false);
    assert.deepEqual(editorArguments("stitch.showReport", undefined), { ok: true, args: [] });
    assert.deepEqual(editorArguments("stitch.cancelAll", editor({ start: at(0, 0), end: at(0, 0) })), { ok: true, args: [] });
    const e = editor({ start: at(3, 20), end: at(3, 20) });
    assert.deepEqual(editorArguments("stitch.showReport", e), { ok: true, args: ["file:///w/model.py", at(3, 20)] });
  });
});
