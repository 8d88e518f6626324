/**
 * Before launching: is `stitch_lsp` importable in the chosen Python? If not, say
 * exactly how to install it there.
 */

import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

export type ProbeResult =
  | { ok: true; version: string }
  | { ok: false; kind: "not-found" | "not-importable" | "timeout" | "failed"; detail: string };

// The server module, not only the package: a broken install (pygls or lsprotocol missing)
// is caught here, with the install command, instead of as a crash at start.
const PROBE_SOURCE =
  "import sys, stitch_lsp, stitch_lsp.lsp.server; sys.stdout.write(getattr(stitch_lsp, '__version__', '?'))";

export function probeServer(
  python: string,
  options: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {},
): Promise<ProbeResult> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise((resolve) => {
    execFile(
      python,
      ["-c", PROBE_SOURCE],
      { env: options.env, cwd: options.cwd, timeout: timeoutMs, windowsHide: true, encoding: "utf8" },
      (error, stdout, stderr) => {
        if (!error) {
          resolve({ ok: true, version: stdout.trim() });
          return;
        }
        const err = error as NodeJS.ErrnoException & { killed?: boolean; signal?: string | null };
        if (err.code === "ENOENT" || err.code === "EACCES") {
          resolve({ ok: false, kind: "not-found", detail: `${python}: ${err.code === "ENOENT" ? "no such file or command" : "not executable"}` });
        } else if (err.killed || err.signal === "SIGTERM") {
          resolve({ ok: false, kind: "timeout", detail: `${python} did not answer within ${Math.round(timeoutMs / 1000)} s` });
        } else if (/No module named '?stitch_lsp'?(\s|$)/.test(stderr)) {
          resolve({ ok: false, kind: "not-importable", detail: lastLine(stderr) });
        } else {
          resolve({ ok: false, kind: "failed", detail: lastLine(stderr) || String(err.message) });
        }
      },
    );
  });
}

/**
 * Why a server process that was started directly (no separate probe: one Python start, not two)
 * ended before it answered `initialize`, when the cause is the install: Python missing, or
 * `stitch_lsp` (or one of its dependencies) not importable. Undefined for any other failure.
 */
export function installProblem(
  python: string,
  spawnErrorCode: string | undefined,
  stderr: string,
): Exclude<ProbeResult, { ok: true }> | undefined {
  if (spawnErrorCode === "ENOENT" || spawnErrorCode === "EACCES") {
    return { ok: false, kind: "not-found", detail: `${python}: ${spawnErrorCode === "ENOENT" ? "no such file or command" : "not executable"}` };
  }
  if (/No module named '?stitch_lsp'?(\s|$)/.test(stderr)) {
    return { ok: false, kind: "not-importable", detail: lastLine(stderr) };
  }
  if (/(ModuleNotFoundError|ImportError)\b/.test(stderr)) {
    return { ok: false, kind: "failed", detail: lastLine(stderr) };
  }
  return undefined;
}

export function lastLine(text: string): string {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0);
  return lines.length > 0 ? lines[lines.length - 1] : "";
}

/** Quote an argument for a POSIX shell or PowerShell / cmd when it needs it. */
export function shellQuote(arg: string, platform: NodeJS.Platform = process.platform): string {
  if (/^[\w@%+=:,./\\-]+$/.test(arg)) {
    return arg;
  }
  if (platform === "win32") {
    return `"${arg.replace(/"/g, '\\"')}"`;
  }
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** A workspace folder that is a Stitch source checkout (has pyproject.toml and stitch_lsp/). */
export function findSourceCheckout(folders: readonly string[]): string | undefined {
  for (const folder of folders) {
    try {
      if (
        fs.existsSync(path.join(folder, "stitch_lsp", "__init__.py")) &&
        /name\s*=\s*"stitch-lsp"/.test(fs.readFileSync(path.join(folder, "pyproject.toml"), "utf8"))
      ) {
        return folder;
      }
    } catch {
      // not a checkout
    }
  }
  return undefined;
}

export interface InstallAdvice {
  /** One message for the user, with the exact command(s). */
  message: string;
  /** The command to run in a terminal (the source checkout's when there is one). */
  command: string;
}

export function installAdvice(
  python: string,
  probe: Exclude<ProbeResult, { ok: true }>,
  sourceCheckout: string | undefined,
  platform: NodeJS.Platform = process.platform,
): InstallAdvice {
  const py = shellQuote(python, platform);
  // stitch-lsp is not on PyPI: it installs from a checkout of the repository or from a wheel built there.
  const fromSource = `${py} -m pip install -e ${shellQuote(sourceCheckout ?? "<path to your Stitch checkout>", platform)}`;
  const fromWheel = `${py} -m pip install <path to stitch_lsp-*.whl>`;
  const how = sourceCheckout
    ? `${fromSource}`
    : `${fromSource} (or, from a wheel built with "python -m pip wheel --no-deps <checkout>": ${fromWheel})`;
  const command = fromSource;
  switch (probe.kind) {
    case "not-found":
      return {
        message:
          `Stitch could not start Python: ${probe.detail}. Install Python 3.11 or newer, or set "stitch.python" ` +
          `to an interpreter, then install the server there: ${how}.`,
        command,
      };
    case "not-importable":
      return {
        message:
          `Stitch's server (the stitch_lsp package) is not installed in ${python}. Install it there: ${how}; ` +
          `or set "stitch.python" to an interpreter that has it.`,
        command,
      };
    case "timeout":
      return {
        message: `Stitch gave up checking ${python}: ${probe.detail}. Check the interpreter or set "stitch.python".`,
        command,
      };
    default:
      return {
        message:
          `Stitch's server failed to import in ${python}: ${probe.detail}. Reinstall it there: ${how}; ` +
          `details are in the Stitch output.`,
        command,
      };
  }
}
