/** Stitch for VS Code: wires the server controller, status bar, commands, trust and the API key together. */

import * as vscode from "vscode";
import { COMMAND_TITLES, SERVER_COMMANDS, type ServerCommand } from "./core/protocol";
import { Redactor } from "./core/redact";
import { SECTION, changeNeedsRestart } from "./core/settings";
import { ApiKeyStore } from "./vscode/apiKey";
import { RedactingLogChannel, TraceChannel } from "./vscode/channels";
import { onInterpreterChanged } from "./vscode/pythonExtension";
import { openReport } from "./vscode/reportView";
import { ServerController } from "./vscode/serverController";
import { StatusBar } from "./vscode/statusBar";
import { TrustMessageState, type TrustMessageAction } from "./core/trustMessage";

let controller: ServerController | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const redactor = new Redactor();
  const output = new RedactingLogChannel(vscode.window.createOutputChannel("Stitch", { log: true }), redactor);
  const trace = new TraceChannel(
    vscode.window.createOutputChannel("Stitch Trace"),
    redactor,
    vscode.workspace.getConfiguration(SECTION).get<string>("trace.server", "off"),
  );
  const apiKeys = new ApiKeyStore(context.secrets);
  const statusBar = new StatusBar();
  const fallbacks = new FallbackCommands(() => controller);
  // One restricted-mode message, from the server's report of what the workspace set (core/trustMessage.ts).
  const trustMessages = new TrustMessageState();
  context.subscriptions.push(output, trace, statusBar, fallbacks);

  const server = new ServerController(
    context,
    output,
    trace,
    redactor,
    {
      onStateChanged: (state, detail) => {
        statusBar.setState(state, detail);
        if (state === "starting") {
          fallbacks.serverStarting();
        }
      },
      onServerInfo: (info) => statusBar.setInfo(info),
      onLlmStatus: (llm) => statusBar.setLlm(llm),
      onStatus: (status) => statusBar.setStatus(status),
      onServerCommands: (commands) => fallbacks.serverProvides(commands),
      openReport: (result) => openReport(result, context.globalStorageUri),
      onUntrustedSettings: (params) => showTrustAction(trustMessages.onServer(params, vscode.workspace.isTrusted)),
    },
    () => apiKeys.get(),
  );
  controller = server;
  context.subscriptions.push(server);
  fallbacks.serverProvides([]);

  context.subscriptions.push(
    vscode.commands.registerCommand("stitch.restartServer", () => server.restart("restart requested", true)),
    vscode.commands.registerCommand("stitch.showOutput", () => output.show(true)),
    vscode.commands.registerCommand("stitch.setApiKey", () => apiKeys.prompt()),
    vscode.commands.registerCommand("stitch.statusActions", () => statusActions(server, statusBar, context)),
    apiKeys.onDidChange((key) => void server.sendApiKey(key)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(`${SECTION}.trace.server`)) {
        trace.setTraceSetting(vscode.workspace.getConfiguration(SECTION).get<string>("trace.server", "off"));
      }
      if (changeNeedsRestart((section) => event.affectsConfiguration(section)) && server.pythonSettingChanged()) {
        void server.restart("stitch.python changed", true);
      } else if (event.affectsConfiguration(SECTION)) {
        void server.sendUserSettings();
        server.refreshLlmStatus();
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(async () => {
      showTrustAction(trustMessages.onTrusted());
      statusBar.setStatus(statusBar.status ? { ...statusBar.status, trusted: true } : undefined);
      if (server.pythonSettingChanged()) {
        // The workspace names its own interpreter, ignored until now: run the server there.
        await server.restart("workspace trusted; its stitch.python now applies", true);
      } else {
        await server.sendTrusted(true);
      }
    }),
  );
  // Not awaited: activating the Python extension must not hold up Stitch's own activation.
  void onInterpreterChanged(() => {
    if (!vscode.workspace.getConfiguration(SECTION).get<string>("python")) {
      void server.restart("the Python extension's interpreter changed", true);
    }
  }).then((listener) => listener && context.subscriptions.push(listener));

  // The server starts in the background; activation (and the commands) do not wait for it.
  void server.restart("extension activated");
}

function showTrustAction(action: TrustMessageAction): void {
  if (action.kind === "warn") {
    void vscode.window.showWarningMessage(action.message, "Manage Workspace Trust").then((choice) => {
      if (choice) {
        void vscode.commands.executeCommand("workbench.trust.manage");
      }
    });
  } else if (action.kind === "superseded") {
    void vscode.window.showInformationMessage(action.message);
  }
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}

async function statusActions(server: ServerController, statusBar: StatusBar, context: vscode.ExtensionContext): Promise<void> {
  type Action = vscode.QuickPickItem & { run: () => unknown };
  const status = statusBar.status;
  const jobs = status ? status.running + status.queued : 0;
  const actions: Action[] = [];
  if (server.running) {
    actions.push({
      label: "$(stop-circle) Cancel all jobs",
      description: jobs > 0 ? `${status?.running ?? 0} running, ${status?.queued ?? 0} queued` : "no jobs running",
      run: () => vscode.commands.executeCommand(SERVER_COMMANDS.cancelAll),
    });
    actions.push({
      label: "$(preview) Show last report",
      description: status?.lastReport ?? undefined,
      run: () =>
        status?.lastReport
          ? openReport(status.lastReport, context.globalStorageUri)
          : vscode.commands.executeCommand(SERVER_COMMANDS.showReport),
    });
  }
  actions.push(
    { label: "$(debug-restart) Restart server", run: () => server.restart("restart requested", true) },
    { label: "$(output) Show output", run: () => vscode.commands.executeCommand("stitch.showOutput") },
    { label: "$(key) Set Anthropic API key", run: () => vscode.commands.executeCommand("stitch.setApiKey") },
  );
  if (!vscode.workspace.isTrusted) {
    actions.push({
      label: "$(shield) Manage workspace trust",
      description: "restricted mode",
      run: () => vscode.commands.executeCommand("workbench.trust.manage"),
    });
  }
  const choice = await vscode.window.showQuickPick(actions, { title: "Stitch", placeHolder: server.interpreter ? `Server Python: ${server.interpreter}` : undefined });
  await choice?.run();
}

/**
 * Server commands appear in the palette and menus even while no server provides
 * them (not started, crashed, or an older server). vscode-languageclient
 * registers the ones the server advertises; these stand in for the rest and
 * say why nothing happens, instead of VS Code's "command not found".
 */
class FallbackCommands implements vscode.Disposable {
  private readonly registered = new Map<string, vscode.Disposable>();

  constructor(private readonly server: () => ServerController | undefined) {}

  /** Before the client registers the server's commands: make room. */
  serverStarting(): void {
    this.clear();
  }

  serverProvides(commands: readonly string[]): void {
    this.clear();
    for (const command of Object.values(SERVER_COMMANDS)) {
      if (commands.includes(command)) {
        continue;
      }
      try {
        this.registered.set(
          command,
          vscode.commands.registerCommand(command, () => this.explain(command)),
        );
      } catch {
        // The client still holds the server's registration (it is being torn down); nothing to stand in for.
      }
    }
  }

  private async explain(command: ServerCommand): Promise<void> {
    const title = COMMAND_TITLES[command];
    const server = this.server();
    if (command === SERVER_COMMANDS.fuseSelection && server && (await server.fuseSelectionByCodeAction())) {
      return;
    }
    const message = server?.running
      ? `Stitch: this server does not provide "${title}" yet (update the stitch-lsp package).`
      : `Stitch: "${title}" needs the Stitch server, which is not running.`;
    void vscode.window.showWarningMessage(message, "Restart Server", "Show Output").then((choice) => {
      if (choice === "Restart Server") {
        void vscode.commands.executeCommand("stitch.restartServer");
      } else if (choice === "Show Output") {
        void vscode.commands.executeCommand("stitch.showOutput");
      }
    });
  }

  private clear(): void {
    for (const d of this.registered.values()) {
      d.dispose();
    }
    this.registered.clear();
  }

  dispose(): void {
    this.clear();
  }
}
