/**
 * "Stitch: Fuse Selection" from the palette, on a server that offers fusing as a code
 * action (`Stitch: fuse N ops into a CUDA kernel`, running `stitch.fuse`) rather than as
 * the `stitch.fuseSelection` command: ask for the selection's code actions and pick the
 * server's own verdict, so the palette and the light bulb never disagree.
 */

export interface ProtocolCommand {
  title: string;
  command: string;
  arguments?: unknown[];
}

export interface ProtocolCodeAction {
  title: string;
  kind?: string;
  command?: ProtocolCommand;
  edit?: unknown;
  disabled?: { reason: string };
}

export type FuseChoice =
  | { kind: "run"; title: string; command: ProtocolCommand }
  | { kind: "disabled"; reason: string; fix?: ProtocolCodeAction }
  | { kind: "none" };

const FUSE_TITLE = /^Stitch: fuse\b/i;

function isCommand(value: ProtocolCodeAction | ProtocolCommand): value is ProtocolCommand {
  return typeof (value as ProtocolCommand).command === "string";
}

export function pickFuseAction(actions: readonly (ProtocolCodeAction | ProtocolCommand)[] | null | undefined): FuseChoice {
  const list = (actions ?? []).map((a) => (isCommand(a) ? ({ title: a.title, command: a } as ProtocolCodeAction) : a));
  const fuse = list.find((a) => FUSE_TITLE.test(a.title));
  if (!fuse) {
    return { kind: "none" };
  }
  if (fuse.disabled) {
    // A quick fix that makes it possible (the shape comment) comes with it.
    const fix = list.find((a) => a !== fuse && a.edit !== undefined && /^Stitch:/.test(a.title) && !a.disabled);
    return { kind: "disabled", reason: fuse.disabled.reason, fix };
  }
  if (!fuse.command) {
    return { kind: "none" };
  }
  return { kind: "run", title: fuse.title, command: fuse.command };
}
