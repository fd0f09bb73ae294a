"""A retune without a GPU must not make kernels slower (nvcc_evo.retune.search.speedsafe):
the auto backend writes no unit that asks for runtime, and the static
backend leaves out lower -O levels and register caps that buy no occupancy.
Real nvcc and ptxas; a machine without a GPU (CUDA_VISIBLE_DEVICES empty)."""
from __future__ import annotations

import json
import shutil
import subprocess

from conftest import DATA, evo_env, run_evo
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.measure import Measurement, static
from nvcc_evo.retune.outcome.choice import choose
from nvcc_evo.execute.goal import Goal, goal_for
from nvcc_evo.engine.evolve import Evaluation
from nvcc_evo.engine.space import Genome
from nvcc_evo.measure.static import REGISTER_WARPS, register_warps, with_register_warps
from nvcc_evo.retune.search.speedsafe import guard_for, guarded_goal

SEARCH = "    search {\n        ptxas.opt_level in 1..3\n        ptxas.register_usage_level in {0, 5, 10}\n    }\n"


def _no_gpu(cache):
    return evo_env(cache, CUDA_VISIBLE_DEVICES="")


def _project(folder, units: dict[str, str]):
    for name in units:
        shutil.copy(DATA / "cuda" / "spill.cu", folder / name)
    (folder / "nvcc-evo.acf").write_text("acf 1\n" + "".join(
        f'unit "{name}" {{\n{SEARCH}{extra}}}\n' for name, extra in units.items()))
    return folder / "nvcc-evo.acf"


def test_without_a_gpu_the_auto_backend_writes_no_unit_that_asks_for_speed(tmp_path, evo_cache):
    """It wrote `minimize runtime` units with registers and spills instead ("runtime cannot be measured
    here; tuning spills, registers instead"), and every later build used the choice."""
    acf = _project(tmp_path, {"fast.cu": "    tune {\n        minimize runtime, energy\n    }\n",
                              "timed.cu": '    tune {\n        minimize time\n    }\n    bench {\n'
                                          '        command "./run"\n        metric time "([0-9.]+) ms"\n    }\n',
                              "facts.cu": ""})
    done = run_evo("--retune", "--target", "sm_90", "--evaluations", "4", cwd=tmp_path, env=_no_gpu(evo_cache))
    assert done.returncode == 0, done.stderr
    file = parse_text(acf.read_text())
    assert [bool(u.targets) for u in file.units] == [False, False, True]      # only the unit of compiler facts
    assert '"fast.cu" [sm_90]: asks for runtime, energy, which only a measurement answers' in done.stderr
    assert "2 unit(s) not tuned here, they need a measurement:\n" in done.stderr
    assert "    nvcc-evo --retune 'fast.cu' on a machine with a GPU and PyCUDA (pip install 'nvcc-evo[gpu]')\n" \
        in done.stderr
    assert "    nvcc-evo --retune 'timed.cu' --backend command" in done.stderr
    assert done.stderr.rstrip().endswith("with --backend static: not their speed)")     # last: seen


def test_without_a_gpu_a_retune_of_only_units_that_ask_for_speed_fails(tmp_path, evo_cache):
    """Every stale unit asked for runtime: nothing was tuned, and the retune exited 0 as if all were done
    (a script or CI job could not tell it from a finished retune). The explicit `--backend pycuda` exits 3
    there ("needs PyCUDA and a GPU"): the auto backend says the same and exits 3 too."""
    acf = _project(tmp_path, {"fast.cu": "    tune {\n        minimize runtime\n    }\n"})
    done = run_evo("--retune", "--target", "sm_90", "--evaluations", "4", cwd=tmp_path, env=_no_gpu(evo_cache))
    assert done.returncode == 3, done.stderr
    assert "nothing retuned: every stale unit asks for a measurement, and no GPU answers here" in done.stderr
    assert "    nvcc-evo --retune 'fast.cu' on a machine with a GPU and PyCUDA" in done.stderr
    assert not parse_text(acf.read_text()).units[0].targets


def test_a_static_retune_leaves_out_lower_optimisation_levels(tmp_path, evo_cache):
    """On kernels/ and cuda-samples the static objective picked ptxas -O1 for most units (hgemm_wmma:
    142% more instructions); on spill.cu -O1 spills 48 bytes where -O3 spills 284."""
    acf = _project(tmp_path, {"spill.cu": "    tune {\n        minimize runtime\n    }\n"})
    done = run_evo("--retune", "--target", "sm_90", "--backend", "static", "--evaluations", "8", cwd=tmp_path,
                   env=_no_gpu(evo_cache))
    assert done.returncode == 0, done.stderr
    assert "speed-safe: lower -O levels left out; registers count only as the warps per SM they allow" in done.stderr
    text = acf.read_text()
    assert "ptxas.opt_level" not in text.split("target sm_90")[1] and "backend = static" in text
    stored = [json.loads(line) for line in (tmp_path / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    levels = {dict(map(tuple, r["genome"]))["ptxas.opt_level"] for r in stored}
    assert levels <= {None, 3} and len(stored) > 1


def test_asked_for_compiler_facts_alone_the_static_backend_may_lower_the_level(tmp_path, evo_cache):
    acf = _project(tmp_path, {"spill.cu": "    tune {\n        minimize spills, registers\n    }\n"})
    done = run_evo("--retune", "--target", "sm_90", "--evaluations", "8", cwd=tmp_path, env=_no_gpu(evo_cache))
    assert done.returncode == 0, done.stderr
    assert "speed-safe" not in done.stderr and "        ptxas.opt_level = 1\n" in acf.read_text()


def test_registers_count_by_the_warps_per_sm_they_allow():
    assert [register_warps(r, "sm_90") for r in (32, 38, 40, 64, 128, 255)] == [64, 48, 48, 32, 16, 8]
    assert register_warps(32, "sm_86") == 48 and register_warps(64, "sm_75") == 32
    assert register_warps(40, "sm_100a") == 48 and register_warps(40, "sm_52") is None


def _chosen(registers: dict[str, float], goal: Goal) -> str:
    """The choice among candidates named by their maxrregcount, with these registers and no spills."""
    genomes = {name: Genome((("ptxas.maxrregcount", None if name == "base" else int(name)),)) for name in registers}
    measured = {genomes[n]: with_register_warps(Measurement("ok", (("spills", 0.0), ("registers", r))), "sm_90")
                for n, r in registers.items()}
    evaluations = [Evaluation(g, goal.scores(dict(m.metrics))) for g, m in measured.items()]
    best = choose(evaluations, evaluations, evaluations[0], goal, measured, dict(measured[genomes["base"]].metrics))
    return next(name for name, genome in genomes.items() if genome == best.genome)


def test_a_register_cap_that_buys_no_occupancy_loses_to_the_baseline():
    unit = parse_text('acf 1\nunit "k.cu" {\n    tune {\n        minimize runtime\n    }\n}\n').units[0]
    plain = goal_for(unit.tune, ("registers", "spills", "instructions"))
    assert plain.minimize == ("spills", "registers")         # what a static search minimised before
    guarded = guarded_goal(plain, guard_for(unit.tune, "sm_90"))
    assert guarded.minimize == ("spills", REGISTER_WARPS) and REGISTER_WARPS in guarded.maximize
    assert _chosen({"base": 40, "38": 38}, plain) == "38"     # fewer registers, the same 48 warps per SM
    assert _chosen({"base": 40, "38": 38}, guarded) == "base"
    assert _chosen({"base": 40, "38": 38, "32": 32}, guarded) == "32"     # 64 warps per SM


TWO_KERNELS = r"""
__global__ void heavy(float *x, int n) {          // many registers: a cap helps its occupancy
    float a[48];
    for (int i = 0; i < 48; i++) a[i] = x[(threadIdx.x + i * 977) % n];
    float s = 0.0f;
    for (int r = 0; r < 8; r++)
        for (int i = 0; i < 48; i++) s += a[i] * a[(i * 7 + r) % 48];
    x[threadIdx.x] = s;
}
__global__ void light(float *x) { x[threadIdx.x] *= 2.0f; }
"""


def test_each_kernel_s_warps_are_measured_and_no_kernel_may_lose_any_to_the_unit_s_worst(tmp_path, real_nvcc):
    """A unit of several kernels: registers judged by its worst kernel alone let a cap with
    --override-directive-values win while it raised 8 of a real project's 16 kernels' registers (fewer warps
    per SM for each). Each kernel's warps come from the real compile; a candidate that costs any kernel warps
    against the baseline is infeasible, however much its worst kernel gains."""
    from nvcc_evo.measure import static
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    (tmp_path / "two.cu").write_text(TWO_KERNELS)
    result = compile_candidate(CompileJob(str(real_nvcc), ("-c", "two.cu"), str(tmp_path), "two.cu", "sm_90"))
    assert result.ok, result.stderr
    measured = dict(with_register_warps(static.measure(result, "sm_90", each_kernel=True), "sm_90").metrics)
    each = {k: v for k, v in measured.items() if k.startswith(static.KERNEL_WARPS)}
    assert len(each) == 2 and min(each.values()) == measured[REGISTER_WARPS], measured
    unit = parse_text('acf 1\nunit "k.cu" {\n    tune {\n        minimize runtime\n    }\n}\n').units[0]
    goal = guarded_goal(goal_for(unit.tune, ("registers", "spills", "instructions")), guard_for(unit.tune, "sm_90"))
    assert goal.kernels_keep_warps
    base = {"spills": 0.0, "registers": 210.0, REGISTER_WARPS: 8.0, "warps:heavy": 8.0, "warps:light": 40.0}
    worse_elsewhere = dict(base, registers=168.0, **{REGISTER_WARPS: 12.0, "warps:heavy": 12.0, "warps:light": 24.0})
    better_alone = dict(base, registers=168.0, **{REGISTER_WARPS: 12.0, "warps:heavy": 12.0})
    assert goal.violation(worse_elsewhere, base) == 1 and goal.violation(better_alone, base) == 0
    genomes = [Genome((("ptxas.maxrregcount", v),)) for v in (None, 168, 169)]
    evaluations = [Evaluation(g, goal.scores(m), goal.violation(m, base))
                   for g, m in zip(genomes, (base, worse_elsewhere, better_alone))]
    measurements = {g: Measurement("ok", tuple(m.items())) for g, m in zip(genomes, (base, worse_elsewhere, better_alone))}
    assert choose(evaluations, evaluations, evaluations[0], goal, measurements, base).genome == genomes[2]
    assert choose(evaluations[:2], evaluations[:2], evaluations[0], goal, measurements, base).genome == genomes[0]


def test_warps_per_sm_count_whole_resident_blocks_of_the_kernels_block(tmp_path):
    """At 96 registers a 384-thread block (__launch_bounds__(384, 1), read from the cubin) still fits once
    per SM: 12 warps, not the 20 that 96 registers allow blocks of one warp (the speed-safe static retune of
    CUTLASS's 51_hopper_gett said 'register_warps 12 -> 20'); at 200 (the override lifting the bounds'
    limit) no block fits: 0, a launch the driver refuses. A kernel with no bound is counted by warps, said."""
    from nvcc_evo.cubin.compile import CompileResult
    from nvcc_evo.cubin.sass import KernelFacts
    source = DATA / "cuda" / "warp_specialized.cu"
    warps = []
    for options in ((), ("-maxrregcount=96", "--override-directive-values"),
                    ("-maxrregcount=200", "--override-directive-values")):
        done = subprocess.run(["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas",
                               ",".join(("-v",) + options), str(source), "-o", "k.cubin"], cwd=tmp_path,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        result = CompileResult("ok", 1.0, done.stderr, (tmp_path / "k.cubin").read_bytes())
        metrics = dict(static.measure(result, "sm_90a", each_kernel=True).metrics)
        warps.append((metrics["warps:_Z9ws_kernelPKfPfi"], metrics[REGISTER_WARPS]))
    assert warps == [(12, 12), (12, 12), (0, 0)]
    assert static.unknown_blocks(result, "sm_90a").startswith("block size unknown for _Z16reference_kernelPKfPfi")
    assert static.unknown_blocks(result, "sm_90a", {"_Z16reference_kernelPKfPfi": (256, 0)}) == ""
    # the bench's block where it launches the kernel, else the bound, else by warps
    kernel = KernelFacts("k", registers=96, threads=384)
    assert [static.kernel_warps(kernel, "sm_90", launch) for launch in (None, (256, 0), (256, 200 * 1024))] == \
        [12, 16, 8]
    assert static.kernel_warps(KernelFacts("k", registers=96), "sm_90") == register_warps(96, "sm_90") == 20


def test_the_front_printed_is_the_one_the_choice_was_made_from():
    """The engine's front can hold a twin of the chosen point (the same scores, more knobs moved) and leave out
    the baseline the choice was made among: the summary listed a point that was not the one chosen."""
    from nvcc_evo.retune.outcome.choice import front_chosen_from
    unit = parse_text('acf 1\nunit "k.cu" {\n    tune {\n        minimize spills, registers\n    }\n}\n').units[0]
    goal = goal_for(unit.tune, ("registers", "spills"))
    points = {"base": (0.0, 40.0), "32": (0.0, 32.0), "32 twin": (0.0, 32.0), "24": (8.0, 24.0), "48": (0.0, 48.0)}
    genomes = {n: Genome((("ptxas.maxrregcount", None if n == "base" else int(n.split()[0])),
                          ("ptxas.dlcm", "cg" if "twin" in n else None))) for n in points}
    measured = {genomes[n]: Measurement("ok", (("spills", s), ("registers", r))) for n, (s, r) in points.items()}
    evaluations = {n: Evaluation(genomes[n], goal.scores(dict(measured[genomes[n]].metrics))) for n in points}
    engine_front = [evaluations["32 twin"], evaluations["24"]]
    best = choose(list(evaluations.values()), engine_front, evaluations["base"], goal, measured, {})
    assert best.genome == genomes["32"]
    shown = front_chosen_from(list(evaluations.values()), engine_front, evaluations["base"], goal, measured, {},
                              best.genome)
    assert [e.genome for e in shown] == [genomes["32"], genomes["24"]]      # the chosen on its row; base dominated
    alone = front_chosen_from([evaluations["base"], evaluations["24"]], [evaluations["24"]], evaluations["base"],
                              goal, measured, {}, genomes["base"])
    assert [e.genome for e in alone] == [genomes["base"], genomes["24"]]    # the baseline kept, on the front
