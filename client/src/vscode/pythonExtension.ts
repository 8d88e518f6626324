/**
 * The Python extension's active interpreter (ms-python.python), when that
 * extension is installed. Optional: Stitch works without it.
 */

import * as vscode from "vscode";
import { withTimeout } from "../core/restartPolicy";

const PYTHON_EXTENSION = "ms-python.python";

interface EnvironmentPath {
  id: string;
  path: string;
}
interface ResolvedEnvironment {
  executable?: { uri?: vscode.Uri };
}
interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri | vscode.WorkspaceFolder): EnvironmentPath;
  resolveEnvironment(env: EnvironmentPath | string): Promise<ResolvedEnvironment | undefined>;
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}
interface PythonExtensionApi {
  environments?: PythonEnvironmentsApi;
}

async function api(): Promise<PythonEnvironmentsApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION);
  if (!extension) {
    return undefined;
  }
  const exports = extension.isActive ? extension.exports : await withTimeout(Promise.resolve(extension.activate()), 15_000);
  return exports?.environments;
}

/** The active interpreter's executable for `resource`, or undefined. */
export async function activeInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const environments = await api();
  if (!environments) {
    return undefined;
  }
  const envPath = environments.getActiveEnvironmentPath(resource);
  const resolved = await withTimeout(environments.resolveEnvironment(envPath), 15_000);
  return resolved?.executable?.uri?.fsPath ?? envPath.path;
}

/** Calls `listener` when the user picks another interpreter in the Python extension. */
export async function onInterpreterChanged(listener: () => void): Promise<vscode.Disposable | undefined> {
  try {
    const environments = await api();
    return environments?.onDidChangeActiveEnvironmentPath(() => listener());
  } catch {
    return undefined;
  }
}
