#!/usr/bin/env bash
# The old against the new defaults on a GPU machine, in one call that may be cut short:
#   [DEFAULTS="old new"] [SECONDS_PER=20] [AT_ONCE=2] [BUDGET=560] bash benchmarks/defaults_h200.sh OUT SEED...
# Needs PyCUDA's and lark's wheels in .device-wheels/ (a machine with no network). Each seed is one
# run of benchmarks/defaults.py, given what is left of BUDGET seconds (a seed that would not fit is
# skipped, said); its results.json, retune logs and results stores are copied to OUT/seedN after it,
# so a call cut short keeps what ran. One table of several calls:
#   python3 benchmarks/defaults.py --merge OUT1/seed*/results.json OUT2/seed*/results.json
set -u
OUT=$1; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/*.whl
export PYTHONPATH=$ROOT:/tmp/site XDG_CACHE_HOME=/tmp/evo-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
START=$(date +%s)
RUNS=$(echo ${DEFAULTS:-old new} | wc -w)
for seed in "$@"; do
    left=$(( ${BUDGET:-560} - ($(date +%s) - START) ))
    if [ "$left" -lt "${NEED:-$(( RUNS * 120 ))}" ]; then echo "seed $seed skipped: $left s left"; continue; fi
    python3 "$ROOT/benchmarks/defaults.py" --seconds "${SECONDS_PER:-20}" --seeds "$seed" --defaults ${DEFAULTS:-old new} \
        --at-once "${AT_ONCE:-2}" --run-timeout $(( left / RUNS - 5 )) --stall 60 --out "/tmp/defaults/seed$seed" 2>&1 | tail -16
    mkdir -p "$OUT/seed$seed"
    cp "/tmp/defaults/seed$seed/results.json" "$OUT/seed$seed/" 2>/dev/null
    for run in /tmp/defaults/seed$seed/*-seed*; do
        cp "$run/retune.err" "$OUT/seed$seed/$(basename "$run").err"
        cp "$run/.nvcc-evo/results.jsonl" "$OUT/seed$seed/$(basename "$run").jsonl" 2>/dev/null
    done
done
