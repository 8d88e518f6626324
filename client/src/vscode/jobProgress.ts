/** Cancellable notifications for the server's long jobs (logic in core/jobProgress.ts). */

import * as vscode from "vscode";
import {
  WorkDoneProgress,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateRequest,
  type LanguageClient,
} from "vscode-languageclient/node";
import { JobProgress, type ProgressValue, type ProgressView } from "../core/jobProgress";

/**
 * Take over `window/workDoneProgress/create` for this client (call after `client.start()`, which
 * installs the library's status-bar handler): each token is followed, and shown as a notification
 * once its job has run for 2 s.
 */
export function followJobProgress(client: LanguageClient): vscode.Disposable {
  const tracker = new JobProgress({
    show: (title, cancellable, onCancel) => showNotification(title, cancellable, onCancel),
    cancel: (token) => void client.sendNotification(WorkDoneProgressCancelNotification.type, { token }),
    setTimer: (fn, ms) => setTimeout(fn, ms),
    clearTimer: (handle) => clearTimeout(handle as NodeJS.Timeout),
  });
  const listeners = new Map<string | number, vscode.Disposable>();
  const created = client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
    listeners.get(token)?.dispose();
    listeners.set(
      token,
      client.onProgress(WorkDoneProgress.type, token, (value) => {
        tracker.update(token, value as ProgressValue);
        if (value.kind === "end") {
          listeners.get(token)?.dispose();
          listeners.delete(token);
        }
      }),
    );
  });
  return new vscode.Disposable(() => {
    created.dispose();
    for (const l of listeners.values()) {
      l.dispose();
    }
    tracker.dispose();
  });
}

function showNotification(title: string, cancellable: boolean, onCancel: () => void): ProgressView {
  let report: ((message: string | undefined, increment: number | undefined) => void) | undefined;
  let finish: (() => void) | undefined;
  let ended = false;
  const pending: [string | undefined, number | undefined][] = [];
  void vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: title.startsWith("Stitch") ? title : `Stitch: ${title}`, cancellable },
    (progress, token) =>
      new Promise<void>((resolve) => {
        token.onCancellationRequested(() => {
          onCancel();
          resolve();
        });
        report = (message, increment) => progress.report({ message, increment });
        finish = resolve;
        if (ended) {
          resolve();
        }
        for (const [m, i] of pending.splice(0)) {
          report(m, i);
        }
      }),
  );
  return {
    report: (message, increment) => (report ? report(message, increment) : pending.push([message, increment])),
    done: () => {
      ended = true;
      finish?.();
    },
  };
}
