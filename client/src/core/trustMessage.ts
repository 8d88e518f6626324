/**
 * The one restricted-mode message: what it says and when, without the vscode module.
 *
 * Only the server knows which values the workspace set (the client tells it each value's scope);
 * it reports them in `stitch/untrustedSettings`. The client shows that once per distinct set of
 * values (a restarted server reports them again: no second message), nothing when the workspace set
 * nothing, and, once the folder is trusted, one line that replaces it.
 */

import type { UntrustedSettingsParams } from "./protocol";

export type TrustMessageAction =
  | { kind: "none" }
  | { kind: "warn"; message: string }
  | { kind: "superseded"; message: string };

export class TrustMessageState {
  private shown = new Set<string>();
  private standing = false;

  /** What to do with one `stitch/untrustedSettings` from the server. */
  onServer(params: UntrustedSettingsParams, trusted: boolean): TrustMessageAction {
    if (params.ignored.length === 0) {
      return this.onTrusted();
    }
    if (trusted) {
      return { kind: "none" };
    }
    const key = params.ignored
      .map((i) => `${i.source}\u0000${i.setting}\u0000${i.value}`)
      .sort()
      .join("\u0001");
    if (this.shown.has(key)) {
      return { kind: "none" };
    }
    this.shown.add(key);
    this.standing = true;
    return { kind: "warn", message: params.message };
  }

  /** The folder was trusted: a standing warning is replaced once. */
  onTrusted(): TrustMessageAction {
    if (!this.standing) {
      return { kind: "none" };
    }
    this.standing = false;
    return { kind: "superseded", message: "Stitch: this workspace is trusted now; the settings it sets apply (the earlier warning no longer holds)." };
  }
}
