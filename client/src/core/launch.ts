/**
 * How the server process is started: `<python> -m stitch_lsp` over stdio. The
 * extension and the launch-contract test both go through `buildLaunch` and
 * `spawnServer`, so what the test proves is what users run.
 */

import { spawn, type ChildProcess } from "node:child_process";

export const SERVER_MODULE = "stitch_lsp";
export const API_KEY_ENV = "ANTHROPIC_API_KEY";

export interface LaunchSpec {
  command: string;
  args: string[];
  cwd: string | undefined;
  env: NodeJS.ProcessEnv;
}

export interface LaunchInputs {
  python: string;
  cwd?: string;
  /** The environment the server inherits (the editor's). */
  baseEnv: NodeJS.ProcessEnv;
  /** From the editor's secret storage; when absent the inherited variable (if any) is kept. */
  apiKey?: string;
}

export function buildLaunch(inputs: LaunchInputs): LaunchSpec {
  const env: NodeJS.ProcessEnv = {
    ...inputs.baseEnv,
    // Tracebacks and log lines reach the output channel as they happen.
    PYTHONUNBUFFERED: "1",
    PYTHONIOENCODING: "utf-8",
  };
  if (inputs.apiKey) {
    env[API_KEY_ENV] = inputs.apiKey;
  }
  return { command: inputs.python, args: ["-m", SERVER_MODULE], cwd: inputs.cwd, env };
}

/** What the output channel says about a launch: command and folder, never the environment. */
export function describeLaunch(spec: LaunchSpec): string {
  const keyNote = spec.env[API_KEY_ENV] ? "; Anthropic API key passed in the environment" : "";
  return `${[spec.command, ...spec.args].join(" ")} (in ${spec.cwd ?? process.cwd()}${keyNote})`;
}

export function spawnServer(spec: LaunchSpec): ChildProcess {
  return spawn(spec.command, spec.args, {
    cwd: spec.cwd,
    env: spec.env,
    stdio: ["pipe", "pipe", "pipe"],
    windowsHide: true,
  });
}

export function isAlive(pid: number | undefined): boolean {
  if (pid === undefined) {
    return false;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Resolves when the child has exited (at once if it already has). */
export function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Ask the process to stop, then kill it if it does not within `graceMs`. */
export async function terminate(child: ChildProcess, graceMs = 2000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  child.kill("SIGTERM");
  if (!(await waitForExit(child, graceMs))) {
    child.kill("SIGKILL");
    await waitForExit(child, graceMs);
  }
}
