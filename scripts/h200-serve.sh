#!/usr/bin/env bash
# The user-facing paths on the lent H200: `latent run --backend webgpu` (greedy, chained on the GPU) and `latent serve
# --backend webgpu` under concurrent greedy clients (scripts/serve-probe.mjs), on v2-lite Q4_K_M (all 27 layers,
# synthesized once). Run from the repository root on that machine with .gpu, .gpu-nm and .gpu-test carried
# (`bash scripts/h200-tests.sh prepare` here first: its compiled tree and run-time packages serve as dist/ there).
#   bash scripts/h200-serve.sh [clients, default 1,8,32] [max tokens per request, default 128]
set -uo pipefail
source .gpu/env.sh
export XDG_RUNTIME_DIR=/tmp
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" node_modules
rm -rf dist && cp -r .gpu-test/dall/src dist
cp -r .gpu-test/node_modules/* node_modules/ && cp -r .gpu-nm/webgpu node_modules/
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d node_modules/webgpu/dist/linux-x64/dawn.node.xz
latent() { node dist/cli/main.js "$@"; }
model=/tmp/v2l.gguf
[ -f $model ] || latent synth --preset v2-lite --type Q4_K_M -o $model > "$OUT/synth.log" 2>&1 || { tail -5 "$OUT/synth.log"; exit 1; }

echo "=== latent run --backend webgpu, greedy, 256 tokens"
latent run $model -p "The quick brown fox" -n 256 --temp 0 --ignore-eos --backend webgpu --json > "$OUT/run.json" 2> "$OUT/run.err"
echo "rc=$?"; tail -3 "$OUT/run.err"
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(JSON.stringify({ backend: r.backend, decode: r.decode, finish_reason: r.finish_reason, generated: r.tokens.length, timings: r.timings }))' "$OUT/run.json"

echo "=== latent serve --backend webgpu, concurrent greedy clients"
latent serve $model --backend webgpu --port 8199 --max-batch 32 > "$OUT/serve.log" 2>&1 &
server=$!
node scripts/serve-probe.mjs --url http://127.0.0.1:8199 --clients "${1:-1,8,32}" --max-tokens "${2:-128}" --json "$OUT/serve.json"
echo "probe rc=$?"
curl -s http://127.0.0.1:8199/metrics 2>/dev/null | grep -E "^latent_(generation_tokens|prompt_tokens|steps|preemptions)_total"
kill -TERM $server; wait $server; echo "server rc=$?"; tail -3 "$OUT/serve.log"
