import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TrustMessageState } from "../../src/core/trustMessage";

const evil = {
  message: "Stitch ignores settings this workspace sets until you trust it, from workspace settings: nvccPath ./evil (names a program).",
  ignored: [{ setting: "nvccPath", value: "./evil", source: "workspace settings", reason: "names a program" }],
};

describe("TrustMessageState (one restricted-mode message)", () => {
  it("warns once about what the workspace set, also when a restarted server reports it again", () => {
    const s = new TrustMessageState();
    assert.equal(s.onServer(evil, false).kind, "warn");
    assert.equal(s.onServer(evil, false).kind, "none");
  });

  it("says nothing when the workspace set nothing, and nothing on trust then", () => {
    const s = new TrustMessageState();
    assert.equal(s.onTrusted().kind, "none");
  });

  it("supersedes the warning once when the folder is trusted (client or server noticing first)", () => {
    const s = new TrustMessageState();
    s.onServer(evil, false);
    const action = s.onTrusted();
    assert.equal(action.kind, "superseded");
    assert.equal(s.onServer({ message: "", ignored: [] }, true).kind, "none");
  });

  it("does not warn in a trusted workspace", () => {
    assert.equal(new TrustMessageState().onServer(evil, true).kind, "none");
  });
});
