#!/usr/bin/env bash
# The WebGPU test files on the lent H200. That machine has no npm packages and the device tool carries at most 64 MiB
# with the working tree (~35 MB tracked), so the tests travel compiled, with only the packages they import at run time.
#
# Here (repository root, after `npm install`, the GPU tool kit's prepare.sh (it writes .gpu/) and a .gpu-nm/ holding the runtime packages):
#   bash scripts/h200-tests.sh prepare
# then on the device, carrying [".gpu", ".gpu-nm", ".gpu-test.txz"] (the compiled tree xz'd: ~0.4 MB instead of ~3 MB,
# which with the tracked files, .gpu and .gpu-nm would pass the tool's 64 MiB):
#   bash scripts/h200-tests.sh run
# which writes $OUT/tests.tap and prints the summary and the failures.
#
# Left out: cli.test and close.test (they spawn `node --import tsx`), serve-fused.test (the `openai` client is 20 MB)
# and generate-chained.test (it reads a fixture model).
set -uo pipefail
case "${1:-}" in
  prepare)
    for p in .gpu-test/ .gpu-test.txz; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
    rm -rf .gpu-test && mkdir -p .gpu-test/node_modules
    npx tsc -p tsconfig.json --outDir .gpu-test/dall --sourceMap false || exit 1
    rm -rf .gpu-test/dall/bench .gpu-test/dall/scripts
    find .gpu-test/dall/test -name "*.js" ! -path "*/backend/webgpu/*" ! -path "*/test/helpers/*" ! -path "*/test/fixtures/workers/*" -delete
    # what src/ and the WebGPU tests import at run time (webgpu itself comes from .gpu-nm on the device)
    for p in cli-progress string-width emoji-regex is-fullwidth-code-point strip-ansi ansi-regex @huggingface/jinja; do
      mkdir -p ".gpu-test/node_modules/$(dirname "$p")" && cp -r "node_modules/$p" ".gpu-test/node_modules/$p"
    done
    rm -f .gpu-test.txz && tar cJf .gpu-test.txz .gpu-test
    du -sh .gpu-test .gpu-test.txz
    ;;
  run)
    [ -f .gpu-test.txz ] && { rm -rf .gpu-test; tar xJf .gpu-test.txz; }
    source .gpu/env.sh
    cp -r .gpu-nm/webgpu .gpu-test/node_modules/
    [ -f .gpu-test/node_modules/webgpu/dist/linux-x64/dawn.node ] || xz -d .gpu-test/node_modules/webgpu/dist/linux-x64/dawn.node.xz
    export XDG_RUNTIME_DIR=/tmp
    export LATENT_LONG_SWEEPS=1  # the knob sweeps on the wide model: seconds on a GPU, minutes on lavapipe
    OUT=${OUT:-/tmp/out}
    mkdir -p "$OUT"
    cd .gpu-test || exit 1
    # shellcheck disable=SC2046
    timeout "${TEST_TIMEOUT:-300}" node --test --test-concurrency=8 $(ls dall/test/backend/webgpu/*.test.js | grep -v -e cli.test -e close.test -e serve-fused -e generate-chained) > "$OUT/tests.tap" 2>&1
    echo "rc=$?"
    grep -E "^# (tests|pass|fail|skipped|cancelled|duration)" "$OUT/tests.tap"
    grep -E "^not ok" "$OUT/tests.tap"
    ;;
  *)
    echo "usage: bash scripts/h200-tests.sh prepare|run" >&2
    exit 2
    ;;
esac
