#!/usr/bin/env bash
# The npm package as a user gets it: pack the tarball, install it into an empty project outside this repository
# (so the repository's node_modules is not visible) without dev dependencies, then run the CLI, the demo, a
# one-line library script and `latent serve` answering one request. Prints the tarball's and the install's size.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d /tmp/latent-package-XXXXXX)
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

tarball=$(npm pack --silent --pack-destination "$work" | tail -n 1)
echo "package: $tarball, $(du -h "$work/$tarball" | cut -f1) packed, $(tar -tzf "$work/$tarball" | wc -l) files"
if tar -tzf "$work/$tarball" | grep -E '^package/(src|test|bench|tools|web)/' >/dev/null; then
  echo "package-check: the tarball carries sources, tests or research" >&2
  exit 1
fi

mkdir "$work/app"
cd "$work/app"
npm init -y >/dev/null
npm install --omit=dev --no-audit --no-fund --loglevel=error "$work/$tarball" >/dev/null
echo "install: $(du -sh node_modules | cut -f1) in node_modules ($(du -sh node_modules/latent | cut -f1) of it latent)"
[ ! -e node_modules/tsx ] || { echo "package-check: tsx was installed" >&2; exit 1; }
# the install script builds the native CPU kernels where it can (x86-64 with a C++ compiler); CI requires them
if [ -e node_modules/latent/native/build/Release/latent_cpu.node ]; then
  echo "native CPU kernels: built at install"
elif [ "${LATENT_REQUIRE_NATIVE:-0}" = "1" ]; then
  echo "package-check: the install did not build the native CPU kernels" >&2
  exit 1
else
  echo "native CPU kernels: not built (the cpu backend runs WebAssembly)"
fi

npx --no-install latent --help | head -n 3
npx --no-install latent demo -n 8 --greedy-only

cat > lib.mjs <<'JS'
import { load } from "latent";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
const pkg = dirname(createRequire(import.meta.url).resolve("latent/package.json"));
const m = await load(join(pkg, "models", "latent-demo-kjv.gguf"));
const r = await m.generate("In the beginning", { maxTokens: 8, temperature: 0 });
if (typeof r.text !== "string" || r.text.length === 0) throw new Error("library: no text generated");
console.log(`library: load → generate: ${JSON.stringify(r.text)}`);
await m.close?.();
JS
node lib.mjs

model=node_modules/latent/models/latent-demo-kjv.gguf
node node_modules/latent/bin/latent.mjs serve "$model" --port 0 --backend cpu > serve.out 2> serve.log &
server_pid=$!
url=""
for _ in $(seq 1 120); do
  url=$(grep -oE 'listening on http://[^ ]+' serve.log | head -n 1 | cut -d' ' -f3 || true)
  [ -n "$url" ] && break
  sleep 0.5
done
[ -n "$url" ] || { echo "package-check: latent serve did not start:" >&2; cat serve.log >&2; exit 1; }
answer=$(curl -sS --fail-with-body "$url/v1/completions" -H 'content-type: application/json' -d '{"model": "latent-demo-kjv", "prompt": "And God said", "max_tokens": 8, "temperature": 0}')
node -e 'const j = JSON.parse(process.argv[1]); if (!j.choices?.[0]?.text) throw new Error("no completion"); console.log("serve: " + JSON.stringify(j.choices[0].text))' "$answer"
echo "package-check: ok"
