// The extension as a user meets it, in code-server driven by headless Chromium (run by e2e/run.sh).
// Each step checks what a user would see and leaves a screenshot; timings go to timings.json.
import * as fs from "node:fs";
import * as path from "node:path";
import { chromium } from "playwright-core";

const OUT = process.env.E2E_OUT;
const WS = process.env.E2E_WORKSPACE;
const DATA = process.env.E2E_DATA;
const timings = {};
const checks = [];
let shot = 0;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
const sleep = (ms) => page.waitForTimeout(ms);

async function screenshot(name) {
  await page.waitForTimeout(700); // notifications slide in
  shot += 1;
  await page.screenshot({ path: path.join(OUT, `${String(shot).padStart(2, "0")}-${name}.png`) });
}

function check(what, ok, detail = "") {
  checks.push({ what, ok: Boolean(ok), detail: String(detail).slice(0, 400) });
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${detail && !ok ? `: ${detail}` : ""}`);
  if (!ok) {
    throw new Error(`${what}: ${detail}`);
  }
}

async function until(fn, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    }
    await sleep(50);
  }
}

const toasts = () => page.locator(".notifications-toasts .notification-toast").allInnerTexts();
async function toastWith(text, timeoutMs) {
  return until(async () => (await toasts()).find((t) => t.includes(text)), timeoutMs, `a notification with "${text}"`);
}
async function closeToasts() {
  for (const close of await page.locator(".notifications-toasts .codicon-notifications-clear").all()) {
    await close.click().catch(() => undefined);
  }
}

async function runCommand(title) {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill(`>${title}`);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first().waitFor({ timeout: 10000 });
  await sleep(150);
  await page.keyboard.press("Enter");
  return Date.now(); // when the user ran it
}

async function openFile(name) {
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill(name);
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: name }).first();
  await row.waitFor({ timeout: 10000 });
  await sleep(200);
  await row.click();
  await page.locator(".tab.active", { hasText: name }).waitFor({ timeout: 10000 });
}

const squiggle = () => page.locator(".monaco-editor .squiggly-warning, .monaco-editor .squiggly-error").first();
const statusItem = () => page.locator('[id="stitch-lsp.stitch.stitch.status"]');

/** Timestamps of a line in the Stitch output channel's log file (local time). */
function logTimes(pattern) {
  const files = [];
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name === "Stitch.log") files.push(p);
    }
  };
  walk(path.join(DATA, "logs"));
  const times = [];
  for (const f of files) {
    for (const line of fs.readFileSync(f, "utf8").split("\n")) {
      const m = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d\.\d{3})/.exec(line);
      if (m && pattern.test(line)) {
        times.push(new Date(`${m[1]}T${m[2]}`).getTime());
      }
    }
  }
  return times.sort((a, b) => a - b);
}

try {
  // -- 1. Open the folder; decline trust: restricted mode --------------------------------------------
  await page.goto(process.env.E2E_URL);
  await page.waitForSelector(".monaco-workbench", { timeout: 60000 });
  await page.locator(".monaco-dialog-box .monaco-button", { hasText: "No, I don't trust" }).click({ timeout: 60000 });

  // -- 2. The trust message: only what the workspace set, one message ---------------------------------
  const trustToast = await toastWith("until you trust it", 30000);
  check("restricted mode: one message names what the workspace set: nvccPath (pyproject.toml), pair (folder settings)", /nvccPath/.test(trustToast) && /pyproject\.toml/.test(trustToast) && /pair/.test(trustToast) && /folder settings/.test(trustToast), trustToast);
  check("restricted mode: the user's own stitch.python is not reported as ignored", !/python/i.test(trustToast.split("apply instead")[0].replace(/pyproject/g, "")), trustToast);
  await sleep(1500);
  const stitchToasts = (await toasts()).filter((t) => /Stitch/.test(t));
  check("restricted mode: no second, overlapping Stitch warning", stitchToasts.length === 1, JSON.stringify(stitchToasts));
  check("restricted mode: no Markdown backticks in the message", !trustToast.includes("`"), trustToast);
  await screenshot("untrusted-one-message");
  await closeToasts();

  // -- 3. A .cu file: squiggle, hover, quick fix --------------------------------------------------------
  const opened = Date.now();
  await openFile("scale.cu");
  await until(() => squiggle().isVisible(), 30000, "a squiggle in scale.cu");
  timings.openCuToSquiggleS = (Date.now() - opened) / 1000;
  check("scale.cu: the missing bounds check is squiggled", true);
  await screenshot("squiggle");

  const box = await squiggle().boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  const hover = page.locator(".monaco-hover:visible").first();
  await until(async () => (await hover.isVisible()) && /STC001/.test(await hover.innerText()), 15000, "the hover");
  const hoverText = (await hover.innerText()).replace(/\s*stitch\s*\(?STC001\)?[\s\S]*$/, "");
  check("hover on the squiggle: the whole message, plain text", /\.[^.]*'if \(i < n\)'$/.test(hoverText.trim()) && !hoverText.includes("`"), hoverText);
  await screenshot("hover-diagnostic");
  await page.mouse.move(5, 400);
  await page.keyboard.press("Escape");
  // Stitch's own card on the kernel's name: each rule's text in whole sentences.
  const name = page.locator(".monaco-editor .view-lines span", { hasText: /^scale$/ }).first();
  const nameBox = await name.boundingBox();
  await page.mouse.move(nameBox.x + nameBox.width / 2, nameBox.y + nameBox.height / 2);
  await until(async () => (await hover.isVisible()) && /STC001/.test(await hover.innerText()), 15000, "the kernel card");
  const card = await hover.innerText();
  const ruleLines = card.split("\n").filter((l) => /STC001/.test(l) && l.length > 30);
  check("hover card: the rule's text is whole sentences", ruleLines.length > 0 && ruleLines.every((l) => /[.…)'"]\s*$/.test(l.trim())), ruleLines.join(" | ") || card);
  await screenshot("hover-card");
  await page.mouse.move(5, 400);
  await page.keyboard.press("Escape");

  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  const fixStarted = Date.now();
  await page.keyboard.press("Control+.");
  const menu = page.locator(".action-widget").first();
  await until(async () => (await menu.isVisible()) && /Guard it/.test(await menu.innerText()), 10000, "the quick fix menu");
  timings.quickFixListS = (Date.now() - fixStarted) / 1000;
  const menuText = await menu.innerText();
  check("quick fix: 'Guard it' is offered, with no raw backticks", /Guard it/.test(menuText) && !menuText.includes("`"), menuText);
  await screenshot("quick-fix");
  await page.locator(".action-widget .monaco-list-row", { hasText: "Guard it" }).first().click();
  const editorText = async () => (await page.locator(".monaco-editor .view-lines").first().innerText()).replace(/\u00a0/g, " ");
  await until(async () => /if \(i < n\)/.test(await editorText()), 10000, "the guard in the text");
  check("quick fix: applied, the store is guarded", true);
  await page.keyboard.press("Control+S");

  // -- 4. The status item ----------------------------------------------------------------------------------
  const aria = await statusItem().getAttribute("aria-label");
  check("status item: a plain aria-label", aria && aria.startsWith("Stitch") && !/[*`$]/.test(aria), aria);
  await statusItem().hover();
  await sleep(1200);
  await screenshot("status-item");
  await page.mouse.move(700, 400);

  // -- 5. "Cancel All Jobs" with nothing running says so ----------------------------------------------------
  await runCommand("Stitch: Cancel All Jobs");
  await toastWith("no jobs were running", 10000);
  check("Cancel All Jobs: feedback when nothing runs", true);
  await closeToasts();

  // -- 6. Trust the folder: the warning is superseded ------------------------------------------------------
  await runCommand("Workspaces: Manage Workspace Trust");
  await page.locator(".workspace-trust-editor .monaco-button", { hasText: /^Trust$/ }).first().click({ timeout: 15000 });
  const trusted = await toastWith("trusted now", 15000);
  check("trust: one line supersedes the restricted-mode warning", /trusted now/.test(trusted), trusted);
  await sleep(1500);
  const errors = (await toasts()).filter((t) => /could not|failed|error/i.test(t));
  check("trust: the workspace's own nvcc (a relative path) runs, no error", errors.length === 0, JSON.stringify(errors));
  await screenshot("trusted");
  await page.keyboard.press("Control+W");
  await closeToasts();

  // -- 7. Fuse a selection in the model: progress you can cancel, then a result with buttons ------------------
  await openFile("model.py");
  const modelText = fs.readFileSync(path.join(WS, "model.py"), "utf8").split("\n");
  const first = modelText.findIndex((l) => l.includes("h = self.norm(x + residual)")) + 1;
  await page.keyboard.press("Control+G");
  const goTo = page.locator(".quick-input-widget input");
  await goTo.waitFor({ state: "visible" });
  await goTo.fill(`:${first}`);
  await sleep(200);
  await page.keyboard.press("Enter");
  await until(async () => new RegExp(`Ln ${first},`).test(await page.locator(".statusbar").innerText()), 10000, `the cursor on line ${first}`);
  await page.keyboard.press("Home");
  await page.keyboard.press("Shift+ArrowDown");
  await page.keyboard.press("Shift+ArrowDown");
  await until(async () => /selected/.test(await page.locator(".statusbar").innerText()), 10000, "the selection");
  await screenshot("selection");
  const fuseStarted = await runCommand("Stitch: Fuse Selection into a CUDA Kernel");
  const progress = await toastWith("Stitch: fuse", 30000);
  timings.fuseProgressShownS = (Date.now() - fuseStarted) / 1000;
  const cancelButton = page.locator(".notifications-toasts .notification-toast", { hasText: "Stitch: fuse" }).locator(".monaco-button", { hasText: "Cancel" });
  check("fuse: a progress notification with a Cancel button", await cancelButton.isVisible(), progress);
  await screenshot("fuse-progress");
  const result = await toastWith("No CUDA device", 420000);
  timings.fuseResultS = (Date.now() - fuseStarted) / 1000;
  const resultToast = page.locator(".notifications-toasts .notification-toast", { hasText: "No CUDA device" });
  const buttons = await resultToast.locator(".monaco-button").allInnerTexts();
  check("fuse: the result offers Open candidate, Show diff, Show report", ["Open candidate", "Show diff", "Show report"].every((b) => buttons.includes(b)), JSON.stringify(buttons));
  check("fuse: nvcc compiled the candidate here (registers shown)", /nvcc compiled it/.test(result) && /registers/.test(result), result);
  await screenshot("fuse-result");
  await resultToast.locator(".monaco-button", { hasText: "Show diff" }).click();
  await page.locator(".tab.active", { hasText: "edit.diff" }).waitFor({ timeout: 15000 });
  check("fuse: Show diff opens the diff", true);
  await screenshot("fuse-diff");

  // -- 8. "Show Last Report" from the Python file: the fuse report -----------------------------------------------
  await openFile("model.py");
  await runCommand("Stitch: Show Last Report");
  await page.locator(".tab", { hasText: /report\.md/ }).first().waitFor({ timeout: 15000 });
  check("Show Last Report from model.py: the fuse report", true);
  await sleep(1000);
  await screenshot("fuse-report");

  // -- 9. Restart Server and a window reload: how long until the squiggle is back -----------------------------------
  await runCommand("View: Close All Editors"); // nothing under .stitch/ is revealed in the Explorer
  await sleep(500);
  await page.mouse.click(850, 400); // the empty editor area takes the keyboard
  await openFile("restart.cu");
  await until(() => squiggle().isVisible(), 20000, "a squiggle in restart.cu");
  await sleep(500);
  const explorer = await page.locator(".explorer-folders-view .monaco-list-row").allInnerTexts();
  check(".stitch/ is hidden in the Explorer", fs.existsSync(path.join(WS, ".stitch")) && !explorer.some((t) => t.trim().startsWith(".stitch")), JSON.stringify(explorer));
  const restart = await runCommand("Stitch: Restart Server");
  await until(async () => /starting/.test((await statusItem().getAttribute("aria-label")) ?? ""), 10000, "the server stopping");
  await until(async () => /^Stitch: (no GPU|GPU)/.test((await statusItem().getAttribute("aria-label")) ?? "") && (await squiggle().isVisible()), 30000, "the server back");
  timings.restartToSquiggleS = (Date.now() - restart) / 1000;

  const activationsBefore = logTimes(/Starting the Stitch server \(extension activated\)/).length;
  await runCommand("Developer: Reload Window");
  await page.waitForSelector(".monaco-workbench", { timeout: 60000 });
  await until(() => squiggle().isVisible(), 60000, "the squiggle after the reload");
  const squiggleAt = Date.now();
  const activations = logTimes(/Starting the Stitch server \(extension activated\)/);
  if (activations.length > activationsBefore) {
    timings.activationToSquiggleAfterReloadS = (squiggleAt - activations[activations.length - 1]) / 1000;
  }
  await screenshot("after-reload");

  // -- 10. A Python without Stitch: the install advice, and "Set stitch.python" opens the Remote tab --------------
  const machine = path.join(DATA, "Machine", "settings.json");
  const own = fs.readFileSync(machine, "utf8");
  fs.writeFileSync(machine, JSON.stringify({ "stitch.python": path.join(WS, "no-such-python") }, null, 1));
  const advice = await toastWith("could not start Python", 30000);
  check("install advice: no stitch-lsp from PyPI, the checkout or a wheel instead", !/pip install stitch-lsp/.test(advice) && /pip install -e/.test(advice) && /\.whl/.test(advice), advice);
  await screenshot("install-advice");
  await page.locator(".notifications-toasts .notification-toast", { hasText: "could not start Python" }).locator(".monaco-button", { hasText: "Set stitch.python" }).click();
  const settingsEditor = page.locator(".settings-editor");
  await settingsEditor.waitFor({ timeout: 15000 });
  await until(async () => /Stitch: Python|Python/.test(await settingsEditor.innerText()), 15000, "the setting in the Settings editor");
  // The selected scope tab: VS Code marks it checked / aria-selected on the tab or its label.
  const tab = await page.locator(".settings-editor .settings-tabs-widget").evaluate((bar) =>
    [...bar.querySelectorAll(".action-item, .action-label")]
      .filter((e) => e.classList.contains("checked") || e.getAttribute("aria-selected") === "true" || e.getAttribute("aria-checked") === "true")
      .map((e) => e.textContent ?? "").join(" | "));
  check("Set stitch.python: the Settings editor opens on the Remote tab, showing the setting", /Remote/i.test(tab) && /Stitch/.test(await settingsEditor.innerText()), tab);
  await screenshot("set-stitch-python");
  fs.writeFileSync(machine, own);
} catch (error) {
  console.error(`editor e2e: FAILED: ${error.message}`);
  await screenshot("failure").catch(() => undefined);
  checks.push({ what: "run", ok: false, detail: error.message });
} finally {
  fs.writeFileSync(path.join(OUT, "timings.json"), JSON.stringify({ when: new Date().toISOString(), timings, checks }, null, 1) + "\n");
  await browser.close();
}
const failed = checks.filter((c) => !c.ok);
console.log(`editor e2e: ${failed.length ? "FAILED" : "passed"}: ${checks.length - failed.length} checks passed; timings ${JSON.stringify(timings)}`);
process.exit(failed.length ? 1 : 0);
