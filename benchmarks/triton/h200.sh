#!/usr/bin/env bash
# Triton's kernels on the H200, tuned through their own benchmarks (one device call):
#   bash benchmarks/triton/h200.sh smoke|full OUT_FOLDER [SECONDS_PER_SEARCH]
# Runs the tree itself (PYTHONPATH); needs lark's wheel in .device-wheels/, ptxas 13.3 and the
# controls files in $TRITON_DEV/{ptxas133/ptxas,controls/*.acf}, torch and triton in python3. Each kernel: one run through nvcc-evo-ptxas (the compile
# database learns it), then `nvcc-evo --retune --backend command` with the same time limit,
# whose confirmation runs default and tuned in turn (triton.testing.do_bench: CUDA events,
# L2 cleared before each repetition).
set -uo pipefail
MODE=$1 OUT=$2 LIMIT=${3:-35}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${TRITON_DEV:-$ROOT/.device-wheels}       # ptxas133/ptxas and controls/*.acf
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.device-wheels/lark-*.whl
mkdir -p /tmp/site/bin
for script in "nvcc-evo nvcc_evo.cli" "nvcc-evo-ptxas nvcc_evo.driver.dropin_ptxas.shim"; do
    set -- $script
    printf '#!/usr/bin/env python3\nimport sys\nfrom %s import main\nsys.exit(main())\n' "$2" > /tmp/site/bin/$1
    chmod +x /tmp/site/bin/$1
done
set -- "$MODE" "$OUT" "$LIMIT"
FINAL=$OUT OUT=/tmp/results          # what comes back: one archive (the device tool returns few files)
save() { tar czf "$FINAL/results.tgz" -C /tmp results; }     # after each step: a call cut short keeps what ran
# (never `timeout ... bash h200.sh | tail`: bash waits for its running retune before a TERM trap, and the
# pipe then returns nothing; give each retune EACH seconds instead, and the call more than their sum)
export PYTHONPATH=$ROOT:/tmp/site PATH=/tmp/site/bin:$PATH XDG_CACHE_HOME=/tmp/evo-cache
export NVCC_EVO_PTXAS=$WHEELS/ptxas133/ptxas
chmod +x "$NVCC_EVO_PTXAS"
mkdir -p "$OUT" "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

declare -A ENTRY=([matmul]=matmul_kernel [softmax]=softmax_kernel [layernorm]=layernorm_kernel [attention]=attention_fwd)
declare -A REGS=([matmul]="128, 168, 192, 232, 255" [softmax]="32, 48, 64, 96, 128" [layernorm]="32, 48, 64, 96, 128"
                 [attention]="128, 168, 192, 232, 255")

project() {      # project KERNEL: a folder with the benchmark and its ACF
    local k=$1 dir=/tmp/work/$1
    mkdir -p "$dir" && cp "$ROOT/benchmarks/triton/common.py" "$ROOT/benchmarks/triton/$k.py" "$WHEELS"/controls/*.acf "$dir/"
    cat > "$dir/nvcc-evo.acf" <<ACF
acf 1
unit kernel "${ENTRY[$k]}" {
    pin ptxas.override_directive_values = true
    search {
        ptxas.maxrregcount in {${REGS[$k]}}
        ptxas.opt_level in 1..3
        ptxas.register_usage_level in {0, 3, 5, 7, 10}
        ptxas.dlcm in {ca, cg}
        ptxas.version in {toolkit, "13.3"}
        ptxas.controls in {none, "controls-a.acf", "controls-b.acf", "controls-c.acf"}
    }
    bench {
        command "python3 $k.py"
        metric "time ([0-9.]+) ms"
        confirm rounds 10
        timeout 120
    }
}
ACF
    echo "$dir"
}

checks() {     # the drop-in's overhead; each kernel: Triton alone, through nvcc-evo-ptxas, with ptxas 13.3 + a controls file
    (cd "$ROOT" && python3 benchmarks/ptxas_overhead.py --runs 15) 2>&1 | tee "$OUT/overhead.txt"
    for k in matmul softmax layernorm attention; do
        dir=$(project $k)
        (cd "$dir" && python3 $k.py; TRITON_PTXAS_PATH=nvcc-evo-ptxas python3 $k.py
         printf 'acf 1\nunit kernel "*" {\n    pin ptxas.version = "13.3"\n    pin ptxas.controls = "controls-a.acf"\n}\n' > p133.acf
         NVCC_EVO_ACF=p133.acf TRITON_PTXAS_PATH=nvcc-evo-ptxas NVCC_EVO_LOG=$OUT/$k-133.log python3 $k.py
         ls .nvcc-evo/kernels; rm -rf .nvcc-evo) 2>&1 | tee "$OUT/$k-smoke.txt"
    done
}

if [ "$MODE" = smoke ]; then
    checks
    dir=$(project softmax)
    (cd "$dir" && nvcc-evo --retune --backend command --evaluations 3 --time-limit 20) > "$OUT/softmax-retune.txt" 2>&1
    tail -25 "$OUT/softmax-retune.txt"
    save
    exit 0
fi

(cd "$ROOT" && python3 benchmarks/ptxas_overhead.py --runs 15) 2>&1 | tee "$OUT/overhead.txt"
save
for k in ${KERNELS:-matmul attention softmax layernorm}; do
    dir=$(project $k)
    # the first run through nvcc-evo-ptxas, with a Triton cache of its own: ptxas runs, the compile database learns it
    (cd "$dir" && TRITON_PTXAS_PATH=nvcc-evo-ptxas TRITON_CACHE_DIR=$dir/first-cache python3 $k.py && \
        timeout "${EACH:-600}" nvcc-evo --retune --backend command --time-limit "$LIMIT" --evaluations 10000) > "$OUT/$k-retune.txt" 2>&1
    cp "$dir/nvcc-evo.acf" "$OUT/$k.acf"; cp "$dir/.nvcc-evo/results.jsonl" "$OUT/$k-results.jsonl" 2>/dev/null
    save
    echo "== $k"; grep -B2 -A14 "^unit " "$OUT/$k-retune.txt" | head -40; tail -3 "$OUT/$k-retune.txt"
done
