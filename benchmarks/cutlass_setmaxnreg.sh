#!/bin/sh
# The setmaxnreg hazard on a real CUTLASS 3.x Hopper kernel, on a GPU machine (sm_90; issue 37).
# CUTLASS's headers come with the call: put them in .cutlass/ of the checkout (include/, tools/util/include/,
# examples/51_hopper_gett/: about 29 MB, e.g. `git archive HEAD include tools/util/include
# examples/51_hopper_gett | tar -x -C .cutlass` in a clone of NVIDIA's public repository; `/.cutlass/` in
# .git/info/exclude, named in the device call's carry with .device-wheels) or name them with CUTLASS=.
# Steps, each under $OUT (default out/cutlass) with its log:
#   baseline  example 51_hopper_gett built through nvcc-evo (no entry) and run: "GETT verification passed"
#   hazard    the same with -maxrregcount=96 --override-directive-values (what the old static retune wrote):
#             ptxas says nothing; the run never ends and is killed after 60 s (rc 124)
#   retune    a static retune searching ptxas.maxrregcount {64..200} with the override: the caps under the
#             kernel's 168 registers are left out; the example rebuilt with its entry runs and passes
# Each compile is 1-2 minutes there: `sh benchmarks/cutlass_setmaxnreg.sh baseline hazard`, then `... retune`.
set -u
OUT=${OUT:-out/cutlass}
CUTLASS=$(cd "${CUTLASS:-.cutlass}" && pwd) || { echo "no CUTLASS headers (see the top of this script)"; exit 3; }
mkdir -p "$OUT"
make gpu-setup > "$OUT/setup.log" 2>&1 || { echo "gpu-setup failed (see setup.log)"; exit 3; }
export PYTHONPATH="$PWD:/tmp/evo-site" PATH="/tmp/evo-site/bin:$PATH" XDG_CACHE_HOME=/tmp/xdg
EVO="python3 -m nvcc_evo"     # (word-split on purpose: a command and its module)
WORK=/tmp/cutlass-proof
mkdir -p "$WORK" && cp "$CUTLASS/examples/51_hopper_gett/"*.cu* "$WORK/" && cd "$WORK" || exit 3
FLAGS="-gencode arch=compute_90a,code=sm_90a -std=c++17 --expt-relaxed-constexpr -DNDEBUG -O3 \
-I$CUTLASS/include -I$CUTLASS/tools/util/include"
build() {   # $1: the binary; the rest: nvcc's or nvcc-evo's command and extra flags (compiled, then linked)
    out=$1; shift; "$@" $FLAGS -c 51_hopper_gett.cu -o "$out.o" && nvcc -arch=sm_90a "$out.o" -o "$out" -lcuda
}
RUN="--modeC=m,n,l --modeA=m,k,l --modeB=k,n,l --extents=m:4096,n:4096,k:4096"
STEPS=${*:-baseline hazard retune}
step() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
cat > nvcc-evo.acf <<'ACF'
acf 1
unit "51_hopper_gett.cu" {
    search {
        ptxas.maxrregcount in {64, 96, 128, 168, 200}
        ptxas.override_directive_values in bool
    }
}
ACF

if step baseline; then
build gett $EVO > "$OUT/baseline-build.log" 2>&1; echo "baseline build: rc=$?"
timeout 120 ./gett $RUN > "$OUT/baseline-run.log" 2>&1; echo "baseline run: rc=$? $(tail -1 "$OUT/baseline-run.log")"
fi

if step hazard; then
build gett96 nvcc -Xptxas -v,-maxrregcount=96,--override-directive-values > "$OUT/hazard-build.log" 2>&1; echo "hazard build: rc=$? (ptxas: $(grep -c -i 'warning\|error' "$OUT/hazard-build.log") warnings or errors)"
timeout 60 ./gett96 $RUN > "$OUT/hazard-run.log" 2>&1; echo "hazard run: rc=$? (124: killed after 60 s)"
nvidia-smi --query-gpu=name,utilization.gpu --format=csv,noheader > "$OUT/after-hazard.txt" 2>&1
timeout 120 ./gett $RUN > "$OUT/after-hazard-run.log" 2>&1 && echo "the GPU after it: $(tail -1 "$OUT/after-hazard-run.log")"
fi

if step retune; then
[ -x gett ] || build gett $EVO > "$OUT/baseline-build.log" 2>&1
timeout 540 $EVO --retune --backend static --evaluations 12 > "$OUT/retune.out" 2> "$OUT/retune.err"
echo "retune: rc=$?"; grep -o 'ptxas.maxrregcount: [0-9, ]* left out of the search' "$OUT/retune.err"
cp nvcc-evo.acf "$OUT/nvcc-evo.acf"; grep -E 'maxrregcount =|verdict' nvcc-evo.acf
build gett $EVO > "$OUT/tuned-build.log" 2>&1 && \
    timeout 120 ./gett $RUN > "$OUT/tuned-run.log" 2>&1; echo "tuned run: rc=$? $(tail -1 "$OUT/tuned-run.log")"
fi
