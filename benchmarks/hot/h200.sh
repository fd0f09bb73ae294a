#!/usr/bin/env bash
# nvcc-evo --hot on the H200, from an application to its tuned kernels (one device call):
#   bash benchmarks/hot/h200.sh OUT_FOLDER
# The application: APP (a folder; default tests/data/projects/hot), built by BUILD (default
# `make -s NVCC=nvcc-evo`), run by RUN (default `./app 2048 20`), printing its own figure METRIC (a regex,
# its first group; default `time ([0-9.]+) ms`); LIMIT seconds a unit for the retune (default 90: the
# written units' searches, confirmations and the rest must end within the device's 10 minutes a call).
# Needs in .device-wheels/: lark's wheel and nvidia-cuda-cupti 13.0.x's (unless python3 has one: torch's):
#   python3 -m pip download --no-deps -d .device-wheels nvidia-cuda-cupti==13.0.85
# Steps: the build through nvcc-evo (its ACF replaced by a unit "**/*.cu" {} that records it), the
# injected run's overhead and the metric's noise (overhead.py), --hot, --hot --write, --retune --backend
# command with the harness-free bench, then the program's own figure before and after, interleaved.
# PART=tune stops after the retune (its tuned.acf comes back in OUT: a search of a real application needs more
# time than one call leaves beside the rest); PART=compare TUNED_ACF=FILE (a path in the checkout, carried)
# builds the program with the recording unit and with that ACF (from clean) and compares the two, interleaved.
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)       # (absolute: the steps run in the application's folder)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
APP=${APP:-$ROOT/tests/data/projects/hot} BUILD=${BUILD:-make -s NVCC=nvcc-evo} RUN=${RUN:-./app 2048 20}
METRIC=${METRIC:-time ([0-9.]+) ms} LIMIT=${LIMIT:-90} BINARY=${BINARY:-app} PART=${PART:-all}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/lark-*.whl \
    $(ls "$ROOT"/.device-wheels/nvidia_cuda_cupti-*.whl 2>/dev/null)
mkdir -p /tmp/site/bin "$OUT"
printf '#!/usr/bin/env python3\nimport sys\nfrom nvcc_evo.cli import main\nsys.exit(main())\n' > /tmp/site/bin/nvcc-evo
chmod +x /tmp/site/bin/nvcc-evo
export PYTHONPATH=$ROOT:/tmp/site PATH=/tmp/site/bin:$PATH XDG_CACHE_HOME=/tmp/evo-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
WORK=/tmp/work/app
rm -rf "$WORK" && mkdir -p /tmp/work && cp -r "$APP" "$WORK" && cd "$WORK" || exit 1
# a unit covering every source: the build's compiles are recorded (a build adds nothing for it); it stays
# after --write: the retune with the command backend passes it by (no search, no bench) and tunes the written units
printf 'acf 1\n\nunit "**/*.cu" {\n}\n' > nvcc-evo.acf
step() { echo "== $*" | tee -a "$OUT/log.txt"; }
step build; bash -c "$BUILD" >> "$OUT/log.txt" 2>&1 || { echo "build failed"; tail "$OUT/log.txt"; exit 1; }
ARGS=${RUN#./$BINARY}
compare() {      # the program's own figure, the default build's binary against the tuned build's, interleaved
    step "before and after (the program's own figure, interleaved)"
    python3 "$ROOT/benchmarks/interleave.py" --rounds 10 --metric "$METRIC" \
        "/tmp/work/default_binary$ARGS" "/tmp/work/tuned_binary$ARGS" | tee "$OUT/interleaved.txt"
}
if [ "$PART" = compare ]; then   # a tuned ACF of an earlier call (TUNED_ACF): both builds here, then compared
    cp "$BINARY" /tmp/work/default_binary
    cp "$ROOT/$TUNED_ACF" nvcc-evo.acf && find . -name '*.o' -delete && rm -f "$BINARY"
    step "rebuild with $TUNED_ACF"; bash -c "$BUILD" >> "$OUT/log.txt" 2>&1 || { tail "$OUT/log.txt"; exit 1; }
    cp "$BINARY" /tmp/work/tuned_binary; compare; exit 0
fi
step overhead; python3 "$ROOT/benchmarks/hot/overhead.py" --runs 7 --metric "$METRIC" --out "$OUT/overhead.json" \
    -- $RUN | tee "$OUT/overhead.txt"
step hot; nvcc-evo --hot -- $RUN > "$OUT/hot.txt" 2>> "$OUT/log.txt"; echo "exit $?"; cat "$OUT/hot.txt"
step write; nvcc-evo --hot --from .nvcc-evo/hot/profile.json --write --build "$BUILD" > /dev/null 2>> "$OUT/log.txt"
cp nvcc-evo.acf "$OUT/written.acf"; cat nvcc-evo.acf
nvcc-evo --acf-check nvcc-evo.acf || exit 1
cp "$BINARY" /tmp/work/default_binary
step retune; nvcc-evo --retune --backend command --time-limit "$LIMIT" > "$OUT/retune.txt" 2>> "$OUT/log.txt"
echo "exit $?"; cat "$OUT/retune.txt"; cp nvcc-evo.acf "$OUT/tuned.acf"
cp .nvcc-evo/results.jsonl "$OUT/results.jsonl" 2>/dev/null     # (each candidate's runs, as measured)
[ "$PART" = tune ] && exit 0
step rebuild; bash -c "$BUILD" >> "$OUT/log.txt" 2>&1; cp "$BINARY" /tmp/work/tuned_binary
compare
