/**
 * The two output channels, both behind a Redactor so that no API key reaches them:
 * "Stitch" (client log and server stderr) and "Stitch Trace" (LSP messages, on
 * when `stitch.trace.server` is not `off`).
 */

import * as readline from "node:readline";
import type { Readable } from "node:stream";
import * as vscode from "vscode";
import { stderrEntry } from "../core/logLines";
import type { Redactor } from "../core/redact";

type Write = (message: string) => void;

function format(message: string | Error, args: unknown[]): string {
  const head = message instanceof Error ? (message.stack ?? message.message) : message;
  return args.length === 0 ? head : `${head} ${args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" ")}`;
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/** The plain OutputChannel part of both channels: every write goes through the Redactor. */
abstract class RedactedOutput<Inner extends vscode.OutputChannel> {
  constructor(
    protected readonly inner: Inner,
    protected readonly redactor: Redactor,
  ) {}

  get name(): string {
    return this.inner.name;
  }
  append(value: string): void {
    this.inner.append(this.redactor.redact(value));
  }
  appendLine(value: string): void {
    this.inner.appendLine(this.redactor.redact(value));
  }
  replace(value: string): void {
    this.inner.replace(this.redactor.redact(value));
  }
  clear(): void {
    this.inner.clear();
  }
  show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserveFocus === "boolean" || columnOrPreserveFocus === undefined) {
      this.inner.show(columnOrPreserveFocus);
    } else {
      this.inner.show(columnOrPreserveFocus, preserveFocus);
    }
  }
  hide(): void {
    this.inner.hide();
  }
  dispose(): void {
    this.inner.dispose();
  }
}

/** A LogOutputChannel that redacts everything written through it. */
export class RedactingLogChannel extends RedactedOutput<vscode.LogOutputChannel> implements vscode.LogOutputChannel {
  get logLevel(): vscode.LogLevel {
    return this.inner.logLevel;
  }
  get onDidChangeLogLevel(): vscode.Event<vscode.LogLevel> {
    return this.inner.onDidChangeLogLevel;
  }
  private r(message: string | Error, args: unknown[]): string {
    return this.redactor.redact(format(message, args));
  }
  trace(message: string, ...args: unknown[]): void {
    this.inner.trace(this.r(message, args));
  }
  debug(message: string, ...args: unknown[]): void {
    this.inner.debug(this.r(message, args));
  }
  info(message: string, ...args: unknown[]): void {
    this.inner.info(this.r(message, args));
  }
  warn(message: string, ...args: unknown[]): void {
    this.inner.warn(this.r(message, args));
  }
  error(error: string | Error, ...args: unknown[]): void {
    this.inner.error(this.r(error, args));
  }
}

/**
 * The trace channel. vscode-languageclient traces only while its trace channel's
 * log level is Trace; this one reports Trace whenever `stitch.trace.server` asks
 * for a trace, so that setting alone turns tracing on and off, and writes plain
 * timestamped lines, all redacted.
 */
export class TraceChannel extends RedactedOutput<vscode.OutputChannel> implements vscode.LogOutputChannel {
  private readonly levelEmitter = new vscode.EventEmitter<vscode.LogLevel>();
  private level: vscode.LogLevel;

  constructor(inner: vscode.OutputChannel, redactor: Redactor, traceSetting: string) {
    super(inner, redactor);
    this.level = TraceChannel.levelFor(traceSetting);
  }

  static levelFor(traceSetting: string): vscode.LogLevel {
    return traceSetting === "messages" || traceSetting === "verbose" ? vscode.LogLevel.Trace : vscode.LogLevel.Off;
  }

  /** Called when `stitch.trace.server` changes; the client re-reads it and tells the server. */
  setTraceSetting(traceSetting: string): void {
    const level = TraceChannel.levelFor(traceSetting);
    if (level !== this.level) {
      this.level = level;
      this.levelEmitter.fire(level);
    }
  }

  get logLevel(): vscode.LogLevel {
    return this.level;
  }
  get onDidChangeLogLevel(): vscode.Event<vscode.LogLevel> {
    return this.levelEmitter.event;
  }
  private write(level: string, message: string | Error, args: unknown[]): void {
    if (this.level === vscode.LogLevel.Off) {
      return;
    }
    this.inner.appendLine(`${new Date().toISOString()} [${level}] ${this.redactor.redact(format(message, args))}`);
  }
  trace(message: string, ...args: unknown[]): void {
    this.write("trace", message, args);
  }
  debug(message: string, ...args: unknown[]): void {
    this.write("debug", message, args);
  }
  info(message: string, ...args: unknown[]): void {
    this.write("info", message, args);
  }
  warn(message: string, ...args: unknown[]): void {
    this.write("warn", message, args);
  }
  error(error: string | Error, ...args: unknown[]): void {
    this.write("error", error, args);
  }
  override dispose(): void {
    this.levelEmitter.dispose();
    super.dispose();
  }
}

/** Server stderr, line by line, at the level each line carries (a traceback is an error, INFO is info). */
export function pipeServerStderr(input: Readable, channel: vscode.LogOutputChannel, onLine?: (line: string) => void): void {
  readline
    .createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 })
    .on("line", (line: string) => {
      onLine?.(line);
      const entry = stderrEntry(line);
      const write: Write =
        {
          error: (m: string) => channel.error(m),
          warn: (m: string) => channel.warn(m),
          info: (m: string) => channel.info(m),
          debug: (m: string) => channel.debug(m),
        }[entry.level];
      write(entry.text);
    });
}
