// Builds the console into the Python package (services/gateway/ui_static/), which is committed:
// pip and CI need no Node. Same inputs (package-lock.json) give the same bytes.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";

const out = new URL("../services/gateway/ui_static/", import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out + "assets", { recursive: true });
await build({
  entryPoints: ["src/main.js"],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  legalComments: "none",
  outfile: out + "assets/app.js",
  logLevel: "warning",
});
await build({
  entryPoints: ["src/style.css"],
  bundle: true,
  minify: true,
  outfile: out + "assets/app.css",
  logLevel: "warning",
});
copyFileSync("src/index.html", out + "index.html");
copyFileSync("src/favicon.svg", out + "assets/favicon.svg");

// What the assets were built from: a unit test recomputes this digest from ui/ and fails when
// the source changed but the committed assets were not rebuilt.
const walk = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(`${dir}/${e.name}`) : [`${dir}/${e.name}`],
  );
const digest = createHash("sha256");
for (const f of ["build.mjs", "package-lock.json", ...walk("src")].sort()) {
  digest.update(f + "\0");
  digest.update(readFileSync(f));
  digest.update("\0");
}
writeFileSync(out + "source.sha256", digest.digest("hex") + "\n");
