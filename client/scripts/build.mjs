// Bundles the extension into dist/extension.js; with --tests, also builds the
// tests into out/ (Node's test runner runs them; they never load `vscode`).
import { build } from "esbuild";
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const withTests = process.argv.includes("--tests");

await build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node20",
  minify: true,
  // No source maps: nothing of the sources (or anything else) beside the bundle in the .vsix.
  sourcemap: false,
  legalComments: "none",
  logLevel: "warning",
});

if (withTests) {
  rmSync("out", { recursive: true, force: true });
  const tests = [];
  for (const dir of ["unit", "contract", "package"]) {
    for (const name of readdirSync(join("test", dir))) {
      if (name.endsWith(".test.ts")) {
        tests.push(join("test", dir, name));
      }
    }
  }
  await build({
    entryPoints: tests,
    bundle: true,
    outdir: "out/test",
    outbase: "test",
    packages: "external",
    format: "cjs",
    platform: "node",
    target: "node20",
    sourcemap: "inline",
    logLevel: "warning",
  });
}
