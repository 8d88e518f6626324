/** The status bar item: GPU and jobs, restricted mode, server trouble; a click opens the actions. */

import * as vscode from "vscode";
import type { LlmStatus, ServerInfo, StatusParams } from "../core/protocol";
import { plainLabel, statusView, type ServerState } from "../core/statusText";

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private state: ServerState = "starting";
  private detail: string | undefined;
  private info: ServerInfo | undefined;
  status: StatusParams | undefined;
  private llm: LlmStatus | undefined;

  constructor() {
    this.item = vscode.window.createStatusBarItem("stitch.status", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "Stitch";
    this.item.command = "stitch.statusActions";
    this.render();
    this.item.show();
  }

  setState(state: ServerState, detail?: string): void {
    this.state = state;
    this.detail = detail;
    if (state !== "running") {
      this.status = undefined;
    }
    this.render();
  }

  setInfo(info: ServerInfo | undefined): void {
    this.info = info;
    this.render();
  }

  setLlm(llm: LlmStatus | undefined): void {
    this.llm = llm;
    this.render();
  }

  setStatus(status: StatusParams | undefined): void {
    this.status = status;
    this.render();
  }

  get serverState(): ServerState {
    return this.state;
  }

  private render(): void {
    const view = statusView(this.state, vscode.workspace.isTrusted, this.info, this.status, this.detail, this.llm);
    this.item.text = view.text;
    this.item.accessibilityInformation = { label: plainLabel(view.ariaLabel), role: "button" };
    const tooltip = new vscode.MarkdownString(view.tooltip, true);
    this.item.tooltip = tooltip;
    this.item.backgroundColor =
      view.severity === "error"
        ? new vscode.ThemeColor("statusBarItem.errorBackground")
        : view.severity === "warning"
          ? new vscode.ThemeColor("statusBarItem.warningBackground")
          : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}
