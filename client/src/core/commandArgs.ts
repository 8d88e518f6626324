/**
 * The arguments a palette or context-menu invocation of a server command gets from the
 * editor: `[uri, range]` of the selection for fuse, `[uri, position]` of the cursor for
 * verify / profile (and report, when there is an editor), nothing for cancel.
 */

import { COMMAND_ARGUMENTS, COMMAND_TITLES, type ServerCommand } from "./protocol";

export interface ProtocolPosition {
  line: number;
  character: number;
}
export interface ProtocolRange {
  start: ProtocolPosition;
  end: ProtocolPosition;
}

/** The active editor, already converted to protocol terms (URI string, 0-based positions). */
export interface EditorState {
  uri: string;
  selection: ProtocolRange;
  cursor: ProtocolPosition;
}

export type CommandArguments = { ok: true; args: unknown[] } | { ok: false; message: string };

function isEmpty(range: ProtocolRange): boolean {
  return range.start.line === range.end.line && range.start.character === range.end.character;
}

export function editorArguments(command: ServerCommand, editor: EditorState | undefined): CommandArguments {
  const needs = COMMAND_ARGUMENTS[command];
  const title = COMMAND_TITLES[command];
  switch (needs) {
    case "none":
      return { ok: true, args: [] };
    case "uri+position?":
      return { ok: true, args: editor ? [editor.uri, editor.cursor] : [] };
    case "uri+range":
      if (!editor) {
        return { ok: false, message: `Stitch: ${title} works on the active editor; open a file first.` };
      }
      if (isEmpty(editor.selection)) {
        return { ok: false, message: "Stitch: select the PyTorch code to fuse first." };
      }
      return { ok: true, args: [editor.uri, editor.selection] };
    case "uri+position":
      if (!editor) {
        return { ok: false, message: `Stitch: ${title} works on the active editor; open a file first.` };
      }
      return { ok: true, args: [editor.uri, editor.cursor] };
  }
}
