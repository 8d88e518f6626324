/**
 * One Stitch server for the window: find Python, check the server is installed
 * there, launch it, keep it in step with settings, trust and the API key, and
 * restart it within bounds when it crashes.
 */

import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as vscode from "vscode";
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  type CloseHandlerResult,
  type ErrorHandlerResult,
  type WorkspaceEdit as ProtocolWorkspaceEdit,
  type LanguageClientOptions,
} from "vscode-languageclient/node";
import packageJson from "../../package.json";
import { resolveInterpreter } from "../core/interpreter";
import { buildLaunch, describeLaunch, spawnServer, terminate, waitForExit } from "../core/launch";
import { findSourceCheckout, installAdvice, installProblem, lastLine, type ProbeResult } from "../core/probe";
import {
  COMMAND_ARGUMENTS,
  COMMAND_TITLES,
  LLM_STATUS_REQUEST,
  SERVER_INFO_REQUEST,
  SET_API_KEY_NOTIFICATION,
  SET_TRUSTED_NOTIFICATION,
  SET_USER_SETTINGS_NOTIFICATION,
  STATUS_NOTIFICATION,
  type InitializationOptions,
  type LlmStatus,
  type ServerCommand,
  type ServerInfo,
  type StatusParams,
  UNTRUSTED_SETTINGS_NOTIFICATION,
  type UntrustedSettingsParams,
} from "../core/protocol";
import type { Redactor } from "../core/redact";
import { editorArguments } from "../core/commandArgs";
import { pickFuseAction, type ProtocolCodeAction, type ProtocolCommand } from "../core/fuseAction";
import { needsEditorArguments } from "../core/report";
import { CrashPolicy, withTimeout } from "../core/restartPolicy";
import { settingsCommand } from "../core/settings";
import {
  SECTION,
  contributedKeys,
  scopedServerSettings,
  serverSettingKeys,
  serverSettings,
  userSettingValue,
} from "../core/settings";
import type { ServerState } from "../core/statusText";
import { pipeServerStderr, type TraceChannel } from "./channels";
import { followJobProgress } from "./jobProgress";
import { activeInterpreter } from "./pythonExtension";

export const INITIALIZE_TIMEOUT_MS = 30_000;

const SERVER_KEYS = serverSettingKeys(contributedKeys(packageJson));

export const DOCUMENT_SELECTOR = [
  { scheme: "file", language: "python" },
  { scheme: "untitled", language: "python" },
  { scheme: "file", language: "cuda-cpp" },
  { scheme: "file", pattern: "**/*.cu" },
  { scheme: "file", pattern: "**/*.cuh" },
];

/** The client, with vscode-languageclient's own pop-ups turned into log lines: this controller says what went wrong, once. */
class StitchLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | "force"): void {
    super.error(message, data, false);
  }
}

export interface ServerEvents {
  onStateChanged(state: ServerState, detail?: string): void;
  onServerInfo(info: ServerInfo | undefined): void;
  onLlmStatus(status: LlmStatus | undefined): void;
  onStatus(status: StatusParams | undefined): void;
  /** The palette commands the running server provides (empty when none runs). */
  onServerCommands(commands: readonly string[]): void;
  openReport(result: unknown): Promise<void>;
  /** The server left out settings the (untrusted) workspace set; an empty list: no longer. */
  onUntrustedSettings(params: UntrustedSettingsParams): void;
}

export class ServerController implements vscode.Disposable {
  private client: StitchLanguageClient | undefined;
  private child: ChildProcess | undefined;
  private childExit: { code: number | null; signal: string | null } | undefined;
  private stderrTail: string[] = [];
  private readonly policy = new CrashPolicy();
  private initTimer: NodeJS.Timeout | undefined;
  private timedOut = false;
  private failureShown = false;
  private python = "";
  private spawnErrorCode: string | undefined;
  private startedByUser = false;
  private launchedPythonSetting = "";
  private state: ServerState = "stopped";
  private readonly disposables: vscode.Disposable[] = [];
  private progress: vscode.Disposable | undefined;
  /** Serialises start / stop / restart so that two changes in a row do not race. */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly output: vscode.LogOutputChannel,
    private readonly trace: TraceChannel,
    private readonly redactor: Redactor,
    private readonly events: ServerEvents,
    private readonly apiKey: () => Promise<string | undefined>,
  ) {}

  get running(): boolean {
    return this.state === "running" && this.client !== undefined;
  }

  get languageClient(): LanguageClient | undefined {
    return this.client;
  }

  get interpreter(): string {
    return this.python;
  }

  /**
   * Whether `stitch.python` now reads differently from when this server was started. Trusting a
   * workspace fires a change for every restricted setting; only a new interpreter needs a new process.
   */
  pythonSettingChanged(): boolean {
    return (vscode.workspace.getConfiguration(SECTION).get<string>("python") ?? "") !== this.launchedPythonSetting;
  }

  /** Start (or restart) the server; `byUser` forgets earlier crashes. */
  restart(reason: string, byUser = false): Promise<void> {
    // Noted now, not when the queued start runs: a second change event for the same value restarts nothing.
    this.launchedPythonSetting = vscode.workspace.getConfiguration(SECTION).get<string>("python") ?? "";
    this.queue = this.queue.then(async () => {
      if (byUser) {
        this.policy.reset();
      }
      await this.stopNow();
      await this.startNow(reason, byUser);
    });
    return this.queue;
  }

  stop(): Promise<void> {
    this.queue = this.queue.then(() => this.stopNow());
    return this.queue;
  }

  async sendTrusted(trusted: boolean): Promise<void> {
    if (this.client && this.running) {
      await this.client.sendNotification(SET_TRUSTED_NOTIFICATION, { trusted });
      // Restricted settings (nvccPath, extraFlags, ...) now count from the workspace too: have the server pull again.
      await this.client.sendNotification("workspace/didChangeConfiguration", { settings: null });
    }
  }

  /** After a settings change the server has pulled; the Coder / model in the tooltip follow. */
  refreshLlmStatus(): void {
    const client = this.client;
    if (client && this.running) {
      setTimeout(() => void this.fetchLlmStatus(client), 1000);
    }
  }

  async sendApiKey(apiKey: string | undefined): Promise<void> {
    this.redactor.add(apiKey);
    if (!(this.client && this.running)) {
      return;
    }
    if (apiKey === undefined) {
      // The server process was started with the removed key in its environment, which
      // the server falls back to: only a new process is really rid of it.
      await this.restart("the Anthropic API key was removed", true);
      return;
    }
    await this.client.sendNotification(SET_API_KEY_NOTIFICATION, { apiKey });
    await this.fetchLlmStatus(this.client);
  }

  /** The server settings the user set explicitly, for `workspace/configuration` and `initializationOptions`. */
  settingsFor(scope?: vscode.Uri): Record<string, unknown> {
    const config = vscode.workspace.getConfiguration(SECTION, scope);
    return scopedServerSettings(SERVER_KEYS, (key) => config.inspect(key));
  }

  /** The server settings from the user's own (global) settings only: never the workspace's. */
  userSettings(): Record<string, unknown> {
    const config = vscode.workspace.getConfiguration(SECTION);
    return serverSettings(SERVER_KEYS, (key) => userSettingValue(config.inspect(key)));
  }

  /** After a settings change: the user-scope values, which an untrusted workspace cannot override. */
  async sendUserSettings(): Promise<void> {
    if (this.client && this.running) {
      await this.client.sendNotification(SET_USER_SETTINGS_NOTIFICATION, { settings: this.userSettings() });
    }
  }

  private setState(state: ServerState, detail?: string): void {
    this.state = state;
    this.events.onStateChanged(state, detail);
  }

  private workspaceFolders(): string[] {
    return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath);
  }

  private async startNow(reason: string, byUser: boolean): Promise<void> {
    this.setState("starting");
    this.failureShown = false;
    this.startedByUser = byUser;
    const folders = this.workspaceFolders();
    const config = vscode.workspace.getConfiguration(SECTION);
    const interpreter = await resolveInterpreter({
      configured: config.get<string>("python"),
      pythonExtension: () => activeInterpreter(vscode.workspace.workspaceFolders?.[0]?.uri),
      workspaceFolders: folders,
      trusted: vscode.workspace.isTrusted,
    });
    this.python = interpreter.command;
    this.output.info(`Starting the Stitch server (${reason}); Python: ${interpreter.command} (from ${interpreter.source})`);
    for (const note of interpreter.skipped) {
      this.output.info(`Python: ${note}`);
    }
    const cwd = folders[0];
    // No separate probe: the server process itself is the check (one Python start, not two). A missing
    // interpreter or package shows as the process ending before 'initialize': reportStartFailure says which.
    this.spawnErrorCode = undefined;

    const client = new StitchLanguageClient(
      "stitch",
      "Stitch",
      // Called again for every automatic restart: the key is read afresh each time.
      async () => {
        const key = await this.apiKey();
        this.redactor.add(key);
        const spec = buildLaunch({ python: interpreter.command, cwd, baseEnv: process.env, apiKey: key });
        this.output.info(`Launching: ${describeLaunch(spec)}`);
        this.stderrTail = [];
        this.childExit = undefined;
        const child = spawnServer(spec);
        this.child = child;
        child.on("error", (error) => {
          this.spawnErrorCode = (error as NodeJS.ErrnoException).code;
          this.output.error(`Server process error: ${error.message}`);
        });
        child.on("exit", (code, signal) => {
          if (this.child === child) {
            this.childExit = { code, signal };
          }
          this.output.info(`Server process ${child.pid ?? "?"} exited (${signal ? `signal ${signal}` : `code ${code}`})`);
        });
        return child;
      },
      this.clientOptions(),
    );
    this.client = client;
    client.onDidChangeState((event) => this.onClientState(client, event.newState));
    client.onNotification(STATUS_NOTIFICATION, (status: StatusParams) => {
      this.events.onStatus(status);
    });
    client.onNotification(UNTRUSTED_SETTINGS_NOTIFICATION, (params: UntrustedSettingsParams) => {
      this.events.onUntrustedSettings(params);
    });
    try {
      await client.start();
      if (client === this.client) {
        this.progress?.dispose();
        this.progress = followJobProgress(client);
      }
    } catch (error) {
      this.clearInitTimer();
      this.reportStartFailure(error instanceof Error ? error.message : String(error));
    }
  }

  private clientOptions(): LanguageClientOptions {
    return {
      documentSelector: DOCUMENT_SELECTOR,
      outputChannel: this.output,
      traceOutputChannel: this.trace,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: (): InitializationOptions => ({
        trusted: vscode.workspace.isTrusted,
        handles: [UNTRUSTED_SETTINGS_NOTIFICATION],
        settings: this.settingsFor(vscode.workspace.workspaceFolders?.[0]?.uri),
        userSettings: this.userSettings(),
      }),
      initializationFailedHandler: (error: unknown) => {
        const message = error instanceof Error ? error.message : String(error);
        this.reportStartFailure(`it refused to initialize: ${message}`);
        return false;
      },
      errorHandler: {
        error: (): ErrorHandlerResult => ({ action: ErrorAction.Continue, handled: true }),
        closed: (): CloseHandlerResult => this.onClosed(),
      },
      stdioOptions: {
        stdout: () => undefined,
        stderr: (input) =>
          pipeServerStderr(input, this.output, (line) => {
            this.stderrTail.push(line);
            if (this.stderrTail.length > 40) {
              this.stderrTail.shift();
            }
          }),
      },
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) {
              return result;
            }
            return params.items.map((item, i) =>
              item.section === SECTION
                ? this.settingsFor(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)
                : result[i],
            );
          },
        },
        executeCommand: async (command, args, next) => this.executeCommand(command, args, next),
      },
    };
  }

  private onClientState(client: StitchLanguageClient, state: State): void {
    if (client !== this.client) {
      return;
    }
    if (state === State.Starting) {
      this.policy.starting();
      this.timedOut = false;
      this.setState("starting");
      this.clearInitTimer();
      this.initTimer = setTimeout(() => {
        this.timedOut = true;
        this.output.error(`The server did not answer 'initialize' within ${INITIALIZE_TIMEOUT_MS / 1000} s; stopping it.`);
        const child = this.child;
        if (child) {
          void terminate(child, 1000);
        }
      }, INITIALIZE_TIMEOUT_MS);
    } else if (state === State.Running) {
      this.clearInitTimer();
      this.policy.started();
      this.setState("running");
      const commands = client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
      this.events.onServerCommands(commands);
      void this.fetchServerInfo(client);
      void this.fetchLlmStatus(client);
      void vscode.commands.executeCommand("setContext", "stitch.serverRunning", true);
    } else {
      this.clearInitTimer();
      void vscode.commands.executeCommand("setContext", "stitch.serverRunning", false);
      // The client has dropped the server's command registrations by now.
      this.events.onServerCommands([]);
      if (this.state !== "failed") {
        this.setState("stopped");
      }
    }
  }

  private clearInitTimer(): void {
    if (this.initTimer) {
      clearTimeout(this.initTimer);
      this.initTimer = undefined;
    }
  }

  /** The LLM Coder's state for the tooltip (an older server without it: no line). */
  private async fetchLlmStatus(client: StitchLanguageClient): Promise<void> {
    try {
      const status = await withTimeout(client.sendRequest<LlmStatus>(LLM_STATUS_REQUEST, {}), 10_000);
      if (client === this.client) {
        this.events.onLlmStatus(status);
      }
    } catch {
      this.events.onLlmStatus(undefined);
    }
  }

  private async fetchServerInfo(client: StitchLanguageClient): Promise<void> {
    try {
      const info = await withTimeout(client.sendRequest<ServerInfo>(SERVER_INFO_REQUEST, {}), 15_000);
      if (client === this.client) {
        this.events.onServerInfo(info);
        this.output.info(
          `Server ${info.version} (pid ${info.pid}); GPU: ${info.gpu ?? "none"}; trusted: ${info.trusted}; torch loaded: ${info.torchLoaded}`,
        );
      }
    } catch (error) {
      this.output.warn(`stitch/serverInfo failed: ${error instanceof Error ? error.message : String(error)}`);
      this.events.onServerInfo(undefined);
    }
  }

  private onClosed(): CloseHandlerResult {
    this.events.onStatus(undefined);
    const decision = this.policy.closed(Date.now());
    const exit = this.childExit;
    const how = exit ? (exit.signal ? `was killed (${exit.signal})` : `exited with code ${exit.code}`) : "closed the connection";
    if (decision.action === "restart") {
      this.output.warn(`The Stitch server ${how}; restarting it (crash ${decision.crashesInWindow} of ${this.policy.maxCrashes} allowed in 3 minutes).`);
      return { action: CloseAction.Restart, handled: true };
    }
    if (decision.reason === "crashed-at-start") {
      this.reportStartFailure("the connection closed");
    } else {
      this.reportFailure(
        `The Stitch server crashed ${decision.crashesInWindow} times in 3 minutes and will not be restarted automatically (last: it ${how}).`,
        "crashed repeatedly",
      );
    }
    return { action: CloseAction.DoNotRestart, handled: true };
  }

  private logLocation(): string {
    return vscode.Uri.joinPath(this.context.logUri, "..").fsPath;
  }

  /**
   * Why the server did not start, said once. The first symptom to arrive (a broken
   * pipe, a closed connection) is rarely the cause: wait briefly for the process to
   * exit and its last stderr lines, then name the exit and the last line (usually
   * the Python exception).
   */
  private reportStartFailure(symptom: string): void {
    if (this.failureShown) {
      return;
    }
    this.failureShown = true;
    const child = this.child;
    void (async () => {
      if (child) {
        await waitForExit(child, 2000);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const exit = this.childExit;
      const stderr = this.stderrTail.join("\n");
      const last = lastLine(stderr);
      const install = this.timedOut ? undefined : installProblem(this.python, this.spawnErrorCode, stderr);
      if (install) {
        this.failureShown = false;
        this.reportInstallProblem(install);
        return;
      }
      let what: string;
      let short: string;
      if (this.timedOut) {
        what = `it did not answer 'initialize' within ${INITIALIZE_TIMEOUT_MS / 1000} s and was stopped`;
        short = "no answer to initialize";
      } else if (exit) {
        const how = exit.signal ? `was killed (${exit.signal})` : `exited with code ${exit.code}`;
        what = `it ${how} while starting${last ? `: ${last}` : ""}`;
        short = `${how} while starting`;
      } else {
        what = symptom;
        short = "start failed";
      }
      this.failureShown = false;
      this.reportFailure(`The Stitch server could not start: ${what}.`, short);
    })();
  }

  private reportInstallProblem(problem: Exclude<ProbeResult, { ok: true }>): void {
    const advice = installAdvice(this.python, problem, findSourceCheckout(this.workspaceFolders()));
    this.output.error(advice.message);
    const short = {
      "not-found": "Python not found",
      "not-importable": "stitch_lsp is not installed",
      timeout: "Python did not answer",
      failed: "stitch_lsp does not import",
    }[problem.kind];
    this.failureShown = true;
    this.setState("failed", short);
    this.events.onServerCommands([]);
    void this.showInstallAdvice(advice.message, advice.command, this.python, this.startedByUser);
  }

  /** The one message for a server that is down; the status bar turns red. */
  private reportFailure(message: string, short: string): void {
    if (this.failureShown) {
      return;
    }
    this.failureShown = true;
    this.setState("failed", short);
    this.output.error(`${message} Log: Output panel, channel "Stitch" (files under ${this.logLocation()}).`);
    void vscode.window
      .showErrorMessage(`${message} The log is in the Output panel ("Stitch").`, "Show Output", "Restart Server")
      .then((choice) => {
        if (choice === "Show Output") {
          this.output.show(true);
        } else if (choice === "Restart Server") {
          void this.restart("restart requested", true);
        }
      });
  }

  /**
   * The install advice, once per start. The extension activates for every Python file, so
   * a user who does not want Stitch in this interpreter can silence it (the status bar still
   * says why the server is not running).
   */
  private async showInstallAdvice(message: string, command: string, python: string, byUser: boolean): Promise<void> {
    const muteKey = `stitch.installAdvice.muted:${python}`;
    if (!byUser && this.context.globalState.get<boolean>(muteKey)) {
      return;
    }
    const choice = await vscode.window.showErrorMessage(message, "Install in Terminal", "Set stitch.python", "Don't Show Again");
    if (choice === "Install in Terminal") {
      const terminal = vscode.window.createTerminal({ name: "Stitch: install" });
      terminal.show();
      terminal.sendText(command, false);
      void vscode.window.showInformationMessage(
        "Press Enter in the terminal to run the install command, then run \"Stitch: Restart Server\".",
      );
    } else if (choice === "Set stitch.python") {
      await openSettingTab("stitch.python");
    } else if (choice === "Don't Show Again") {
      await this.context.globalState.update(muteKey, true);
    }
  }

  private async stopNow(): Promise<void> {
    const client = this.client;
    const child = this.child;
    this.client = undefined;
    this.child = undefined;
    this.clearInitTimer();
    if (client) {
      try {
        if (client.needsStop()) {
          await client.stop(3000);
        }
      } catch (error) {
        this.output.warn(`Stopping the server: ${error instanceof Error ? error.message : String(error)}`);
      }
      await client.dispose().catch(() => undefined);
    }
    // A server that ignored shutdown / exit must not outlive its client.
    if (child) {
      await terminate(child, 2000);
    }
    this.events.onStatus(undefined);
    this.events.onServerInfo(undefined);
    this.events.onLlmStatus(undefined);
    this.events.onServerCommands([]);
    this.setState("stopped");
  }

  /**
   * Fuse the selection through the server's fuse code action (for servers that offer
   * fusing as a code action rather than the `stitch.fuseSelection` command).
   * Returns false when this server offers neither.
   */
  async fuseSelectionByCodeAction(): Promise<boolean> {
    const client = this.client;
    if (!client || !this.running) {
      return false;
    }
    const commands = client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    if (!commands.includes("stitch.fuse")) {
      return false;
    }
    const editor = vscode.window.activeTextEditor;
    const c2p = client.code2ProtocolConverter;
    const args = editorArguments(
      "stitch.fuseSelection",
      editor && { uri: c2p.asUri(editor.document.uri), selection: c2p.asRange(editor.selection), cursor: c2p.asPosition(editor.selection.active) },
    );
    if (!args.ok || !editor) {
      void vscode.window.showInformationMessage(args.ok ? "Stitch: open a Python file first." : args.message);
      return true;
    }
    const actions = await client.sendRequest<(ProtocolCodeAction | ProtocolCommand)[] | null>("textDocument/codeAction", {
      textDocument: { uri: c2p.asUri(editor.document.uri) },
      range: c2p.asRange(editor.selection),
      context: { diagnostics: [], only: ["refactor.rewrite", "quickfix"], triggerKind: 1 },
    });
    const choice = pickFuseAction(actions);
    if (choice.kind === "none") {
      void vscode.window.showInformationMessage("Stitch: the selection has no PyTorch ops to fuse (select two or more tensor operations).");
    } else if (choice.kind === "disabled") {
      const fix = choice.fix;
      const button = fix ? fix.title.replace(/^Stitch:\s*/, "").replace(/^./, (c) => c.toUpperCase()) : undefined;
      const picked = await vscode.window.showWarningMessage(`Stitch: cannot fuse the selection: ${choice.reason}.`, ...(button ? [button] : []));
      if (fix && picked === button && fix.edit) {
        await vscode.workspace.applyEdit(await client.protocol2CodeConverter.asWorkspaceEdit(fix.edit as ProtocolWorkspaceEdit));
      }
    } else {
      await vscode.commands.executeCommand(choice.command.command, ...(choice.command.arguments ?? []));
    }
    return true;
  }

  /** Palette and context-menu invocations carry no protocol arguments: take them from the editor. */
  private async executeCommand(
    command: string,
    args: unknown[],
    next: (command: string, args: unknown[]) => Promise<unknown>,
  ): Promise<unknown> {
    const client = this.client;
    const title = COMMAND_TITLES[command as ServerCommand] ?? command;
    let finalArgs: unknown[] | undefined = args;
    if (needsEditorArguments(args) && command in COMMAND_ARGUMENTS && client) {
      finalArgs = this.editorArguments(client, command as ServerCommand);
      if (finalArgs === undefined) {
        return undefined;
      }
    }
    try {
      const result = await next(command, finalArgs);
      if (command === "stitch.showReport") {
        await this.events.openReport(result);
      }
      return result;
    } catch (error) {
      if (error instanceof vscode.CancellationError) {
        return undefined;
      }
      const message = error instanceof Error ? error.message : String(error);
      void vscode.window.showErrorMessage(`Stitch: ${title} failed: ${message}`, "Show Output").then((choice) => {
        if (choice) {
          this.output.show(true);
        }
      });
      return undefined;
    }
  }

  private editorArguments(client: LanguageClient, command: ServerCommand): unknown[] | undefined {
    const editor = vscode.window.activeTextEditor;
    const c2p = client.code2ProtocolConverter;
    const result = editorArguments(
      command,
      editor && {
        uri: c2p.asUri(editor.document.uri),
        selection: c2p.asRange(editor.selection),
        cursor: c2p.asPosition(editor.selection.active),
      },
    );
    if (!result.ok) {
      void vscode.window.showInformationMessage(result.message);
      return undefined;
    }
    return result.args;
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
    void this.stop();
  }
}

export function fileExists(path: string): boolean {
  try {
    return fs.statSync(path).isFile();
  } catch {
    return false;
  }
}

/**
 * The Settings editor on the tab where a setting lives. `stitch.python` is machine-overridable: in a
 * remote window (SSH, WSL, a container, code-server) it is read from the Remote tab, and the User tab
 * shows nothing for it.
 */
export async function openSettingTab(setting: string): Promise<void> {
  const command = settingsCommand(vscode.env.remoteName);
  try {
    await vscode.commands.executeCommand(command, { query: setting });
  } catch {
    await vscode.commands.executeCommand("workbench.action.openSettings", setting);
  }
}
