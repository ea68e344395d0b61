#!/usr/bin/env bash
# The user-facing paths on the lent H200: `latent run --backend webgpu` (greedy, chained on the GPU) and `latent serve
# --backend webgpu` under concurrent greedy clients (scripts/serve-probe.mjs), on v2-lite Q4_K_M (all 27 layers,
# synthesized once). `prepare` here builds .gpu-serve/ (the compiled tree and only the run-time packages' files that
# load, to fit the device tool's carry); `run` on that machine from the repository root, with .gpu, .gpu-nm and
# .gpu-serve carried:
#   bash scripts/h200-serve.sh prepare
#   bash scripts/h200-serve.sh run [clients, default 1,8,32] [max tokens per request, default 128]
# `bash scripts/h200-serve.sh deps FILE.txz` packs only the run-time packages (the production dependency closure that
# npm ls lists, webgpu left out: .gpu-nm has it; package.json and script files only: ~150 KB xz'd) as node_modules/…
# entries; scripts/h200-peer-bench.sh carries them inside dist-gpu (dist-gpu/serve-deps.txz) for its serve phase.
# (PROBE_ARGS="--temperature 1": the clients sample at temperature 1, seeded, instead of greedily)
set -uo pipefail
deps() { # FILE.txz: what src/ imports at run time and what that imports, as node_modules/… (webgpu comes from .gpu-nm)
  local pkgs
  pkgs=$(npm ls --omit=dev --omit=optional --all --parseable 2>/dev/null | tail -n +2 | sed "s|^$PWD/||")
  [ -n "$pkgs" ] || { echo "npm ls found no run-time packages (npm install first)" >&2; return 1; }
  # shellcheck disable=SC2086
  find $pkgs -type f \( -name "*.json" -o -name "*.js" -o -name "*.cjs" -o -name "*.mjs" \) ! -name "tsconfig*.json" \
    ! -path "*/test/*" ! -path "*/tests/*" ! -path "*/docs/*" ! -path "*/examples/*" ! -path "*/benchmarks/*" -print0 \
    | tar cJf "$1" --null -T - && du -h "$1"
}
if [ "${1:-}" = deps ]; then
  deps "${2:?usage: h200-serve.sh deps FILE.txz}"
  exit
fi
if [ "${1:-}" = prepare ]; then
  grep -qxF '.gpu-serve/' .git/info/exclude 2>/dev/null || echo '.gpu-serve/' >> .git/info/exclude
  rm -rf .gpu-serve && mkdir -p .gpu-serve
  npx tsc -p tsconfig.build.json --outDir .gpu-serve/dist --sourceMap false || exit 1
  deps .gpu-serve/deps.txz && tar xJf .gpu-serve/deps.txz -C .gpu-serve && rm .gpu-serve/deps.txz || exit 1
  du -sh .gpu-serve
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bash scripts/h200-serve.sh prepare|run [clients] [max tokens] | deps FILE.txz" >&2; exit 2; }
shift
# (GPU_ENV=/dev/null, MODEL and SYNTH try the script elsewhere, e.g. on lavapipe with a 2-layer model)
source "${GPU_ENV:-.gpu/env.sh}"
export XDG_RUNTIME_DIR=/tmp
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" node_modules
rm -rf dist && cp -r .gpu-serve/dist dist
cp -r .gpu-serve/node_modules/* node_modules/ && cp -r .gpu-nm/webgpu node_modules/
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d node_modules/webgpu/dist/linux-x64/dawn.node.xz
# a file entry for the compiled CLI (bin/latent.mjs would look for tsx when src/ is newer than dist/)
printf 'const { main } = await import("./cli/main.js");\nawait main(process.argv.slice(2));\n' > dist/latent-entry.mjs
latent() { node dist/latent-entry.mjs "$@"; }
model=${MODEL:-/tmp/v2l.gguf}
# shellcheck disable=SC2086
[ -f "$model" ] || latent synth ${SYNTH:---preset v2-lite --type Q4_K_M} -o "$model" > "$OUT/synth.log" 2>&1 || { tail -5 "$OUT/synth.log"; exit 1; }

# each phase stamped and bounded, so that a call cut short by the device's time limit still shows how far it got
echo "=== $(date +%T) latent run --backend webgpu, greedy, ${N_PREDICT:-256} tokens"
timeout "${RUN_TIMEOUT:-240}" node dist/latent-entry.mjs run "$model" -p 'The quick brown fox' -n "${N_PREDICT:-256}" --temp 0 --ignore-eos --backend webgpu --json > "$OUT/run.json" 2> "$OUT/run.err"
echo "$(date +%T) rc=$?"; grep -v "^Warning" "$OUT/run.err" | tail -3
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(JSON.stringify({ backend: r.backend, decode: r.decode, finish_reason: r.finish_reason, generated: r.tokens.length, timings: r.timings }))' "$OUT/run.json"

echo "=== $(date +%T) latent serve --backend webgpu, concurrent greedy clients"
# shellcheck disable=SC2086
node dist/latent-entry.mjs serve "$model" --backend webgpu --port 8199 --max-batch 32 ${SERVE_ARGS:-} > "$OUT/serve.log" 2>&1 &
server=$!
# one probe per client count, each followed by the server's cumulative step metrics (forward passes: count and summed
# wall time, tokens), so that time in steps can be told from time around them
for clients in $(echo "${1:-1,8,32}" | tr , ' '); do
  node scripts/serve-probe.mjs --url http://127.0.0.1:8199 --clients "$clients" --max-tokens "${2:-128}" ${PROBE_ARGS:-} --json "$OUT/serve-$clients.json" || echo "probe rc=$?"
  curl -s http://127.0.0.1:8199/metrics 2>/dev/null | grep -E "^latent_(step_seconds|batch_tokens)_(sum|count)|^latent_(generation_tokens|prompt_tokens)_total" | tr '\n' ' '; echo
done
echo "$(date +%T) probes done"
kill -TERM $server; wait $server; echo "server rc=$?"; tail -3 "$OUT/serve.log"
