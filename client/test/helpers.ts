/** Shared by the tests: where the repository is, and which Python runs the real server. */

import * as fs from "node:fs";
import * as path from "node:path";

/** The repository root (the folder with stitch_lsp/), found upwards from the running test. */
export function repoRoot(): string {
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, "stitch_lsp", "__init__.py"))) {
      return dir;
    }
    const parent = path.dirname(dir);
    if (parent === dir) {
      throw new Error(`no stitch_lsp/ above ${__dirname}`);
    }
    dir = parent;
  }
}

export function clientRoot(): string {
  return path.join(repoRoot(), "client");
}

/** STITCH_TEST_PYTHON, else the repository's .venv (what .ci/run makes), else python3. */
export function testPython(): string {
  const fromEnv = process.env.STITCH_TEST_PYTHON;
  if (fromEnv) {
    return fromEnv;
  }
  const venv = path.join(repoRoot(), ".venv", "bin", "python");
  return fs.existsSync(venv) ? venv : "python3";
}

/** The environment a test server runs with: the repository importable, nothing else changed. */
export function serverEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const root = repoRoot();
  const current = process.env.PYTHONPATH;
  return { ...process.env, PYTHONPATH: current ? `${root}${path.delimiter}${current}` : root, ...extra };
}

export function readPackageJson(): Record<string, unknown> {
  return JSON.parse(fs.readFileSync(path.join(clientRoot(), "package.json"), "utf8")) as Record<string, unknown>;
}

/** A fake interpreter: a shell script with the given body. */
export function fakePython(dir: string, name: string, body: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}
