#!/usr/bin/env bash
# latent's WebGPU bench against llama.cpp CUDA on the lent H200, on the same GGUF in the same call, alternating, then
# one table of ratios (bench/peer-table.ts). `bash scripts/h200-pack.sh` builds what it needs carried. Needs what scripts/h200-bench.sh needs carried (.gpu, .gpu-nm and a
# dist-gpu/ compiled from the whole tree: npx tsc -p tsconfig.json --outDir dist-gpu) and a llama.cpp built on the
# same machine by the call before (../shared/tools/gpu/llama-cuda.sh: `pack` here, `bash .llama/llama-cuda.sh build`
# there; the machine stays warm ~30 s between calls). One model per call (each takes 4–9 minutes):
#   bash scripts/h200-peer-bench.sh v2-lite        # DeepSeek-V2-Lite shape, 27 layers, Q4_K_M (10.4 GB)
#   bash scripts/h200-peer-bench.sh glm5 6         # GLM-5 shape (glm-dsa), 6 layers, Q4_K_M (26 GB)
# Work measured: prefill 512 and 4096, decode at batch 8, 32, 64 (also with --activations q8: Q8=0 leaves those out); decode at batch 1, 8, 32, 64 (llama.cpp: tg128 and llama-batched-bench S_TG with
# 128+128 tokens per sequence); decode at batch 1 after 4,096 and 16,384 tokens of context. Results land in
# $OUT/<model>.tgz (both sides' JSON and latent's logs) and the table in $OUT/<model>.md.
# With GPU_MEMORY set (e.g. GPU_MEMORY=13G), also latent with that --gpu-memory budget (routed experts streamed through
# the GPU expert cache) against llama.cpp with the routed experts on the CPU (-ot exps=CPU), prefill 512 and decode.
# Then (on by default, ~30–90 s; SERVE=0 leaves it out) the serve phase: `latent serve --backend webgpu` (--max-batch 32,
# --token-budget 2048, --kv-cache-tokens 16384) under 32 concurrent streaming greedy clients (scripts/serve-probe.mjs),
# each sending 128 token ids and taking 128 tokens (end-of-generation ignored), after a warm-up round: aggregate decode
# tok/s, overall (prompt + generated) tok/s and time to first token in $out/latent-serve32.json, beside llama-batched-
# bench's S_TG at B = 32 in the table. It needs the CLI's run-time packages, carried inside dist-gpu (~150 KB):
#   npx tsc -p tsconfig.json --outDir dist-gpu --sourceMap false && rm -rf dist-gpu/{test,scripts,tools,research}
#   bash scripts/h200-serve.sh deps dist-gpu/serve-deps.txz
# The table is written before the serve phase and again after it, so a call cut short there still has the rest; then
# `ONLY=serve bash scripts/h200-peer-bench.sh MODEL [LAYERS]` in the next call on the still-warm machine runs the serve
# phase alone and prints the whole table again (the file and /tmp/peer/<model> are still there).
# SERVE_CLIENTS, SERVE_TOKENS (prompt and generated tokens per client) and SERVE_ARGS (more serve options) change it;
# ONLY=serve runs the serve phase alone (no llama.cpp needed), and GPU_ENV=/dev/null with MODEL=FILE.gguf try it
# elsewhere, e.g. on lavapipe with a 2-layer model:
#   GPU_ENV=/dev/null MODEL=/tmp/tiny.gguf ONLY=serve SERVE_CLIENTS=4 SERVE_TOKENS=8 bash scripts/h200-peer-bench.sh tiny
set -uo pipefail
preset=${1:?usage: h200-peer-bench.sh v2-lite|glm5 [LAYERS]}
layers=${2:-}
build=${LATENT_BUILD:-dist-gpu}
B=/tmp/llama/build/bin
only=${ONLY:-}
[ "$only" = serve ] || [ -x $B/llama-bench ] || { echo "no llama.cpp build here: run .llama/llama-cuda.sh build in the call before" >&2; exit 1; }
source "${GPU_ENV:-.gpu/env.sh}"
mkdir -p node_modules && cp -r .gpu-nm/* node_modules/
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d node_modules/webgpu/dist/linux-x64/dawn.node.xz
export XDG_RUNTIME_DIR=/tmp
name=$preset${layers}
out=/tmp/peer/$name # packed into $OUT at the end: the device tool brings back at most 8 files
mkdir -p "$out" "${OUT:-/tmp/out}"
model=${MODEL:-/tmp/$preset${layers}-q4km.gguf}
start=$(date +%s)
stamp() { echo "=== $(( $(date +%s) - start )) s: $*"; }
if [ ! -f "$model" ]; then
  stamp "synthesizing $model"
  args="synth --preset $preset --type Q4_K_M -o $model"
  [ -n "$layers" ] && args="$args --layers $layers"
  node --input-type=module -e "const { main } = await import('./$build/src/cli/main.js'); await main('$args'.split(' '));" \
    2>&1 | tail -2
fi
latent() { # NAME ARGS…: one run of latent's bench, its JSON in $out/latent-NAME.json
  local name=$1; shift
  stamp "latent $name: $*"
  timeout 280 node "$build/bench/webgpu-model.js" "$model" "$@" --json "$out/latent-$name.json" 2>&1 \
    | grep -v '^Warning' | tee "$out/latent-$name.log" | grep -E 'prefill|decode batch|loaded|uploaded|adapter'
}
serve() { # latent serve under SERVE_CLIENTS concurrent streaming clients: $out/latent-serve<clients>.json
  local clients=${SERVE_CLIENTS:-32} tokens=${SERVE_TOKENS:-128} port=${SERVE_PORT:-8199} server i
  [ -f "$build/serve-deps.txz" ] && tar xJf "$build/serve-deps.txz" # node_modules/… beside webgpu
  [ -f node_modules/commander/package.json ] || { echo "serve: the CLI's packages are missing (carry $build/serve-deps.txz: bash scripts/h200-serve.sh deps $build/serve-deps.txz)" >&2; return 1; }
  stamp "latent serve --backend webgpu: $clients streaming clients, $tokens prompt + $tokens generated tokens each"
  # what a user serving 32 clients sets: a slot each, a whole prompt per chunk, a step budget of 16 prompts (llama.cpp's
  # -b 2048 here), KV room for every sequence twice over; greedy requests chain their decode steps on the GPU
  # a file entry (node -e would hand --input-type=module to the GPU's worker threads, whose eval'd code is CommonJS)
  printf 'const { main } = await import("./src/cli/main.js");\nawait main(process.argv.slice(2));\n' > "$build/latent-entry.mjs"
  # shellcheck disable=SC2086
  timeout "${SERVE_TIMEOUT:-420}" node "$build/latent-entry.mjs" serve "$model" --backend webgpu --port "$port" --max-batch "$clients" --prefill-chunk "$tokens" --token-budget 2048 \
    --kv-cache-tokens "$(( clients * tokens * 4 > 16384 ? clients * tokens * 4 : 16384 ))" ${SERVE_ARGS:-} > "$out/latent-serve.log" 2>&1 &
  server=$!
  # GET a path of the server (node's fetch: no curl needed) to stdout; fails unless 200
  get() { node -e 'fetch(process.argv[1]).then(async (r) => { process.stdout.write(await r.text()); process.exit(r.ok ? 0 : 1) }, () => process.exit(1))' "http://127.0.0.1:$port$1"; }
  for (( i = 0; i < ${SERVE_LOAD_TIMEOUT:-300}; i++ )); do
    get /health > /dev/null && break
    kill -0 $server 2> /dev/null || break
    sleep 1
  done
  if get /health > /dev/null; then
    stamp "serve ready: $(grep -o 'loaded .*' "$out/latent-serve.log" | head -1)"
    # a warm-up request, a warm-up round of every client, then the measured round (prompts differ: no prefix-cache hits)
    timeout "${PROBE_TIMEOUT:-240}" node scripts/serve-probe.mjs --url "http://127.0.0.1:$port" --warmup "1,$clients" \
      --clients "$clients" --stream --prompt-tokens "$tokens" --max-tokens "$tokens" --timeout 120 \
      --json "$out/latent-serve$clients.json" 2>&1 | tee "$out/latent-serve-probe.log" || echo "serve-probe failed"
    get /metrics | grep -E "^latent_(step_seconds|batch_tokens)_(sum|count)|^latent_(generation|prompt)_tokens_total|^latent_preemptions_total" \
      > "$out/latent-serve-metrics.txt"
  else
    echo "serve did not become ready:" >&2
  fi
  # SIGTERM to the server itself (timeout's child; timeout would send it twice, to the child and to its group, and a
  # second one makes the server exit at once): it drains and exits, and timeout with it; KILL after 30 s
  pkill -TERM -P $server 2> /dev/null || kill -TERM $server 2> /dev/null
  for (( i = 0; i < 60; i++ )); do kill -0 $server 2> /dev/null || break; sleep 0.5; done
  pkill -KILL -P $server 2> /dev/null; kill -KILL $server 2> /dev/null
  wait $server
  stamp "server rc=$?"; grep -v '^Warning' "$out/latent-serve.log" | tail -3
}
table() {
  stamp "table"
  node "$build/bench/peer-table.js" "$out" | tee "${OUT:-/tmp/out}/$name.md"
  tar czf "${OUT:-/tmp/out}/$name.tgz" -C "$out" .
}
if [ "$only" = serve ]; then
  serve
  table
  exit
fi
stamp "llama.cpp prefill 512/4096, tg128"
timeout 150 $B/llama-bench -m "$model" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -o json 2>/dev/null > "$out/llama-pp.json"
latent ctx16 --prompt 512 --batches 1,8,32,64 --steps 32
# AB_TUNE="gemm=0 rowTilePipe=0": the same prefill and batch 1/8/64 decode under each kernel tuning, beside the table (in
# ab-<tuning>.json / .log, not read by peer-table; AB_ARGS="--activations q8" adds options to those runs)
for tune in ${AB_TUNE:-}; do
  stamp "latent with --tune $tune"
  # shellcheck disable=SC2086
  timeout 200 node "$build/bench/webgpu-model.js" "$model" --prompt 512 --batches 1,8,64 --steps 16 --tune "$tune" ${AB_ARGS:-} \
    --json "$out/ab-$tune.json" 2>&1 | grep -v '^Warning' | tee "$out/ab-$tune.log" | grep -E 'prefill|decode batch'
done
stamp "llama.cpp batched decode 1/8/32/64"
timeout 200 $B/llama-batched-bench -m "$model" -ngl 99 -fa 1 -c 20480 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8,32,64 \
  --output-format jsonl 2>/dev/null | grep '^{' > "$out/llama-batched.jsonl"
latent p4096 --prompt 4096 --batches 1 --steps 8
# the opt-in 8-bit activations (--gpu-activations q8) on the prompts: rows of their own (Q8=0 leaves them out)
if [ "${Q8:-1}" != 0 ]; then
  latent q8-p512 --prompt 512 --batches 1 --steps 8 --activations q8
  latent q8-p4096 --prompt 4096 --batches 1 --steps 4 --activations q8
  latent q8-ctx16 --prompt 64 --batches 8,32,64 --steps 32 --activations q8
fi
stamp "llama.cpp tg128 after 4096 and 16384 tokens"
timeout 200 $B/llama-bench -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d 4096,16384 -r 2 -o json 2>/dev/null > "$out/llama-depth.json"
latent ctx4096 --prompt 512 --batches 1 --steps 32 --decode-context 4096
latent ctx16384 --prompt 512 --batches 1 --steps 32 --decode-context 16384
if [ -n "${GPU_MEMORY:-}" ]; then
  latent budget --prompt 512 --batches 1,8 --steps 16 --gpu-memory "$GPU_MEMORY"
  stamp "llama.cpp with the routed experts on the CPU (-ot exps=CPU)"
  timeout 240 $B/llama-bench -m "$model" -ngl 99 -fa 1 -ot "exps=CPU" -p 512 -n 128 -r 2 -o json 2>/dev/null > "$out/llama-ot.json"
fi
table
if [ "${SERVE:-1}" != 0 ]; then
  serve
  table
fi
