// Builds FluxVM Studio into ../dist, which central embeds (go:embed): run
// through `make console`. It also records a hash of every source file and
// the lockfile in dist/SOURCES.sha256, so a Go test can tell, without Node,
// that the committed bundle was built from the committed sources.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const dist = join(here, "..", "dist");

// sourceFiles lists what the bundle is made from, relative to web/, sorted.
// The Go test (console.SourcesHash) walks the same list the same way.
function sourceFiles() {
  const out = ["build.mjs", "index.html", "package.json", "package-lock.json", "tsconfig.json"];
  const walk = (dir) => {
    for (const name of readdirSync(join(here, dir))) {
      const rel = join(dir, name);
      if (statSync(join(here, rel)).isDirectory()) walk(rel);
      else out.push(rel);
    }
  };
  walk("src");
  return out.sort();
}

export function sourcesHash() {
  const h = createHash("sha256");
  for (const rel of sourceFiles()) {
    const body = readFileSync(join(here, rel));
    h.update(rel + "\n" + createHash("sha256").update(body).digest("hex") + "\n");
  }
  return h.digest("hex");
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, "assets"), { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.tsx")],
  bundle: true,
  splitting: true, // noVNC is its own chunk, loaded when Control opens
  format: "esm",
  target: "es2020",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  jsx: "automatic",
  jsxImportSource: "preact",
  entryNames: "[name]",
  chunkNames: "chunk-[hash]",
  outdir: join(dist, "assets"),
  logLevel: "warning",
});
copyFileSync(join(here, "index.html"), join(dist, "index.html"));
writeFileSync(join(dist, "SOURCES.sha256"), sourcesHash() + "\n");
// axe-core runs in the page under the browser tests; the tests read it from
// here so that they need no Node either.
copyFileSync(join(here, "node_modules", "axe-core", "axe.min.js"), join(here, "..", "testdata", "axe.min.js"));
console.log("built", relative(process.cwd(), dist));
