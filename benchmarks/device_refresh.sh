#!/bin/sh
# One device call on a GPU machine without network (the project's H200, with
# PyCUDA's wheels carried in .device-wheels/): the GPU tests, a retune of
# whatever is stale in kernels/nvcc-evo.acf, then the benchmark. Everything
# lands under $OUT (default out/device): logs, the retuned ACF, the search
# records, bench.md, bench.json and bench-plots.tar (the SVGs). Steps are timed out so that
# each call stays under 10 minutes (a limit of the machine it was written for); a step that fails does
# not stop the next. Steps: test, retune, bench; all three by default, which
# with a long retune needs two calls:
#
#     sh benchmarks/device_refresh.sh test retune     (EVALUATIONS=30 by default)
#     sh benchmarks/device_refresh.sh bench
set -u
OUT=${OUT:-out/device}
mkdir -p "$OUT"
make gpu-setup > "$OUT/setup.log" 2>&1 || { echo "gpu-setup failed (see setup.log)"; exit 3; }
export PYTHONPATH="$PWD:/tmp/evo-site" PATH="/tmp/evo-site/bin:$PATH" XDG_CACHE_HOME=/tmp/xdg

STEPS=${*:-test retune bench}
step() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }

if step test; then
timeout 400 python3 -m pytest -q -m gpu tests/test_gpu*.py > "$OUT/gpu-tests.log" 2>&1    # (about 230 s on the H200)
echo "gpu tests: rc=$? $(tail -1 "$OUT/gpu-tests.log")"
fi

if step retune; then
nvcc-evo --retune --dry-run --acf kernels/nvcc-evo.acf --backend pycuda 2>/dev/null | sed 's/^/stale: /'
timeout 420 nvcc-evo --retune --acf kernels/nvcc-evo.acf --backend pycuda --evaluations "${EVALUATIONS:-30}" \
    --patience 4 --seed 1 > "$OUT/retune.out" 2> "$OUT/retune.err"
echo "retune: rc=$?"; grep -E '^".*\]: (improved|baseline)' "$OUT/retune.out"
cp kernels/nvcc-evo.acf "$OUT/nvcc-evo.acf"
cp kernels/.nvcc-evo/results.jsonl "$OUT/results.jsonl" 2>/dev/null
fi

if step bench; then
timeout 540 python3 benchmarks/bench.py --rounds 8 --out out/device-bench > "$OUT/bench.md" 2> "$OUT/bench.err"
echo "bench: rc=$?"; grep -E "^Geometric" "$OUT/bench.md"
# bench.json as is; the plots in one tar (fewer files to bring back)
cp out/device-bench/bench.json "$OUT/" && tar -cf "$OUT/bench-plots.tar" -C out/device-bench .
fi
