#!/usr/bin/env bash
# The old against the new defaults on a GPU machine, in one call that may be cut short:
#   [SECONDS_PER=20] [AT_ONCE=2] [BUDGET=560] [NEED=150] [RUNT=200] bash benchmarks/defaults_h200.sh OUT DEFAULTS:SEED...
# e.g. `bash benchmarks/defaults_h200.sh out new:0 old:0 new:1`. Needs PyCUDA's and lark's wheels in
# .device-wheels/ (a machine with no network). Each DEFAULTS:SEED is one run of benchmarks/defaults.py
# (every unit of kernels/), given at most RUNT seconds and skipped (said) when less than NEED of BUDGET is
# left. After each run everything it kept (results.json, the retune's log, its results store) is added
# to OUT/defaults.tgz, one file, so a call cut short keeps what ran. One table of several calls:
#   python3 benchmarks/defaults.py --merge OUT1/defaults/*/results.json OUT2/defaults/*/results.json
set -u
OUT=$1; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/*.whl
export PYTHONPATH=$ROOT:/tmp/site XDG_CACHE_HOME=/tmp/evo-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
mkdir -p "$OUT" /tmp/kept/defaults
START=$(date +%s)
for item in "$@"; do
    defaults=${item%%:*} seed=${item##*:}
    left=$(( ${BUDGET:-560} - ($(date +%s) - START) ))
    if [ "$left" -lt "${NEED:-150}" ]; then echo "$item skipped: $left s left"; continue; fi
    limit=$(( left - 5 < ${RUNT:-200} ? left - 5 : ${RUNT:-200} ))
    echo "$defaults seed $seed: $left s left, at most $limit s"
    python3 "$ROOT/benchmarks/defaults.py" --seconds "${SECONDS_PER:-20}" --seeds "$seed" --defaults "$defaults" \
        --at-once "${AT_ONCE:-2}" --run-timeout "$limit" --stall 60 --out "/tmp/defaults/$item" 2>&1 | tail -14
    kept=/tmp/kept/defaults/$defaults-seed$seed
    mkdir -p "$kept"
    cp "/tmp/defaults/$item/results.json" "$kept/" 2>/dev/null
    for run in /tmp/defaults/$item/*-seed*; do
        cp "$run/retune.err" "$kept/$(basename "$run").err"
        cp "$run/.nvcc-evo/results.jsonl" "$kept/$(basename "$run").jsonl" 2>/dev/null
    done
    tar czf "$OUT/defaults.tgz" -C /tmp/kept defaults
done
tar tzf "$OUT/defaults.tgz"
