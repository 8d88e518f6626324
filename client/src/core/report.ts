/** What `stitch.showReport` answered: a report file, Markdown text, or nothing yet. */

export type ReportTarget =
  | { kind: "file"; path: string }
  | { kind: "uri"; uri: string }
  | { kind: "markdown"; text: string }
  | { kind: "none"; message?: string };

function fromString(value: string, exists: (path: string) => boolean): ReportTarget {
  const text = value.trim();
  if (text === "") {
    return { kind: "none" };
  }
  if (/^file:\/\//.test(text) && !text.includes("\n")) {
    return { kind: "uri", uri: text };
  }
  // A path is one line naming a file; anything else is the report itself.
  if (!text.includes("\n") && (exists(text) || /^(\/|[A-Za-z]:[\\/]|~|\.{0,2}[\\/]|[\w.-]+[\\/])\S*\.(md|markdown|html|txt|json)$/i.test(text))) {
    return { kind: "file", path: text };
  }
  return { kind: "markdown", text: value };
}

export function reportTarget(result: unknown, exists: (path: string) => boolean = () => false): ReportTarget {
  if (typeof result === "string") {
    return fromString(result, exists);
  }
  if (result && typeof result === "object") {
    const r = result as Record<string, unknown>;
    for (const key of ["path", "file"]) {
      if (typeof r[key] === "string" && r[key]) {
        return { kind: "file", path: r[key] as string };
      }
    }
    if (typeof r.uri === "string" && r.uri) {
      return { kind: "uri", uri: r.uri };
    }
    if (typeof r.markdown === "string" && r.markdown.trim()) {
      return { kind: "markdown", text: r.markdown };
    }
    // `{path: null, message}`: no report, and the server has said why.
    if (typeof r.message === "string" && r.message) {
      return { kind: "none", message: r.message };
    }
  }
  return { kind: "none" };
}

/** Does a command invocation carry server-ready arguments, or must the editor supply them? */
export function needsEditorArguments(args: readonly unknown[]): boolean {
  // From the palette there are none; from an editor context menu VS Code passes the
  // resource as a Uri object, which is not the protocol's string URI.
  return args.length === 0 || typeof args[0] !== "string";
}
