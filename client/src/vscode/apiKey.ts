/**
 * The Anthropic API key: kept in VS Code's SecretStorage, handed to the server
 * in its environment at launch and by `stitch/setApiKey` when it changes. It is
 * never written to settings, initializationOptions or any output channel.
 */

import * as vscode from "vscode";

const SECRET_KEY = "stitch.anthropicApiKey";

export class ApiKeyStore {
  constructor(private readonly secrets: vscode.SecretStorage) {}

  get(): Promise<string | undefined> {
    return Promise.resolve(this.secrets.get(SECRET_KEY));
  }

  /** Fires with the new key (undefined when removed), from this window or another. */
  onDidChange(listener: (key: string | undefined) => void): vscode.Disposable {
    return this.secrets.onDidChange(async (event) => {
      if (event.key === SECRET_KEY) {
        listener(await this.get());
      }
    });
  }

  /** The "Stitch: Set Anthropic API Key" command. */
  async prompt(): Promise<void> {
    const existing = await this.get();
    if (existing) {
      const choice = await vscode.window.showQuickPick(
        [
          { label: "$(key) Replace the stored key", action: "replace" },
          { label: "$(trash) Remove the stored key", action: "remove" },
        ],
        { title: "Stitch: Anthropic API key", placeHolder: "A key is stored for Stitch" },
      );
      if (!choice) {
        return;
      }
      if (choice.action === "remove") {
        await this.secrets.delete(SECRET_KEY);
        void vscode.window.showInformationMessage("Stitch: the Anthropic API key was removed.");
        return;
      }
    }
    const key = await vscode.window.showInputBox({
      title: "Stitch: Anthropic API key",
      prompt: "Used by the LLM Coder and the optional judge. Kept in VS Code's secret storage, never in settings or logs.",
      placeHolder: "sk-ant-…",
      password: true,
      ignoreFocusOut: true,
      validateInput: (value) => (value.trim().length === 0 ? "Enter a key, or press Escape to cancel." : /\s/.test(value.trim()) ? "A key has no spaces." : undefined),
    });
    if (key === undefined) {
      return;
    }
    await this.secrets.store(SECRET_KEY, key.trim());
    void vscode.window.showInformationMessage("Stitch: the Anthropic API key was stored and passed to the server.");
  }
}
