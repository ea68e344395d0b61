#!/usr/bin/env bash
# Everything the H200 scripts (h200-bench.sh, h200-peer-bench.sh) need carried, built here from the repository root
# after `npm install`, each in a folder .git/info/exclude ignores:
#   .gpu      Node.js and the Vulkan loader (../shared/tools/gpu/prepare.sh)
#   .gpu-nm   node_modules for that machine: webgpu (its linux-x64 Dawn only, xz'd; the scripts unpack it) and the
#             run-time packages the CLI and the bench import (h200-serve.sh deps)
#   .llama    llama.cpp's source for the CUDA peer (../shared/tools/gpu/llama-cuda.sh pack)
#   dist-gpu  the compiled tree, without tests and research
# Then: call 1 carry [".llama"]: `bash .llama/llama-cuda.sh build`; call 2 carry [".gpu", ".gpu-nm", "dist-gpu",
# ".llama"]: `SERVE=0 bash scripts/h200-peer-bench.sh v2-lite`. The working tree travels too (64 MiB in all): the
# script prints what would travel; move models/*.gguf and test/fixtures out of the tree for the call if it is over.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
shared=${SHARED:-../shared/tools/gpu}
ignore() { grep -qxF "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >> .git/info/exclude; }
for d in .gpu .gpu-nm .llama dist-gpu; do ignore "$d"; done
bash "$shared/prepare.sh" >/dev/null
rm -rf .gpu-nm && mkdir -p .gpu-nm/webgpu/dist/linux-x64
cp node_modules/webgpu/package.json node_modules/webgpu/index.js .gpu-nm/webgpu/
[ -d node_modules/webgpu/build ] && cp -r node_modules/webgpu/build .gpu-nm/webgpu/
xz -T0 -9 -c node_modules/webgpu/dist/linux-x64/dawn.node > .gpu-nm/webgpu/dist/linux-x64/dawn.node.xz
tmp=$(mktemp -d)
bash scripts/h200-serve.sh deps "$tmp/deps.txz" >/dev/null && tar xJf "$tmp/deps.txz" -C .gpu-nm --strip-components=1
rm -rf "$tmp"
[ -d .llama ] || bash "$shared/llama-cuda.sh" pack >/dev/null
rm -rf dist-gpu && npx tsc -p tsconfig.json --outDir dist-gpu --sourceMap false && rm -rf dist-gpu/{test,scripts,tools,research}
du -sh .gpu .gpu-nm .llama dist-gpu
tree=$(git ls-files -z | du -ch --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "tracked files: $tree (the carry and the tree together must stay under 64 MiB)"
