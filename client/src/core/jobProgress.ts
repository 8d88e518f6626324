/**
 * Server jobs (fuse, verify, profile) as progress the user can see and cancel.
 *
 * The server reports every job with work-done progress. vscode-languageclient shows that in the
 * status bar only, where a cancel button is out of reach; a job that runs longer than a moment
 * (`delayMs`, 2 s) gets a notification with its stage, percentage and a Cancel button, which
 * sends `window/workDoneProgress/cancel`. Short jobs (a cached verdict, a compile) never flash one.
 */

export interface ProgressBegin {
  kind: "begin";
  title: string;
  cancellable?: boolean;
  message?: string;
  percentage?: number;
}
export interface ProgressReport {
  kind: "report";
  message?: string;
  percentage?: number;
  cancellable?: boolean;
}
export interface ProgressEnd {
  kind: "end";
  message?: string;
}
export type ProgressValue = ProgressBegin | ProgressReport | ProgressEnd;

/** What shows one job (the vscode side: `window.withProgress` in a notification). */
export interface ProgressView {
  report(message: string | undefined, increment: number | undefined): void;
  done(): void;
}

export interface ProgressHost {
  show(title: string, cancellable: boolean, onCancel: () => void): ProgressView;
  cancel(token: string | number): void;
  setTimer(fn: () => void, ms: number): unknown;
  clearTimer(handle: unknown): void;
}

interface Tracked {
  title: string;
  cancellable: boolean;
  message?: string;
  percentage: number;
  shownPercentage: number;
  timer?: unknown;
  view?: ProgressView;
  ended: boolean;
}

export class JobProgress {
  private readonly jobs = new Map<string | number, Tracked>();

  constructor(
    private readonly host: ProgressHost,
    readonly delayMs = 2000,
  ) {}

  get visible(): number {
    return [...this.jobs.values()].filter((j) => j.view !== undefined).length;
  }

  update(token: string | number, value: ProgressValue): void {
    if (value.kind === "begin") {
      const job: Tracked = {
        title: value.title,
        cancellable: value.cancellable ?? false,
        message: value.message,
        percentage: value.percentage ?? 0,
        shownPercentage: 0,
        ended: false,
      };
      this.jobs.set(token, job);
      job.timer = this.host.setTimer(() => this.reveal(token), this.delayMs);
      return;
    }
    const job = this.jobs.get(token);
    if (!job) {
      return;
    }
    if (value.kind === "report") {
      job.message = value.message ?? job.message;
      job.percentage = Math.max(job.percentage, value.percentage ?? job.percentage);
      if (value.cancellable !== undefined) {
        job.cancellable = value.cancellable;
      }
      this.push(job);
      return;
    }
    job.ended = true;
    if (job.timer !== undefined) {
      this.host.clearTimer(job.timer);
    }
    job.view?.done();
    this.jobs.delete(token);
  }

  private reveal(token: string | number): void {
    const job = this.jobs.get(token);
    if (!job || job.ended || job.view) {
      return;
    }
    job.timer = undefined;
    job.view = this.host.show(job.title, job.cancellable, () => this.host.cancel(token));
    this.push(job);
  }

  private push(job: Tracked): void {
    if (!job.view) {
      return;
    }
    const increment = job.percentage > job.shownPercentage ? job.percentage - job.shownPercentage : undefined;
    job.shownPercentage = Math.max(job.shownPercentage, job.percentage);
    job.view.report(job.message, increment);
  }

  dispose(): void {
    for (const job of this.jobs.values()) {
      if (job.timer !== undefined) {
        this.host.clearTimer(job.timer);
      }
      job.view?.done();
    }
    this.jobs.clear();
  }
}
