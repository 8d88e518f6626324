import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JobProgress, type ProgressHost } from "../../src/core/jobProgress";

function fakeHost() {
  const timers: { fn: () => void; at: number; cleared: boolean }[] = [];
  const shown: { title: string; cancellable: boolean; reports: [string | undefined, number | undefined][]; done: boolean; cancel: () => void }[] = [];
  const cancelled: (string | number)[] = [];
  const host: ProgressHost = {
    show: (title, cancellable, onCancel) => {
      const view = { title, cancellable, reports: [] as [string | undefined, number | undefined][], done: false, cancel: onCancel };
      shown.push(view);
      return { report: (m, i) => view.reports.push([m, i]), done: () => (view.done = true) };
    },
    cancel: (token) => cancelled.push(token),
    setTimer: (fn, ms) => {
      const t = { fn, at: ms, cleared: false };
      timers.push(t);
      return t;
    },
    clearTimer: (t) => ((t as { cleared: boolean }).cleared = true),
  };
  const elapse = () => timers.filter((t) => !t.cleared).forEach((t) => ((t.cleared = true), t.fn()));
  return { host, shown, cancelled, elapse, timers };
}

describe("JobProgress (cancellable notifications for jobs over 2 s)", () => {
  it("shows nothing for a job that ends within the delay", () => {
    const f = fakeHost();
    const p = new JobProgress(f.host);
    p.update("stitch/1", { kind: "begin", title: "Verify scale", cancellable: true });
    p.update("stitch/1", { kind: "end", message: "done" });
    f.elapse();
    assert.equal(f.shown.length, 0);
    assert.equal(f.timers[0].at, 2000);
  });

  it("shows a long job with its stage and percentage, and ends it", () => {
    const f = fakeHost();
    const p = new JobProgress(f.host);
    p.update("stitch/2", { kind: "begin", title: "Stitch: fuse 3 ops", cancellable: true, message: "started" });
    p.update("stitch/2", { kind: "report", message: "planning: 3 ops", percentage: 15 });
    f.elapse();
    assert.equal(f.shown.length, 1);
    assert.equal(f.shown[0].title, "Stitch: fuse 3 ops");
    assert.equal(f.shown[0].cancellable, true);
    assert.deepEqual(f.shown[0].reports, [["planning: 3 ops", 15]]);
    p.update("stitch/2", { kind: "report", message: "compiling", percentage: 40 });
    assert.deepEqual(f.shown[0].reports[1], ["compiling", 25]);
    p.update("stitch/2", { kind: "end" });
    assert.equal(f.shown[0].done, true);
    assert.equal(p.visible, 0);
  });

  it("cancels the job on the server when the notification's Cancel is pressed", () => {
    const f = fakeHost();
    const p = new JobProgress(f.host);
    p.update(7, { kind: "begin", title: "Verify k", cancellable: true });
    f.elapse();
    f.shown[0].cancel();
    assert.deepEqual(f.cancelled, [7]);
  });
});
