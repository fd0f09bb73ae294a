#!/usr/bin/env bash
# Measurements to a good point, old engine against new, on the H200 (issue 40): ONE kernel of kernels/ per
# device call, about 8 minutes (the searches get WALL=420 s, the call stops them at 540 s; a device command
# may run 600 s). The exact device call (the checkout holds .device-wheels/, see /work/shared/DEVICE.md):
#
#   run(command="bash benchmarks/sample_efficiency_h200.sh $OUT softmax.cu", carry=[".device-wheels"],
#       timeout_s=600)
#
# and the same with each unit of kernels/nvcc-evo.acf in turn (sgemm_regblock.cu, scale.cu, softmax.cu,
# rmsnorm.cu, reduce_sum.cu, hgemm_wmma.cu, hgemm_decode.cu, flash_attention.cu, flash_attention_d64.cu,
# decode_attention.cu). [EVALUATIONS=60] [WALL=420] before `bash` change each run's budget and the searches'
# time (60: the Gaussian process proposes from the 24th evaluation on, so 30 left old and new the same
# first 24 and read alike on an H100, 2026-12-07); BACKEND=static PYTHON=.venv/bin/python WORK=FOLDER
# (no .device-wheels) is a dry run without a GPU.
# Writes to $OUT: UNIT.md (the table), UNIT.json (every run's speedups in the order measured),
# UNIT.log (the searches' lines), UNIT-stores.tgz (each run's results store), gpu.txt.
# benchmarks/sample_efficiency.py's docstring says what is run and counted.
set -u
OUT=$1
UNIT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
if [ -d "$ROOT/.device-wheels" ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/*.whl
fi
export PYTHONPATH=$ROOT:/tmp/site XDG_CACHE_HOME=/tmp/evo-cache
WORK=${WORK:-/tmp/se}
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
    2>&1 | tee "$OUT/gpu.txt"
name=${UNIT%.cu}
timeout -s KILL 540 "$PYTHON" "$ROOT/benchmarks/sample_efficiency.py" --unit "$UNIT" --backend "${BACKEND:-pycuda}" \
    --evaluations "${EVALUATIONS:-60}" --wall "${WALL:-420}" --out "$WORK/$name" > /dev/null 2> "$OUT/$name.log"
status=$?
cp "$WORK/$name/table.md" "$OUT/$name.md" 2>/dev/null
cp "$WORK/$name/results.json" "$OUT/$name.json" 2>/dev/null
tar czf "$OUT/$name-stores.tgz" -C "$WORK/$name" --exclude project . 2>/dev/null
cat "$OUT/$name.md" 2>/dev/null || tail -30 "$OUT/$name.log"
echo "exit status $status"
