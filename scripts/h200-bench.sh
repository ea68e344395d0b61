#!/usr/bin/env bash
# The WebGPU benchmark on the lent H200 (see BENCHMARKS.md, "WebGPU"): run from the repository root on that machine,
# with .gpu, .gpu-nm and dist carried (scripts/h200-pack.sh builds the first two) (dist compiled from the whole tree: npx tsc -p tsconfig.json --outDir dist). Synthesizes v2-lite Q4_K_M (all 27 layers) once, then runs bench.js once per
# argument string given ("" = defaults), each writing $OUT/bench-<i>.json and its log. An argument string starting with
# "old:" runs the build in dist-old instead (carry it too), so that two builds can alternate in one call:
#   bash scripts/h200-bench.sh "--batches 1 --steps 64" "old:--batches 1 --steps 64" "--batches 1 --steps 64" ...
set -uo pipefail
source .gpu/env.sh
mkdir -p node_modules && cp -r .gpu-nm/* node_modules/
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d node_modules/webgpu/dist/linux-x64/dawn.node.xz
export XDG_RUNTIME_DIR=/tmp
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
synth="--synth v2-lite:Q4_K_M:/tmp/v2l.gguf"
[ -f /tmp/v2l.gguf ] && synth=/tmp/v2l.gguf
i=0
for a in "$@"; do
  echo "=== bench $i: $a"
  build=dist
  case "$a" in old:*) build=dist-old; a=${a#old:} ;; esac
  # shellcheck disable=SC2086
  eval node $build/bench/webgpu-model.js $synth $a --json "$OUT/bench-$i.json" 2>&1 | tee "$OUT/bench-$i.log" | grep -v "^Warning"
  synth=/tmp/v2l.gguf
  i=$((i + 1))
done
