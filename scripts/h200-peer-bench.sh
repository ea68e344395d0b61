#!/usr/bin/env bash
# latent's WebGPU bench against llama.cpp CUDA on the lent H200, on the same GGUF in the same call, alternating, then
# one table of ratios (bench/peer-table.ts). Needs what scripts/h200-bench.sh needs carried (.gpu, .gpu-nm and a
# dist-gpu/ compiled from the whole tree: npx tsc -p tsconfig.json --outDir dist-gpu) and a llama.cpp built on the
# same machine by the call before (../shared/tools/gpu/llama-cuda.sh: `pack` here, `bash .llama/llama-cuda.sh build`
# there; the machine stays warm ~30 s between calls). One model per call (each takes 4–9 minutes):
#   bash scripts/h200-peer-bench.sh v2-lite        # DeepSeek-V2-Lite shape, 27 layers, Q4_K_M (10.4 GB)
#   bash scripts/h200-peer-bench.sh glm5 6         # GLM-5 shape (glm-dsa), 6 layers, Q4_K_M (26 GB)
# Work measured: prefill 512 and 4096; decode at batch 1, 8, 32, 64 (llama.cpp: tg128 and llama-batched-bench S_TG with
# 128+128 tokens per sequence); decode at batch 1 after 4,096 and 16,384 tokens of context. Results land in
# $OUT/<model>.tgz (both sides' JSON and latent's logs) and the table in $OUT/<model>.md.
# With GPU_MEMORY set (e.g. GPU_MEMORY=13G), also latent with that --gpu-memory budget (routed experts streamed through
# the GPU expert cache) against llama.cpp with the routed experts on the CPU (-ot exps=CPU), prefill 512 and decode.
set -uo pipefail
preset=${1:?usage: h200-peer-bench.sh v2-lite|glm5 [LAYERS]}
layers=${2:-}
build=${LATENT_BUILD:-dist-gpu}
B=/tmp/llama/build/bin
[ -x $B/llama-bench ] || { echo "no llama.cpp build here: run .llama/llama-cuda.sh build in the call before" >&2; exit 1; }
source .gpu/env.sh
mkdir -p node_modules && cp -r .gpu-nm/* node_modules/
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d node_modules/webgpu/dist/linux-x64/dawn.node.xz
export XDG_RUNTIME_DIR=/tmp
name=$preset${layers}
out=/tmp/peer/$name # packed into $OUT at the end: the device tool brings back at most 8 files
mkdir -p "$out" "${OUT:-/tmp/out}"
model=/tmp/$preset${layers}-q4km.gguf
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
stamp "llama.cpp prefill 512/4096, tg128"
timeout 150 $B/llama-bench -m "$model" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -o json 2>/dev/null > "$out/llama-pp.json"
latent ctx16 --prompt 512 --batches 1,8,32,64 --steps 32
stamp "llama.cpp batched decode 1/8/32/64"
timeout 200 $B/llama-batched-bench -m "$model" -ngl 99 -fa 1 -c 20480 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8,32,64 \
  --output-format jsonl 2>/dev/null | grep '^{' > "$out/llama-batched.jsonl"
latent p4096 --prompt 4096 --batches 1 --steps 8
stamp "llama.cpp tg128 after 4096 and 16384 tokens"
timeout 200 $B/llama-bench -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d 4096,16384 -r 2 -o json 2>/dev/null > "$out/llama-depth.json"
latent ctx4096 --prompt 512 --batches 1 --steps 32 --decode-context 4096
latent ctx16384 --prompt 512 --batches 1 --steps 32 --decode-context 16384
if [ -n "${GPU_MEMORY:-}" ]; then
  latent budget --prompt 512 --batches 1,8 --steps 16 --gpu-memory "$GPU_MEMORY"
  stamp "llama.cpp with the routed experts on the CPU (-ot exps=CPU)"
  timeout 240 $B/llama-bench -m "$model" -ngl 99 -fa 1 -ot "exps=CPU" -p 512 -n 128 -r 2 -o json 2>/dev/null > "$out/llama-ot.json"
fi
stamp "table"
node "$build/bench/peer-table.js" "$out" | tee "${OUT:-/tmp/out}/$name.md"
tar czf "${OUT:-/tmp/out}/$name.tgz" -C "$out" .
