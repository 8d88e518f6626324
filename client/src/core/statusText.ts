/** What the status bar item says, from the server's `stitch/status` and `stitch/serverInfo`. */

import type { LlmStatus, ServerInfo, StatusParams } from "./protocol";

export type ServerState = "starting" | "running" | "stopped" | "failed";

export interface StatusView {
  text: string;
  /** Markdown for the tooltip. */
  tooltip: string;
  /** What a screen reader says: plain words, no Markdown or icon names. */
  ariaLabel: string;
  severity: "normal" | "warning" | "error";
}

/** "NVIDIA H100 80GB HBM3" → "H100"; "NVIDIA GeForce RTX 4090" → "RTX 4090". */
export function shortGpuName(name: string): string {
  const trimmed = name.replace(/^NVIDIA\s+/i, "").replace(/^(GeForce|Tesla|Quadro)\s+/i, "").trim();
  const datacenter = /^([A-Z]\d{2,4}[A-Z]?)\b/.exec(trimmed);
  if (datacenter) {
    return datacenter[1];
  }
  return trimmed.replace(/\s+\d+\s*GB.*$/i, "").trim() || name;
}

function jobsText(status: StatusParams | undefined): string {
  if (!status) {
    return "";
  }
  const parts: string[] = [];
  if (status.running > 0) {
    parts.push(`${status.running} running`);
  }
  if (status.queued > 0) {
    parts.push(`${status.queued} queued`);
  }
  return parts.map((p) => ` · ${p}`).join("");
}

function nvccText(nvcc: ServerInfo["nvcc"]): string {
  if (nvcc === null || nvcc === undefined) {
    return "not found";
  }
  if (typeof nvcc === "string") {
    return nvcc;
  }
  return `${nvcc.version} (${nvcc.path})`;
}

export function statusView(
  state: ServerState,
  trusted: boolean,
  info: ServerInfo | undefined,
  status: StatusParams | undefined,
  detail?: string,
  llm?: LlmStatus,
): StatusView {
  if (state === "starting") {
    return {
      text: "$(sync~spin) Stitch",
      tooltip: "Stitch: starting the language server…",
      ariaLabel: "Stitch: starting the language server",
      severity: "normal",
    };
  }
  if (state === "failed" || state === "stopped") {
    return {
      text: "$(error) Stitch",
      tooltip: `Stitch: the language server is not running${detail ? `: ${detail}` : ""}.\n\nClick for actions.`,
      ariaLabel: `Stitch: the language server is not running${detail ? `: ${detail}` : ""}`,
      severity: state === "failed" ? "error" : "warning",
    };
  }
  // The job status names the GPU once a job has used it; serverInfo's detection covers the time before.
  const gpuName = status?.gpu ?? info?.gpu ?? null;
  const gpu = gpuName ? shortGpuName(gpuName) : "no GPU";
  const restricted = !(status?.trusted ?? trusted);
  const icon = restricted ? "$(shield)" : "$(zap)";
  const text = `${icon} ${gpu}${jobsText(status)}${restricted ? " · restricted" : ""}`;
  const lines = [
    `**Stitch** ${info ? `server ${info.version} (pid ${info.pid})` : "server"}`,
    "",
    `- GPU: ${gpuName ?? "none visible"}`,
    `- nvcc: ${info ? nvccText(info.nvcc) : "…"}`,
    `- jobs: ${status ? `${status.running} running, ${status.queued} queued` : "none"}`,
    restricted
      ? "- workspace: **restricted mode** (not trusted: nothing from the workspace is executed)"
      : "- workspace: trusted",
  ];
  if (llm) {
    const source =
      llm.keySource === "client"
        ? "API key from VS Code's secret storage"
        : llm.keySource === "environment"
          ? "API key from the environment"
          : "no API key (run **Stitch: Set Anthropic API Key**)";
    lines.push(`- Coder: ${llm.coder}; LLM ${llm.model}, ${source}`);
  }
  if (info?.python) {
    lines.push(`- Python: \`${info.python}\``);
  }
  if (status?.lastReport) {
    lines.push(`- last report: \`${status.lastReport}\``);
  }
  lines.push("", "Click for actions: cancel jobs, show the last report, restart, show the output.");
  const jobs = status && status.running + status.queued > 0 ? `, ${status.running} jobs running, ${status.queued} queued` : ", no jobs";
  const ariaLabel = `Stitch: ${gpuName ? `GPU ${gpu}` : "no GPU"}${jobs}${restricted ? ", restricted mode" : ""}`;
  return { text, tooltip: lines.join("\n"), ariaLabel, severity: "normal" };
}

/** Markdown and codicon names out of a label, for screen readers. */
export function plainLabel(markdown: string): string {
  return markdown
    .replace(/\$\([\w~-]+\)\s*/g, "")
    .replace(/\*\*(.+?)\*\*/g, "$1")
    .replace(/`([^`]*)`/g, "$1")
    .replace(/\s+/g, " ")
    .trim();
}
