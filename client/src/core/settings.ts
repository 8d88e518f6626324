/**
 * Which `stitch.*` settings go to the server, and in what shape.
 *
 * The contributed settings in package.json are the one list: every `stitch.X` key
 * is a server setting (camelCase, dotted keys become nested objects, the server's
 * `Settings.merge` turns them into snake_case fields) except the client-only ones
 * below. Only values the user actually set are sent, so a `[tool.stitch]` table in
 * the workspace's pyproject.toml is not overridden by editor defaults.
 */

/** Settings the client itself uses; never sent to the server as settings. */
export const CLIENT_ONLY_KEYS: readonly string[] = ["trace.server"];

/** Settings whose change needs a new server process (the interpreter it runs in). */
export const RESTART_KEYS: readonly string[] = ["python"];

export const SECTION = "stitch";

/** Server settings derived from the `contributes.configuration` of package.json. */
export function serverSettingKeys(contributed: readonly string[]): string[] {
  return contributed
    .filter((key) => key.startsWith(`${SECTION}.`))
    .map((key) => key.slice(SECTION.length + 1))
    .filter((key) => !CLIENT_ONLY_KEYS.includes(key))
    .sort();
}

/** All `stitch.*` keys contributed by a package.json object. */
export function contributedKeys(packageJson: unknown): string[] {
  const contributes = (packageJson as { contributes?: { configuration?: unknown } }).contributes;
  const config = contributes?.configuration;
  const sections = Array.isArray(config) ? config : config ? [config] : [];
  const keys: string[] = [];
  for (const section of sections) {
    const properties = (section as { properties?: Record<string, unknown> }).properties ?? {};
    keys.push(...Object.keys(properties));
  }
  return keys;
}

/**
 * Build the object the server reads from `workspace/configuration` (section
 * `stitch`) and from `initializationOptions.settings`.
 *
 * `explicitValue(key)` returns the value the user set at any level (user,
 * workspace, folder) or `undefined` when the key is only at its default.
 */
export function serverSettings(
  keys: readonly string[],
  explicitValue: (key: string) => unknown,
): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const key of keys) {
    if (key === SCOPES_KEY) {
      continue; // the client's own, never a setting
    }
    const value = explicitValue(key);
    if (value === undefined) {
      continue;
    }
    const parts = key.split(".");
    let node = result;
    for (const part of parts.slice(0, -1)) {
      const next = node[part];
      if (typeof next !== "object" || next === null || Array.isArray(next)) {
        node[part] = {};
      }
      node = node[part] as Record<string, unknown>;
    }
    node[parts[parts.length - 1]] = value;
  }
  return result;
}

/** Does a configuration change affecting these sections need a server restart? */
export function changeNeedsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`${SECTION}.${key}`));
}

/** camelCase (as contributed) to the snake_case field of the server's `Settings`. */
export function toSnakeCase(key: string): string {
  return key
    .split(".")
    .map((part) => part.replace(/(?<!^)([A-Z])/g, "_$1").toLowerCase())
    .join(".");
}

/** What `WorkspaceConfiguration.inspect` returns, the parts used here. */
export interface InspectedSetting {
  defaultValue?: unknown;
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** Where the effective value of a setting was set, as the server's settings reader names it. */
export type SettingScope = "default" | "user" | "remote" | "workspace" | "workspaceFolder";

/** The reserved key, inside the `stitch` settings object, that says where each value came from. */
export const SCOPES_KEY = "$scopes";

/** The value the user set at the most specific level, and that level; undefined when only the default applies. */
export function scopedSettingValue(inspected: InspectedSetting | undefined): { value: unknown; scope: SettingScope } | undefined {
  if (!inspected) {
    return undefined;
  }
  if (inspected.workspaceFolderValue !== undefined) {
    return { value: inspected.workspaceFolderValue, scope: "workspaceFolder" };
  }
  if (inspected.workspaceValue !== undefined) {
    return { value: inspected.workspaceValue, scope: "workspace" };
  }
  if (inspected.globalValue !== undefined) {
    return { value: inspected.globalValue, scope: "user" };
  }
  return undefined;
}

/**
 * The `stitch` object for `workspace/configuration` and `initializationOptions.settings`: every
 * value the user set, at whatever level, plus `"$scopes"` (setting name → scope of its value),
 * computed here from `inspect()` and never taken from a settings file. The server keeps the user's
 * own values while the workspace is untrusted, and drops and reports the workspace's.
 */
export function scopedServerSettings(
  keys: readonly string[],
  inspect: (key: string) => InspectedSetting | undefined,
): Record<string, unknown> {
  const scopes: Record<string, SettingScope> = {};
  const settings = serverSettings(keys, (key) => {
    const found = scopedSettingValue(inspect(key));
    if (found) {
      scopes[key] = found.scope;
    }
    return found?.value;
  });
  settings[SCOPES_KEY] = scopes;
  return settings;
}

/**
 * The value the user set for one key, most specific level first, or undefined.
 * In an untrusted workspace a restricted setting (one that names a program to
 * run) is taken from user settings only, never from the workspace.
 */
export function explicitSettingValue(
  inspected: InspectedSetting | undefined,
  trusted: boolean,
  restricted: boolean,
): unknown {
  if (!inspected) {
    return undefined;
  }
  if (!trusted && restricted) {
    return inspected.globalValue;
  }
  return inspected.workspaceFolderValue ?? inspected.workspaceValue ?? inspected.globalValue;
}

/**
 * The value from the user's own settings only (never the workspace's), for
 * `initializationOptions.userSettings` / `stitch/setUserSettings`: while the
 * workspace is untrusted the server takes programs (nvccPath, python, -ccbin ...)
 * from these alone, whatever the merged settings say.
 */
export function userSettingValue(inspected: InspectedSetting | undefined): unknown {
  return inspected?.globalValue;
}

/** `capabilities.untrustedWorkspaces.restrictedConfigurations` of a package.json object. */
export function restrictedKeys(packageJson: unknown): string[] {
  const caps = (packageJson as { capabilities?: { untrustedWorkspaces?: { restrictedConfigurations?: string[] } } })
    .capabilities;
  return [...(caps?.untrustedWorkspaces?.restrictedConfigurations ?? [])];
}

/** The command that opens the Settings editor on the tab a machine-overridable setting is read from. */
export function settingsCommand(remoteName: string | undefined): string {
  return remoteName ? "workbench.action.openRemoteSettings" : "workbench.action.openSettings";
}
