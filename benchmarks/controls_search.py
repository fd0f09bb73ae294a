"""Native controls in the search, on a GPU: kernels/softmax.cu (IEEE-exact,
fast math pinned off) retuned twice with the same budget and seed, once over
the public knobs (defines, ptxas options: kernels/nvcc-evo.acf's space) and
once jointly over those and the control files in --controls (ptxas 13.3); then the baseline and the two choices re-measured interleaved
(A B C, --rounds times), with one-sided Mann-Whitney p-values.

    NVCC_EVO_PTXAS=/path/to/ptxas-13.3 python3 benchmarks/controls_search.py --controls DIR --out OUT

Prints a Markdown table last; OUT/controls_search.json keeps every median.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvcc_evo.acf.bench.spec import plan_bench  # noqa: E402
from nvcc_evo.acf.resolve import load  # noqa: E402
from nvcc_evo.acf.sources import define_values, source_defines  # noqa: E402
from nvcc_evo.driver.cmdline import ptxas  # noqa: E402
from nvcc_evo.cubin.compile import CompileJob, compile_candidate  # noqa: E402
from nvcc_evo.driver.common import find_real_nvcc  # noqa: E402
from nvcc_evo.driver.cmdline.flags import plan_flags, read_facts  # noqa: E402
from nvcc_evo.driver.cmdline.nvcc_options import parse_call  # noqa: E402
from nvcc_evo.driver.toolkit import load_toolkit  # noqa: E402
from nvcc_evo.measure.check import outputs_match  # noqa: E402
from nvcc_evo.measure.pycuda.pool import WorkerPool  # noqa: E402
from nvcc_evo.measure.pycuda.references import reference_outputs  # noqa: E402
from nvcc_evo.measure.pycuda.pipe import RunRequest  # noqa: E402
from nvcc_evo.measure.stats import faster, summarize  # noqa: E402
from nvcc_evo.execute.measurers import load_reference  # noqa: E402
from softmax_bench import BENCH  # noqa: E402  (beside this script)

PUBLIC = """        define.BLOCK in {128, 256, 512, 1024}
        define.VEC in {1, 2, 4}
        define.ITEMS in {1, 2, 4, 8}
        ptxas.dlcm in {ca, cg, cs}
        ptxas.opt_level in 1..3"""
# The control files are ptxas 13.3's: the joint search runs that ptxas (its
# plain code for this kernel is the same as 13.0's), so no candidate is spent
# on a file the toolkit's ptxas rejects.
JOINT_PINS = '    pin ptxas.version = "13.3"\n'
SOURCES = ("softmax.cu", "block_reduce.cuh", "references.py")


def unit_text(search: str, pins: str = "") -> str:
    return (f'acf 1\nunit "softmax.cu" {{\n    pin nvcc.use_fast_math = false\n{pins}    search {{\n{search}\n    }}\n'
            f"    tune {{\n        minimize runtime\n    }}\n{BENCH}\n}}\n")


def prepare(folder: Path, search: str, controls: list[Path], pins: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        shutil.copy(ROOT / "kernels" / name, folder / name)
    for path in controls:
        shutil.copy(path, folder / path.name)
    (folder / "nvcc-evo.acf").write_text(unit_text(search, pins))
    return folder / "nvcc-evo.acf"


def retune(acf: Path, evaluations: int, seed: int, log: Path) -> float:
    import time
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "nvcc_evo", "--retune", "--acf", str(acf), "--all",
                               "--backend", "pycuda", "--evaluations", str(evaluations), "--seed", str(seed)],
                              cwd=acf.parent, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    if done.returncode not in (0, 3):
        raise SystemExit(f"retune of {acf} failed (exit {done.returncode}); see {log}")
    return time.monotonic() - started


def chosen(acf: Path) -> dict:
    unit = load(acf).units[0]
    target = unit.find_target("sm_90")
    settings = {p.knob: p.value for p in unit.pins}
    settings.update({s.knob: s.value for s in (target.settings if target else ())})
    return settings


def build(acf: Path, settings: dict, toolkit) -> tuple[bytes, str]:
    facts = read_facts(parse_call(["-c", "softmax.cu"], {}))
    flags = plan_flags(settings, facts, toolkit, str(acf.parent)).flags
    version = str(settings.get("ptxas.version", "toolkit"))
    program = ptxas.choose(version, toolkit, os.environ)
    job = CompileJob(toolkit.nvcc, ("-c", "softmax.cu"), str(acf.parent), "softmax.cu", "sm_90", flags,
                     ptxas=None if program == ptxas.toolkit_ptxas(toolkit) else program.path)
    result = compile_candidate(job)
    if not result.ok:
        raise SystemExit(f"building {settings} failed: {result.stderr}")
    return result.cubin, " ".join(flags) + (f" [{program}]" if job.ptxas else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controls", type=Path, required=True, help="folder of ptxas 13.3 control files (*.acf)")
    parser.add_argument("--evaluations", type=int, default=28)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "controls")
    parser.add_argument("--chosen", type=Path, help="a folder with public.acf and joint.acf of an earlier run: "
                        "re-measure their choices, no search")
    args = parser.parse_args()
    controls = sorted(args.controls.glob("*.acf"))
    names = ", ".join(f'"{p.name}"' for p in controls)
    joint = PUBLIC + f'\n        ptxas.controls in {{none, {names}}}'
    args.out.mkdir(parents=True, exist_ok=True)
    toolkit = load_toolkit(Path(find_real_nvcc(os.environ)))
    acfs = {"public": prepare(args.out / "public", PUBLIC, []), "joint": prepare(args.out / "joint", joint, controls, JOINT_PINS)}
    if args.chosen:
        seconds = {}
        for side, acf in acfs.items():
            shutil.copy(args.chosen / f"{side}.acf", acf)
    else:
        seconds = {side: retune(acf, args.evaluations, args.seed, args.out / f"retune-{side}.log")
                   for side, acf in acfs.items()}
    base = {"nvcc.use_fast_math": False}
    variants = {"baseline": (acfs["public"], base),
                "public": (acfs["public"], chosen(acfs["public"])), "joint": (acfs["joint"], chosen(acfs["joint"]))}
    for path in controls:         # each control file alone, at the source's defaults (as CompileIQ tuned it)
        variants[path.stem] = (acfs["joint"], {**base, "ptxas.version": "13.3", "ptxas.controls": path.name})
    variants["ptxas 13.3"] = (acfs["joint"], {**base, "ptxas.version": "13.3"})
    unit = load(acfs["public"]).units[0]
    reference = load_reference(unit.bench, acfs["public"].parent)
    pool, builds = WorkerPool(), {}
    try:
        for name, (acf, settings) in variants.items():
            cubin, flags = build(acf, settings, toolkit)
            plan = plan_bench(unit.bench, {**source_defines(acf.parent / "softmax.cu"), **define_values(settings)})
            answer = pool.request(RunRequest(cubin, plan, outputs=True))
            wrong = outputs_match(answer.outputs, reference_outputs(reference, plan), plan) \
                if answer.status == "ok" else answer.detail or answer.status
            if wrong:
                raise SystemExit(f"{name} gives a wrong answer: {wrong}")
            builds[name] = (cubin, plan, flags)
        medians = {name: [] for name in builds}
        for _ in range(args.rounds):
            for name, (cubin, plan, _) in builds.items():
                answer = pool.request(RunRequest(cubin, plan, time=True, min_seconds=0.2))
                medians[name].append(summarize(answer.times_us).median)
    finally:
        pool.close()
    verdicts = {f"{name} vs baseline": faster(medians["baseline"], medians[name]) for name in builds
                if name != "baseline"}
    verdicts["joint vs public"] = faster(medians["public"], medians["joint"])
    (args.out / "controls_search.json").write_text(json.dumps({
        "device": pool.hello, "evaluations": args.evaluations, "seed": args.seed, "search_seconds": seconds,
        "settings": {n: {k: v for k, v in s.items()} for n, (_, s) in variants.items()},
        "flags": {n: b[2] for n, b in builds.items()}, "medians_us": medians,
        "verdicts": {k: vars(v) for k, v in verdicts.items()}}, indent=1, default=str))
    print(f"softmax 8192x4096 fp32, fast math off, {pool.hello.get('name')}; {args.evaluations} evaluations per "
          f"search (seed {args.seed}), {args.rounds} interleaved rounds")
    print("| build | settings | median us |\n|---|---|---|")
    for name, (_, settings) in variants.items():
        shown = " ".join(f"{k}={v}" for k, v in settings.items() if k != "nvcc.use_fast_math") or "(defaults)"
        print(f"| {name} | {shown} | {summarize(medians[name]).median:.2f} |")
    print("| comparison | speedup | p-value | significant |\n|---|---|---|---|")
    for name, verdict in verdicts.items():
        print(f"| {name} | {verdict.effect:.4f}x | {verdict.p_value:.2g} | {verdict.significant} |")


if __name__ == "__main__":
    main()
