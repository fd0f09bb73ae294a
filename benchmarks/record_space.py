"""Record a whole search space, once, into a JSONL results store, so that
search strategies can be compared on it for free (replay).

Static (no GPU): tests/data/cuda/spill.cu for sm_90 over six ptxas knobs, the
committed tests/data/recorded/spill_space.jsonl. Every knob there is a ptxas
knob, so the PTX is made once and ptxas alone runs per genome (the same ptxas
nvcc would run, ten times faster).

GPU (--gpu UNIT): every genome of a kernels/ unit's search space compiled with
nvcc and timed on this GPU through its bench spec, each checked against the
unit's numpy reference (runtime only; the baseline first).

    .venv/bin/python benchmarks/record_space.py OUT.jsonl
    python3 benchmarks/record_space.py OUT.jsonl --gpu reduce_sum.cu [--min-seconds 0.1]
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nvcc_evo.acf import model
from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.driver.cmdline.flags import CallFacts, plan_flags
from nvcc_evo.driver.toolkit import load_toolkit
from nvcc_evo.driver.wrapper import find_real_nvcc
from nvcc_evo.measure import static
from nvcc_evo.engine.space import build_space
from nvcc_evo.execute.store import Context, StoredResult, Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "tests" / "data" / "cuda" / "spill.cu"
ARCH = "sm_90"
UNIT = model.Unit(("spill.cu",), space=(
    model.Space("ptxas.opt_level", model.RangeDomain(1, 3)),
    model.Space("ptxas.register_usage_level", model.RangeDomain(0, 10)),
    model.Space("ptxas.maxrregcount", model.SetDomain((64, 72, 80, 96, 128))),
    model.Space("ptxas.override_directive_values", model.BoolDomain()),
    model.Space("ptxas.fast_compile", model.SetDomain(("0", "min", "mid", "max"))),
    model.Space("ptxas.dlcm", model.SetDomain(("ca", "cg"))),
))


def ptxas_run(ptxas: str, ptx: Path, flags: tuple[str, ...], work: Path) -> CompileResult:
    out = work / f"{os.getpid()}-{abs(hash(flags))}.cubin"
    ptxas_flags = [f for f in flags if f != "-Xptxas"]
    started = time.monotonic()
    done = subprocess.run([ptxas, f"-arch={ARCH}", "-v", *ptxas_flags, str(ptx), "-o", str(out)],
                          capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return CompileResult("compile-error", seconds, done.stderr)
    data = out.read_bytes()
    out.unlink()
    return CompileResult("ok", seconds, done.stderr, data)


def every_genome(space) -> list:
    """Every point of the space once (repairs can map two choices to one genome), in product order."""
    knob_names = [d.knob for d in space.dimensions]
    return list(dict.fromkeys(space.genome(dict(zip(knob_names, values)))
                              for values in itertools.product(*[d.choices for d in space.dimensions])))


def record_gpu(store: Store, glob: str, min_seconds: float) -> None:
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.acf.sources import define_values
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate, compile_each
    from nvcc_evo.measure.pycuda.bench import GpuBench
    from nvcc_evo.measure.pycuda.pool import POOLS
    from nvcc_evo.execute.measurers import load_reference
    from nvcc_evo.engine.space import baseline_defines
    kernels = ROOT / "kernels"
    unit = next(u for u in load(kernels / "nvcc-evo.acf").units if glob in u.globs)
    source = kernels / glob
    toolkit = load_toolkit(find_real_nvcc())
    space = build_space(unit, source, toolkit.accepts)
    genomes = every_genome(space)
    genomes.remove(space.baseline())
    genomes.insert(0, space.baseline())            # measured first: the GPU backend's reference run
    defaults = baseline_defines(source, space)
    defines = lambda g: {**defaults, **define_values(g.settings())}
    pool = POOLS.get()
    arch = pool.hello["arch"]
    gpu = GpuBench(unit.bench, pool, arch, defines, energy=False, min_seconds=min_seconds,
                   expected_fn=load_reference(unit.bench, kernels))
    facts = CallFacts({}, False, False, False)
    flags = [plan_flags(g.settings(), facts, toolkit).flags for g in genomes]
    jobs = [CompileJob(toolkit.nvcc, ("-c", glob), str(kernels), glob, arch, f) for f in flags]
    context = Context(toolkit.version, "recorded", arch, pool.hello["name"], "pycuda", glob, "nvcc -c")
    started = time.monotonic()
    try:
        first = compile_candidate(jobs[0])
        for count, (i, result) in enumerate([(0, first)] + [(i + 1, r) for i, r in compile_each(jobs[1:])], 1):
            measurement = gpu.measure(genomes[i], flags[i], result)
            store.append(StoredResult(genomes[i], flags[i], measurement, sass_hash(result.cubin) if result.ok else "",
                                context))
            if count % 25 == 0 or count == len(genomes):
                print(f"{count}/{len(genomes)} [{time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True)
    finally:
        POOLS.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--gpu", metavar="UNIT", help="a kernels/ unit to time on this GPU")
    parser.add_argument("--min-seconds", type=float, default=0.1, help="timing window per genome (GPU)")
    args = parser.parse_args()
    store = Store(Path(args.out))
    if args.gpu:
        record_gpu(store, args.gpu, args.min_seconds)
        return
    toolkit = load_toolkit(find_real_nvcc())
    space = build_space(UNIT, SOURCE, toolkit.accepts)
    genomes = every_genome(space)
    facts = CallFacts({}, False, False, False)
    context = Context(toolkit.version, "recorded", ARCH, "cpu", "static", "spill.cu", "ptxas")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        ptx = work / "spill.ptx"
        subprocess.run([toolkit.nvcc, f"-arch={ARCH}", "-ptx", str(SOURCE), "-o", str(ptx)], check=True)

        def one(genome):
            flags = plan_flags(genome.settings(), facts, toolkit).flags
            result = ptxas_run(toolkit.ptxas, ptx, flags, work)
            return genome, flags, result

        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            for count, (genome, flags, result) in enumerate(pool.map(one, genomes), 1):
                measurement = static.measure(result, ARCH)
                digest = sass_hash(result.cubin) if result.ok else ""
                store.append(StoredResult(genome, flags, measurement, digest, context))
                if count % 200 == 0:
                    print(f"{count}/{len(genomes)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
