"""Record a whole search space with the static backend, once, into a JSONL
results store, so that search strategies can be compared on it for free
(replay). The committed recording is tests/data/recorded/spill_space.jsonl:
tests/data/cuda/spill.cu for sm_90 over six ptxas knobs.

Every knob here is a ptxas knob, so the PTX is made once and ptxas alone runs
per genome (the same ptxas nvcc would run, ten times faster).

    .venv/bin/python benchmarks/record_space.py OUT.jsonl
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nvcc_evo import acf
from nvcc_evo.compile import CompileResult, sass_hash
from nvcc_evo.flags import CallFacts, plan_flags
from nvcc_evo.measure import static
from nvcc_evo.space import build_space
from nvcc_evo.store import Context, Record, Store
from nvcc_evo.toolkit import load_toolkit
from nvcc_evo.wrapper import find_real_nvcc

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "cuda" / "spill.cu"
ARCH = "sm_90"
UNIT = acf.Unit(("spill.cu",), space=(
    acf.Space("ptxas.opt_level", acf.RangeDomain(1, 3)),
    acf.Space("ptxas.register_usage_level", acf.RangeDomain(0, 10)),
    acf.Space("ptxas.maxrregcount", acf.SetDomain((64, 72, 80, 96, 128))),
    acf.Space("ptxas.override_directive_values", acf.BoolDomain()),
    acf.Space("ptxas.fast_compile", acf.SetDomain(("0", "min", "mid", "max"))),
    acf.Space("ptxas.dlcm", acf.SetDomain(("ca", "cg"))),
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


def main() -> None:
    store = Store(Path(sys.argv[1]))
    toolkit = load_toolkit(find_real_nvcc())
    space = build_space(UNIT, SOURCE, toolkit.accepts)
    genomes = list(dict.fromkeys(space.genome(dict(zip([d.knob for d in space.dimensions], values)))
                                 for values in itertools.product(*[d.choices for d in space.dimensions])))
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
                store.append(Record(genome, flags, measurement, digest, context))
                if count % 200 == 0:
                    print(f"{count}/{len(genomes)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
