/** What `vsce package` put in the .vsix (a zip): what a user needs, and nothing that should not ship. */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";
import yauzl from "yauzl";
import { clientRoot } from "../helpers";

function entries(file: string): Promise<{ name: string; size: number }[]> {
  return new Promise((resolve, reject) => {
    yauzl.open(file, { lazyEntries: true }, (err, zip) => {
      if (err || !zip) {
        reject(err);
        return;
      }
      const out: { name: string; size: number }[] = [];
      zip.on("entry", (e: yauzl.Entry) => {
        out.push({ name: e.fileName, size: e.uncompressedSize });
        zip.readEntry();
      });
      zip.on("end", () => resolve(out));
      zip.on("error", reject);
      zip.readEntry();
    });
  });
}

function readEntry(file: string, name: string): Promise<string> {
  return new Promise((resolve, reject) => {
    yauzl.open(file, { lazyEntries: true }, (err, zip) => {
      if (err || !zip) {
        reject(err);
        return;
      }
      zip.on("entry", (e: yauzl.Entry) => {
        if (e.fileName !== name) {
          zip.readEntry();
          return;
        }
        zip.openReadStream(e, (err2, stream) => {
          if (err2 || !stream) {
            reject(err2);
            return;
          }
          const chunks: Buffer[] = [];
          stream.on("data", (c: Buffer) => chunks.push(c));
          stream.on("end", () => {
            zip.close();
            resolve(Buffer.concat(chunks).toString("utf8"));
          });
        });
      });
      zip.on("end", () => reject(new Error(`${name} not in ${file}`)));
      zip.readEntry();
    });
  });
}

const VSIX = path.join(clientRoot(), "dist", "stitch.vsix");

describe("the packaged .vsix", () => {
  it("exists (npm run package)", () => {
    assert.ok(fs.existsSync(VSIX), `${VSIX} missing: run npm run package first`);
  });

  it("has the bundle, the manifest, the README and the LICENSE", async () => {
    // vsce names them readme.md and LICENSE.txt inside the archive.
    const names = (await entries(VSIX)).map((e) => e.name.toLowerCase());
    for (const required of [
      "extension/dist/extension.js",
      "extension/package.json",
      "extension/readme.md",
      "extension/license.txt",
      "extension.vsixmanifest",
      "[content_types].xml",
    ]) {
      assert.ok(names.includes(required), `${required} missing from ${names.join(", ")}`);
    }
  });

  it("has no node_modules, sources, tests, source maps or build files", async () => {
    const names = (await entries(VSIX)).map((e) => e.name);
    const forbidden = names.filter(
      (n) =>
        n.includes("node_modules/") ||
        /\.(ts|map|tsbuildinfo|vsix)$/.test(n) ||
        /(^|\/)(src|test|out|scripts)\//.test(n) ||
        /(^|\/)(tsconfig\.json|package-lock\.json|\.vscodeignore|\.env)$/.test(n),
    );
    assert.deepEqual(forbidden, []);
  });

  it("stays small (one bundled file, not a dependency tree)", async () => {
    const all = await entries(VSIX);
    const total = all.reduce((sum, e) => sum + e.size, 0);
    assert.ok(all.length <= 12, `${all.length} files: ${all.map((e) => e.name).join(", ")}`);
    assert.ok(total < 2_000_000, `${total} bytes unpacked`);
    assert.ok(fs.statSync(VSIX).size < 600_000, `${fs.statSync(VSIX).size} bytes packed`);
  });

  it("ships a bundle that inlines its dependencies and carries no source map", async () => {
    const bundle = await readEntry(VSIX, "extension/dist/extension.js");
    assert.ok(!/sourceMappingURL/.test(bundle), "no source map reference");
    assert.ok(!/require\("vscode-languageclient/.test(bundle), "vscode-languageclient is bundled, not required at run time");
    assert.match(bundle, /require\("vscode"\)/, "only vscode stays external");
    assert.ok(!/sk-ant-[A-Za-z0-9]/.test(bundle), "no key in the bundle");
  });

  it("declares activation, commands, settings and limited trust in its manifest", async () => {
    const manifest = JSON.parse(await readEntry(VSIX, "extension/package.json")) as Record<string, any>;
    assert.equal(manifest.main, "./dist/extension.js");
    assert.deepEqual(manifest.activationEvents, ["onLanguage:python", "onLanguage:cuda-cpp", "workspaceContains:**/*.cu"]);
    assert.equal(manifest.capabilities.untrustedWorkspaces.supported, "limited");
    const commands = manifest.contributes.commands.map((c: { command: string }) => c.command);
    for (const c of [
      "stitch.fuseSelection",
      "stitch.verifyKernel",
      "stitch.profileKernel",
      "stitch.showReport",
      "stitch.cancelAll",
      "stitch.restartServer",
      "stitch.setApiKey",
      "stitch.showOutput",
    ]) {
      assert.ok(commands.includes(c), c);
    }
  });
});
