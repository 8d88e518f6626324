/**
 * When a closed connection is restarted and when it is not: never after a crash
 * at start (the next start would crash the same way), and not after
 * `maxCrashes` crashes within `windowMs`. The user gets one message and a
 * Restart command instead of a loop.
 */

export type CrashDecision =
  | { action: "restart"; crashesInWindow: number }
  | { action: "stop"; reason: "crashed-at-start" | "too-many-crashes"; crashesInWindow: number };

export class CrashPolicy {
  private crashes: number[] = [];
  private initialized = false;

  constructor(
    readonly maxCrashes = 3,
    readonly windowMs = 3 * 60 * 1000,
  ) {}

  /** A new server process is starting; until `started()` a close counts as a crash at start. */
  starting(): void {
    this.initialized = false;
  }

  /** The server answered initialize. */
  started(): void {
    this.initialized = true;
  }

  /** The user asked for a restart: forget earlier crashes. */
  reset(): void {
    this.crashes = [];
    this.initialized = false;
  }

  closed(now: number): CrashDecision {
    if (!this.initialized) {
      return { action: "stop", reason: "crashed-at-start", crashesInWindow: this.crashes.length + 1 };
    }
    this.crashes = this.crashes.filter((t) => now - t < this.windowMs);
    this.crashes.push(now);
    this.initialized = false;
    if (this.crashes.length >= this.maxCrashes) {
      return { action: "stop", reason: "too-many-crashes", crashesInWindow: this.crashes.length };
    }
    return { action: "restart", crashesInWindow: this.crashes.length };
  }
}

export class TimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`no answer within ${Math.round(ms / 1000)} s`);
  }
}

/** `promise`, or a TimeoutError after `ms` (calling `onTimeout` first, to kill what hangs). */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout?: () => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout?.();
      reject(new TimeoutError(ms));
    }, ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
