/** Opens what `stitch.showReport` answered, in the Markdown preview. */

import * as path from "node:path";
import * as vscode from "vscode";
import { reportTarget } from "../core/report";
import { fileExists } from "./serverController";

export async function openReport(result: unknown, storage: vscode.Uri): Promise<void> {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const resolve = (p: string) => (path.isAbsolute(p) || !folder ? p : path.join(folder, p));
  const target = reportTarget(result, (p) => fileExists(resolve(p)));
  let uri: vscode.Uri;
  switch (target.kind) {
    case "none":
      if (!target.message) {
        // (With a message the server has already shown it.)
        void vscode.window.showInformationMessage("Stitch: no report yet. Verify or profile a kernel first.");
      }
      return;
    case "file":
      if (!fileExists(resolve(target.path))) {
        void vscode.window.showErrorMessage(`Stitch: the report ${target.path} does not exist (any more).`);
        return;
      }
      uri = vscode.Uri.file(resolve(target.path));
      break;
    case "uri":
      uri = vscode.Uri.parse(target.uri);
      break;
    case "markdown": {
      // Kept in the extension's own storage: a preview of an untitled document would ask to be saved.
      await vscode.workspace.fs.createDirectory(storage);
      uri = vscode.Uri.joinPath(storage, "last-report.md");
      await vscode.workspace.fs.writeFile(uri, Buffer.from(target.text, "utf8"));
      break;
    }
  }
  if (/\.(md|markdown)$/i.test(uri.path)) {
    await vscode.commands.executeCommand("markdown.showPreview", uri);
  } else {
    await vscode.commands.executeCommand("vscode.open", uri);
  }
}
