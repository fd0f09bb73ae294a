#!/usr/bin/env bash
# Measurements to a good point, old engine (operators alone) against new (guided), on a GPU machine, one unit
# of kernels/ per call (issue 40):
#   [EVALUATIONS=30] [WALL=520] bash benchmarks/sample_efficiency_h200.sh OUT UNIT...
# e.g. `bash benchmarks/sample_efficiency_h200.sh $OUT softmax.cu`. Needs PyCUDA's and lark's wheels in
# .device-wheels/ (a machine with no network). Each unit gets WALL seconds over its units: a reference search of
# 3 x EVALUATIONS, then old and new for seeds 0 1 2 (benchmarks/sample_efficiency.py); its results.json, table and
# the runs' retune logs are kept in OUT/sample-efficiency.tgz after each unit.
set -u
OUT=$1; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/*.whl
export PYTHONPATH=$ROOT:/tmp/site XDG_CACHE_HOME=/tmp/evo-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
mkdir -p "$OUT" /tmp/kept/sample-efficiency /tmp/se
each=$(( ${WALL:-520} / $# ))
for unit in "$@"; do
    name=${unit%.cu}
    python3 "$ROOT/benchmarks/sample_efficiency.py" --unit "$unit" --evaluations "${EVALUATIONS:-30}" \
        --seeds 0 1 2 --wall "$each" --out "/tmp/se/$name" 2>&1 | tee "/tmp/se/$name.txt" | tail -12
    kept=/tmp/kept/sample-efficiency/$name
    mkdir -p "$kept"
    cp "/tmp/se/$name.txt" "/tmp/se/$name/results.json" "$kept/" 2>/dev/null
    for run in /tmp/se/$name/*-seed*; do cp "$run/retune.err" "$kept/$(basename "$run").err" 2>/dev/null; done
    tar czf "$OUT/sample-efficiency.tgz" -C /tmp/kept sample-efficiency
done
tar tzf "$OUT/sample-efficiency.tgz"
