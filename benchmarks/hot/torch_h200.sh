#!/usr/bin/env bash
# nvcc-evo --hot on the H200, from a PyTorch program with Triton kernels to its tuned kernel (one device call,
# about 8 minutes):
#   bash benchmarks/hot/torch_h200.sh OUT_FOLDER
# The program: benchmarks/hot/torch_app.py (a layer norm, a matmul and a softmax of its own in Triton, PyTorch's
# add; STEPS steps, default 200; it prints `time X ms a step`). LIMIT seconds for the retune of its hottest kernel
# (default 200), SHARE the least share of the GPU time a kernel needs to be written (default 30: the matmul alone,
# so that one search fits the call), OVERHEAD_RUNS the overhead's runs of each kind (default 5; 0 leaves it
# out). Needs torch and triton in python3, and in .device-wheels/ lark's wheel and
# nvidia-cuda-cupti 13.0.x's (unless python3 has CUPTI: torch's).
# Steps: the program run once through nvcc-evo-ptxas under --hot (its ACF `unit kernel "*" {}` records every
# kernel Triton compiles), the injected run's overhead and the metric's noise (overhead.py), --hot --write,
# --retune --backend command with the harness-free bench (`metric time kernels`: each candidate's run compiles
# through the stand-ins with fresh Triton caches), then the program's own figure, Triton's own ptxas against
# nvcc-evo-ptxas with the tuned ACF, interleaved. A candidate costs about 26 s of runs on an H100 and the retune
# keeps about 141 s for its confirmation: LIMIT under about 200 does not search. PART=tune stops after the retune
# (tuned.acf comes back in OUT); PART=compare TUNED_ACF=FILE (a path in the checkout, carried) runs the
# comparison alone with that ACF: the search and the comparison as two device calls.
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)       # (absolute: the steps run in the program's folder)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${STEPS:-200} LIMIT=${LIMIT:-200} OVERHEAD_RUNS=${OVERHEAD_RUNS:-5} SHARE=${SHARE:-30}
METRIC='time ([0-9.]+) ms' PART=${PART:-all}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/lark-*.whl \
    $(ls "$ROOT"/.device-wheels/nvidia_cuda_cupti-*.whl 2>/dev/null)
mkdir -p /tmp/site/bin
for script in "nvcc-evo nvcc_evo.cli main" "nvcc-evo-ptxas nvcc_evo.driver.dropin_ptxas.shim main" \
              "nvcc-evo-ptxas-blackwell nvcc_evo.driver.dropin_ptxas.shim main_blackwell"; do
    set -- $script
    printf '#!/usr/bin/env python3\nimport sys\nfrom %s import %s\nsys.exit(%s())\n' "$2" "$3" "$3" > /tmp/site/bin/$1
    chmod +x /tmp/site/bin/$1
done
export PYTHONPATH=$ROOT:/tmp/site PATH=/tmp/site/bin:$PATH XDG_CACHE_HOME=/tmp/evo-cache
unset TRITON_PTXAS_PATH TRITON_PTXAS_BLACKWELL_PATH TRITON_CACHE_DIR
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } | tee "$OUT/gpu.txt"
WORK=/tmp/work/torch
rm -rf "$WORK" && mkdir -p "$WORK" && cp "$ROOT/benchmarks/hot/torch_app.py" "$ROOT/benchmarks/triton/matmul.py" "$ROOT/benchmarks/triton/common.py" "$WORK/" && cd "$WORK" || exit 1
# a kernel unit naming every kernel: each PTX Triton compiles through nvcc-evo-ptxas is kept and recorded (a
# compile adds nothing for it); it stays: the retune passes it by (no search, no bench) and tunes the written unit
printf 'acf 1\n\nunit kernel "*" {\n}\n' > nvcc-evo.acf
step() { echo "== $(date +%T) $*" | tee -a "$OUT/log.txt"; }
RUN="python3 torch_app.py $STEPS"
compare() {
    step "before and after (the program's own figure, interleaved; each side's Triton cache warmed first)"
    DEFAULT="env TRITON_CACHE_DIR=$WORK/cache-default $RUN"
    TUNED="env TRITON_PTXAS_PATH=nvcc-evo-ptxas TRITON_CACHE_DIR=$WORK/cache-tuned $RUN"
    $DEFAULT | tee -a "$OUT/log.txt"
    NVCC_EVO_LOG=$OUT/tuned-ptxas.jsonl $TUNED | tee -a "$OUT/log.txt"   # (each kernel's ptxas call: options added)
    python3 "$ROOT/benchmarks/interleave.py" --rounds 8 --metric "$METRIC" "$DEFAULT" "$TUNED" \
        | tee "$OUT/interleaved.txt"
}
if [ "$PART" = compare ]; then
    cp "$ROOT/$TUNED_ACF" nvcc-evo.acf && compare; step done; exit 0
fi
step "hot (the first run: Triton compiles through nvcc-evo-ptxas, an empty cache of its own)"
TRITON_PTXAS_PATH=nvcc-evo-ptxas TRITON_CACHE_DIR=$WORK/cache-hot nvcc-evo --hot -- $RUN > "$OUT/hot.txt" \
    2>> "$OUT/log.txt"; echo "exit $?"; cat "$OUT/hot.txt"; ls .nvcc-evo/kernels | tee -a "$OUT/log.txt"
if [ "$OVERHEAD_RUNS" != 0 ]; then
    step "overhead (Triton's own ptxas, its cache warmed by overhead.py's first runs: plain and injected in turn)"
    TRITON_CACHE_DIR=$WORK/cache-plain python3 "$ROOT/benchmarks/hot/overhead.py" --runs "$OVERHEAD_RUNS" \
        --metric "$METRIC" --out "$OUT/overhead.json" -- $RUN | tee "$OUT/overhead.txt"
fi
step write
nvcc-evo --hot --from .nvcc-evo/hot/profile.json --write --min-share "$SHARE" > /dev/null 2>> "$OUT/log.txt"
cp nvcc-evo.acf "$OUT/written.acf"; cat nvcc-evo.acf
nvcc-evo --acf-check nvcc-evo.acf || exit 1
step retune
nvcc-evo --retune --backend command --time-limit "$LIMIT" > "$OUT/retune.txt" 2>> "$OUT/log.txt"
echo "exit $?"; cat "$OUT/retune.txt"; cp nvcc-evo.acf "$OUT/tuned.acf"
cp .nvcc-evo/results.jsonl "$OUT/results.jsonl" 2>/dev/null
[ "$PART" = tune ] && { step done; exit 0; }
compare
step done
