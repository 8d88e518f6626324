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
