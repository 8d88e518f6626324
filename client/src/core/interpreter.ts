/**
 * Which Python runs the server: `stitch.python`, else the Python extension's
 * active interpreter, else `python3` (`python` on Windows).
 */

import * as os from "node:os";
import * as path from "node:path";

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  command: string;
  source: InterpreterSource;
  /** Why a candidate earlier in the order was passed over (shown in the output channel). */
  skipped: string[];
}

export interface InterpreterInputs {
  /** The `stitch.python` setting as VS Code returns it (workspace values are already dropped when untrusted). */
  configured: string | undefined;
  /** The Python extension's active interpreter, or undefined when that extension is absent or has none. */
  pythonExtension: () => Promise<string | undefined>;
  workspaceFolders: readonly string[];
  trusted: boolean;
  platform?: NodeJS.Platform;
  homeDir?: string;
}

export function defaultInterpreter(platform: NodeJS.Platform = process.platform): string {
  return platform === "win32" ? "python" : "python3";
}

/** Expand `${workspaceFolder}`, `${userHome}` and a leading `~`; resolve a relative path against the first folder. */
export function expandPath(value: string, workspaceFolders: readonly string[], homeDir: string = os.homedir()): string {
  let result = value.trim();
  const folder = workspaceFolders[0];
  if (folder !== undefined) {
    result = result.replace(/\$\{workspaceFolder\}/g, folder);
  }
  result = result.replace(/\$\{userHome\}/g, homeDir);
  if (result === "~" || result.startsWith("~/") || result.startsWith("~\\")) {
    result = path.join(homeDir, result.slice(1));
  }
  // A bare command name ("python3") is looked up on PATH; a relative path is the workspace's.
  if (folder !== undefined && !path.isAbsolute(result) && /[\\/]/.test(result)) {
    result = path.resolve(folder, result);
  }
  return result;
}

function isInside(file: string, folders: readonly string[]): boolean {
  const resolved = path.resolve(file);
  return folders.some((folder) => {
    const rel = path.relative(path.resolve(folder), resolved);
    return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel);
  });
}

export async function resolveInterpreter(inputs: InterpreterInputs): Promise<Interpreter> {
  const skipped: string[] = [];
  const configured = inputs.configured?.trim();
  if (configured) {
    return {
      command: expandPath(configured, inputs.workspaceFolders, inputs.homeDir),
      source: "setting",
      skipped,
    };
  }
  let fromExtension: string | undefined;
  try {
    fromExtension = (await inputs.pythonExtension())?.trim() || undefined;
  } catch (error) {
    skipped.push(`the Python extension's interpreter could not be read: ${String(error)}`);
  }
  if (fromExtension !== undefined) {
    // An interpreter inside an untrusted workspace is the workspace's own code: do not run it.
    if (!inputs.trusted && isInside(fromExtension, inputs.workspaceFolders)) {
      skipped.push(
        `the Python extension's interpreter ${fromExtension} lies inside this untrusted workspace, so it is not run`,
      );
    } else {
      return { command: fromExtension, source: "python-extension", skipped };
    }
  }
  return { command: defaultInterpreter(inputs.platform), source: "default", skipped };
}
