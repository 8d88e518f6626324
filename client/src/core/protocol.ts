/** Stitch's own messages on top of LSP (the server's `stitch_lsp/lsp/` implements them). */

/** Notification, server → client, whenever the job queue or the GPU changes. */
export const STATUS_NOTIFICATION = "stitch/status";
export interface StatusParams {
  gpu: string | null;
  running: number;
  queued: number;
  trusted: boolean;
  lastReport: string | null;
}

/** Request, client → server, once after start. */
export const SERVER_INFO_REQUEST = "stitch/serverInfo";
export interface ServerInfo {
  version: string;
  pid: number;
  torchLoaded: boolean;
  trusted: boolean;
  nvcc: { path: string; version: string } | string | null;
  gpu: string | null;
  python?: string;
}

/** Request, client → server: the LLM Coder's state (never the key itself). */
export const LLM_STATUS_REQUEST = "stitch/llmStatus";
export interface LlmStatus {
  configured: boolean;
  keySource: "client" | "environment" | null;
  model: string;
  coder: string;
}

/** Notification, client → server, when the user grants workspace trust. */
export const SET_TRUSTED_NOTIFICATION = "stitch/setTrusted";
export interface SetTrustedParams {
  trusted: boolean;
}

/** Notification, client → server, when the stored API key changes. (A removed key restarts the server instead: its environment held the key.) */
export const SET_API_KEY_NOTIFICATION = "stitch/setApiKey";
export interface SetApiKeyParams {
  apiKey: string | null;
}

/**
 * Notification, client → server, when settings change: the values from the user's own
 * settings only. While the workspace is untrusted, the server takes the settings that
 * name programs from these (and the user's config file), never from `settings` or
 * `workspace/configuration`, which an editor merges with the workspace's own.
 */
export const SET_USER_SETTINGS_NOTIFICATION = "stitch/setUserSettings";
export interface SetUserSettingsParams {
  settings: Record<string, unknown>;
}

/**
 * Notification, server → client: the workspace settings left out while the workspace is untrusted
 * (only values the workspace set; the user's own never are). The client shows one message; an empty
 * list (sent when the workspace becomes trusted) withdraws it.
 */
export const UNTRUSTED_SETTINGS_NOTIFICATION = "stitch/untrustedSettings";
export interface UntrustedSettingsParams {
  message: string;
  ignored: { setting: string; value: string; source: string; reason: string }[];
}

/** What the client sends as `initializationOptions`; the key is never part of it. */
export interface InitializationOptions {
  trusted: boolean;
  /** Server → client notifications this client shows itself (else the server uses window/showMessage). */
  handles: string[];
  settings: Record<string, unknown>;
  /** User-scope values only (see SET_USER_SETTINGS_NOTIFICATION). */
  userSettings: Record<string, unknown>;
}

/** Server commands (workspace/executeCommand) the editor offers in the palette and menus. */
export const SERVER_COMMANDS = {
  fuseSelection: "stitch.fuseSelection",
  verifyKernel: "stitch.verifyKernel",
  profileKernel: "stitch.profileKernel",
  showReport: "stitch.showReport",
  cancelAll: "stitch.cancelAll",
  recordShapes: "stitch.recordShapes",
} as const;

export type ServerCommand = (typeof SERVER_COMMANDS)[keyof typeof SERVER_COMMANDS];

/** Which editor state a palette invocation of each server command needs as arguments. */
export const COMMAND_ARGUMENTS: Record<ServerCommand, "uri+range" | "uri+position" | "uri+position?" | "none"> = {
  "stitch.fuseSelection": "uri+range",
  "stitch.verifyKernel": "uri+position",
  "stitch.profileKernel": "uri+position",
  // The kernel under the cursor when there is an editor, else the latest report.
  "stitch.showReport": "uri+position?",
  "stitch.cancelAll": "none",
  "stitch.recordShapes": "none",
};

export const COMMAND_TITLES: Record<ServerCommand, string> = {
  "stitch.fuseSelection": "Fuse Selection",
  "stitch.verifyKernel": "Verify Kernel",
  "stitch.profileKernel": "Profile Kernel",
  "stitch.showReport": "Show Last Report",
  "stitch.cancelAll": "Cancel All Jobs",
  "stitch.recordShapes": "Record Shapes",
};
