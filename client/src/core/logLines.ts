/** The level of one line the server writes to stderr (Python logging, or a traceback). */

export type LineLevel = "error" | "warn" | "info" | "debug";

const LEVEL = /\b(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b/;

export function stderrLevel(line: string): LineLevel {
  const head = LEVEL.exec(line.slice(0, 60));
  if (head) {
    switch (head[1]) {
      case "CRITICAL":
      case "FATAL":
      case "ERROR":
        return "error";
      case "WARNING":
      case "WARN":
        return "warn";
      case "DEBUG":
        return "debug";
      default:
        return "info";
    }
  }
  if (/^Traceback \(most recent call last\)|^\w*(Error|Exception)\b.*:/.test(line)) {
    return "error";
  }
  return "info";
}

// "2026-11-21 18:11:07,405 INFO " (Python logging's asctime and level): the log channel adds its own.
const PREFIX = /^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?\s+(?:(?:CRITICAL|ERROR|WARNING|INFO|DEBUG)\s+)?/;

/** One stderr line as the output channel shows it: its level, and the text without a duplicate timestamp. */
export function stderrEntry(line: string): { level: LineLevel; text: string } {
  return { level: stderrLevel(line), text: line.replace(PREFIX, "") };
}
