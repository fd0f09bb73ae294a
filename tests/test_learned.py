"""Learn what fails (issue 26, point 3): a launch the driver refuses (the
refusal cubin.occupancy.launch_problem makes, the real function) teaches the
engine a constraint over the defines of the bench's grid and block, and
genomes known to break it are not proposed again; the avoided count is kept."""
from __future__ import annotations

import re

import numpy as np

from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.cubin.compile import SharedOverflow, overflow_of
from nvcc_evo.cubin.occupancy import LaunchRefusal, launch_problem
from nvcc_evo.engine.evolve import Budget, Engine, Evaluation, run_search
from nvcc_evo.execute.learned import LaunchLimits
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace
from nvcc_evo.measure import Wrong, failed
from nvcc_evo.status import Status

WRONG = Status.WRONG_ANSWER

BENCH = parse_text('''acf 1
unit "k.cu" {
    bench {
        kernel tiled
        let N = 4096
        arg n : i32 = N
        arg y : f32[N] = output
        grid (cdiv(N, BX * BY))
        block (BX, BY)
        shared BX * BY * 4 * STAGES
        check y rtol 1e-5
    }
}
''').units[0].bench
H200 = {"threads": 1024, "registers": 65536, "shared": 232448, "dims": (1024, 1024, 64)}
SPACE = SearchSpace((Dimension("define.BX", (8, 16, 32, 64, 128), 8), Dimension("define.BY", (1, 2, 4, 8, 16, 32), 1),
                     Dimension("define.STAGES", (1, 2, 3, 4), 1), Dimension("define.UNROLL", (1, 2, 4, 8), 1)))


def _defines(genome: Genome) -> dict:
    return {k.split(".", 1)[1]: v for k, v in genome.items}


def _registers(defines: dict) -> int:
    return 40 + 24 * defines["UNROLL"]          # 64..232 registers a thread


def _launch(genome: Genome) -> LaunchRefusal | None:
    """What the measuring process says of this genome's launch (the real rule)."""
    defines = _defines(genome)
    plan = plan_bench(BENCH, defines)
    registers = _registers(defines)
    kernel = {"threads": min(1024, H200["registers"] // registers // 32 * 32), "registers": registers,
              "shared": 1024 * defines["STAGES"]}
    return launch_problem(plan.block, plan.shared, kernel, H200)


def _search(learn: bool, seed: int = 3):
    details: dict = {}
    asked: list = []
    limits = LaunchLimits(BENCH, _defines, lambda g: details.get(g)) if learn else None

    def evaluate(genomes):
        evaluations = []
        for g in genomes:
            asked.append((g, limits.threads if limits else None))   # what was known when it was proposed
            details[g] = _launch(g)
            speed = -float(_defines(g)["BX"] * _defines(g)["BY"])        # bigger blocks are better, to a point
            evaluations.append(Evaluation(g, (speed,)) if not details[g] else
                               Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
        return evaluations

    engine = Engine(SPACE, np.random.default_rng(seed), population=10, seeds=[SPACE.baseline()], avoid=limits)
    run_search(engine, evaluate, Budget(evaluations=150))
    refused = [g for g, said in details.items() if said]
    engine.asked = asked
    return engine, limits, refused


def test_the_refusal_texts_are_the_ones_learned():
    g = SPACE.genome({"define.BX": 128, "define.BY": 16})       # 2048 threads
    said = _launch(g)
    limits = LaunchLimits(BENCH, _defines, lambda genome: said)
    limits.learn(Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
    assert limits.threads == 2048 and limits.said == ["blocks of 2048 threads or more"]
    assert limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 32}))          # 2048 too
    assert limits.forbids(SPACE.genome({"define.BX": 128, "define.BY": 32}))         # 4096
    assert not limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 16}))      # 1024: fine


def test_registers_per_block_are_learned_for_those_defines_and_a_register_cap_lifts_them():
    g = SPACE.genome({"define.BX": 64, "define.BY": 16, "define.UNROLL": 8})          # 1024 threads, 232 registers
    said = _launch(g)
    assert said is not None and said.limit == "registers" and "registers per thread" in str(said)
    limits = LaunchLimits(BENCH, _defines, lambda genome: said)
    limits.learn(Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
    assert limits.forbids(g)
    capped = Genome(g.items + (("ptxas.maxrregcount", 64),))
    assert not limits.forbids(capped)                       # 64 registers fit 1024 threads
    assert not limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 16, "define.UNROLL": 1}))


def test_a_search_that_learns_proposes_fewer_refused_launches_and_none_it_knows_of():
    learned, blind, avoided = 0, 0, 0
    for seed in range(5):
        engine, limits, refused = _search(learn=True, seed=seed)
        learned, blind, avoided = learned + len(refused), blind + len(_search(learn=False, seed=seed)[2]), \
            avoided + len(engine.avoided)
        # what it learned holds: no point it measured fine is forbidden (no false constraint) ...
        assert all(not limits.forbids(g) or g in refused for g in engine.seen)
        # ... and once a thread limit was learned no block that large was proposed
        blocks = [(plan_bench(BENCH, _defines(g)).block, known) for g, known in engine.asked]
        assert all(block[0] * block[1] < known for block, known in blocks)
        assert limits.threads < float("inf")
    assert avoided > 50                                  # counted: the proposals it did not make
    assert learned < 0.8 * blind, (learned, blind)


TILED = '''
#ifndef BM
#define BM 32
#endif
#ifndef BK
#define BK 16
#endif
#ifndef STAGES
#define STAGES 1
#endif
extern "C" __global__ void tiled(const float* x, float* y) {
    __shared__ float tile[STAGES * BM * BK];
    for (int i = threadIdx.x; i < STAGES * BM * BK; i += blockDim.x) tile[i] = x[i];
    __syncthreads();
    y[threadIdx.x] = tile[(threadIdx.x * 7) % (STAGES * BM * BK)];
}
'''
TILED_ACF = '''acf 1
unit "tiled.cu" {
    search {
        define.BM in {32, 64, 128, 256}
        define.BK in {16, 32, 64}
        define.STAGES in {1, 2, 3, 4}
        ptxas.opt_level in 1..3
    }
}
'''
def _only_defines(genome: Genome) -> dict:
    return {k.split(".", 1)[1]: v for k, v in genome.items if k.startswith("define.")}


SHARED_SPACE = SearchSpace((Dimension("define.BM", (32, 64, 128, 256), 32), Dimension("define.BK", (16, 32, 64), 16),
                            Dimension("define.STAGES", (1, 2, 3, 4), 1), Dimension("ptxas.opt_level", (1, 2, 3), 3)))


def _compiled(tmp_path, real_nvcc, genome: Genome) -> tuple[str, str]:
    """(status, detail) of a real compile of TILED with the genome's defines and -O."""
    import subprocess
    (tmp_path / "tiled.cu").write_text(TILED)
    d = _defines(genome)
    flags = [f"-D{name}={d[name]}" for name in ("BM", "BK", "STAGES")] + [f"-Xptxas=-O{d['opt_level']}"]
    done = subprocess.run([str(real_nvcc), "-cubin", "-arch=sm_90", *flags, "tiled.cu", "-o", "t.cubin"],
                          cwd=tmp_path, capture_output=True, text=True)
    return ("ok", "") if done.returncode == 0 else ("compile-error", done.stderr)


def test_a_compile_refused_for_static_shared_memory_teaches_the_same_and_larger_defines(tmp_path, real_nvcc):
    """ptxas's own words (a real compile): 128 x 64 x 2 floats is 64 KiB of
    static shared memory, over its 48 KiB. Any -O, and any larger tile or more
    stages, fail too and are forbidden; a smaller tile is not."""
    from nvcc_evo.execute.learned import SharedData
    refused = SHARED_SPACE.genome({"define.BM": 128, "define.BK": 64, "define.STAGES": 2, "ptxas.opt_level": 3})
    status, detail = _compiled(tmp_path, real_nvcc, refused)
    assert status == "compile-error" and overflow_of(detail) == SharedOverflow(65536, 49152), detail
    learner = SharedData(_only_defines, lambda genome: overflow_of(detail))
    learner.learn(Evaluation(refused, (float("inf"),), float("inf"), status))
    larger = [{"define.BM": 128, "define.BK": 64, "define.STAGES": 2, "ptxas.opt_level": 1},
              {"define.BM": 256, "define.BK": 64, "define.STAGES": 2, "ptxas.opt_level": 3},
              {"define.BM": 128, "define.BK": 64, "define.STAGES": 4, "ptxas.opt_level": 2}]
    for knobs_of in larger:
        genome = SHARED_SPACE.genome(knobs_of)
        assert learner.forbids(genome) and _compiled(tmp_path, real_nvcc, genome)[0] == "compile-error", knobs_of
    smaller = SHARED_SPACE.genome({"define.BM": 128, "define.BK": 32, "define.STAGES": 2, "ptxas.opt_level": 3})
    assert not learner.forbids(smaller) and _compiled(tmp_path, real_nvcc, smaller)[0] == "ok"
    assert "65536 bytes" in learner.said[0] and "49152" in learner.said[0]


def test_ptxas_refusing_static_shared_memory_is_a_fact_of_the_compile_kept_by_the_store(tmp_path, real_nvcc):
    """The compile's result says it (cubin.compile reads ptxas's words where they arrive), the
    measurement and the results store keep it, and the learner reads that fact: it searched the
    detail's words before. A store written before the field reads ptxas's words from the detail."""
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.execute.goal import Goal
    from nvcc_evo.execute.learned import shared_for
    from nvcc_evo.execute.measured import Measured
    from nvcc_evo.execute.store import Context, StoredResult, Store
    from nvcc_evo.measure import static
    (tmp_path / "tiled.cu").write_text(TILED)
    flags = ("-DBM=128", "-DBK=64", "-DSTAGES=2")
    result = compile_candidate(CompileJob(str(real_nvcc), ("-c", "tiled.cu"), str(tmp_path), "tiled.cu", "sm_90",
                                          flags))
    assert result.status == "compile-error" and result.overflow == SharedOverflow(65536, 49152), result.stderr
    refused = SHARED_SPACE.genome({"define.BM": 128, "define.BK": 64, "define.STAGES": 2})
    worded = SHARED_SPACE.genome({"define.BM": 32, "define.BK": 16, "define.STAGES": 1})
    store = Store(tmp_path / "results.jsonl")
    context = Context("13.0.88", "f" * 16, "sm_90", "cpu", "static", '"tiled.cu"', "b" * 16)
    store.append(StoredResult(refused, (), static.measure(result, "sm_90"), "", context))
    store.append(StoredResult(worded, (), failed("compile-error", "echo 'uses too much shared data (9 bytes, "
                                                                  "8 max)'"), "", context))
    measured = Measured(Goal(("runtime",)), context)
    measured.resume(store.read())
    assert [measured.overflow(g) for g in measured] == [SharedOverflow(65536, 49152), None]
    learner = shared_for(tmp_path / "tiled.cu", SHARED_SPACE, measured)
    for genome in (refused, worded):
        learner.learn(Evaluation(genome, (float("inf"),), float("inf"), "compile-error"))
    assert learner.refused == [learner._key(refused)] and "65536 bytes" in learner.said[0]
    old = Store(tmp_path / "old.jsonl")
    old.path.write_text(re.sub(r', "overflow": (null|\[\d+, \d+\])', "", store.path.read_text()))
    assert [r.measurement.overflow for r in old.read()] == [SharedOverflow(65536, 49152), SharedOverflow(9, 8)]


def test_a_compile_that_contradicts_larger_defines_failing_leaves_only_the_same_defines_forbidden():
    """Where more of a define needs less shared memory (a tile divided by it),
    a genome with defines as large as a refused one's that compiled ends the
    larger-defines rule; the same defines stay forbidden."""
    from nvcc_evo.execute.learned import SharedData
    said = "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)"
    refused = SHARED_SPACE.genome({"define.BM": 64, "define.BK": 32, "define.STAGES": 2})
    learner = SharedData(_only_defines, lambda genome: overflow_of(said))
    learner.learn(Evaluation(refused, (float("inf"),), float("inf"), "compile-error"))
    larger = SHARED_SPACE.genome({"define.BM": 128, "define.BK": 32, "define.STAGES": 2})
    assert learner.forbids(larger)
    learner.learn(Evaluation(larger, (1.0,)))                      # it compiled after all
    assert not learner.forbids(SHARED_SPACE.genome({"define.BM": 256, "define.BK": 32, "define.STAGES": 2}))
    assert learner.forbids(SHARED_SPACE.genome({"define.BM": 64, "define.BK": 32, "define.STAGES": 2,
                                                "ptxas.opt_level": 1}))
    assert not learner.growing and "only the same defines" in learner.said[-1]


CHOSEN = '''
#ifndef ALGO
#define ALGO 0
#endif
extern "C" __global__ void chosen(const float* x, float* y) {
#if ALGO == 2
    __shared__ float staged[20480];            /* 80 KiB: over ptxas's 48 */
#else
    __shared__ float staged[1024];
#endif
    staged[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = staged[(threadIdx.x * 7) % 1024];
}
'''


def test_a_define_declared_unordered_is_a_choice_the_refused_compile_teaches_only_itself(tmp_path, real_nvcc):
    """`define.ALGO in {0, 1, 2, 3} unordered`: ALGO names an algorithm, not a size, and ptxas
    refuses ALGO=2's shared memory (a real compile). The learner built from the ACF forbids ALGO=2
    at any -O, not ALGO=3, which compiles; the same space without `unordered` forbids ALGO=3 too
    (the larger-defines rule), a compile that would have passed."""
    import subprocess
    from nvcc_evo.engine.space import build_space
    from nvcc_evo.execute.goal import Goal
    from nvcc_evo.execute.learned import shared_for
    from nvcc_evo.execute.measured import Measured
    from nvcc_evo.execute.store import Context
    (tmp_path / "chosen.cu").write_text(CHOSEN)

    def compiles(algo: int) -> tuple[bool, str]:
        done = subprocess.run([str(real_nvcc), "-cubin", "-arch=sm_90", f"-DALGO={algo}", "chosen.cu", "-o",
                               "c.cubin"], cwd=tmp_path, capture_output=True, text=True)
        return done.returncode == 0, done.stderr

    ok, said = compiles(2)
    assert not ok and overflow_of(said) is not None, said
    learners = {}
    for declared in (" unordered", ""):
        text = (f'acf 1\nunit "chosen.cu" {{\n    search {{\n        define.ALGO in {{0, 1, 2, 3}}{declared}\n'
                f'        ptxas.opt_level in 1..3\n    }}\n}}\n')
        (unit,) = parse_text(text, "nvcc-evo.acf").units
        space = build_space(unit, tmp_path / "chosen.cu")
        measured = Measured(Goal(("runtime",)), Context("13.0.88", "f" * 16, "sm_90", "cpu", "static", "u", "b"))
        learner = shared_for(tmp_path / "chosen.cu", space, measured)
        learner.overflow_of = lambda genome: overflow_of(said)
        learner.learn(Evaluation(space.genome({"define.ALGO": 2, "ptxas.opt_level": 3}), (float("inf"),),
                                 float("inf"), "compile-error"))
        learners[declared] = (learner, space)
    learner, space = learners[" unordered"]
    assert learner.forbids(space.genome({"define.ALGO": 2, "ptxas.opt_level": 1}))
    assert not learner.forbids(space.genome({"define.ALGO": 3, "ptxas.opt_level": 3})) and compiles(3)[0]
    learner, space = learners[""]
    assert learner.forbids(space.genome({"define.ALGO": 3, "ptxas.opt_level": 3}))


def _shared_search(learn: bool, said: str, seed: int):
    """A search over SHARED_SPACE whose compiles are refused as ptxas refuses
    TILED's (`said`: its words, from a real compile): over 48 KiB of floats."""
    from nvcc_evo.execute.learned import SharedData
    details: dict = {}
    learner = SharedData(_only_defines, lambda g: overflow_of(details.get(g, ""))) if learn else None
    generations: list = []

    def evaluate(genomes):
        generations.append([(g, list(learner.refused) if learner else []) for g in genomes])
        evaluations = []
        for g in genomes:
            d = _only_defines(g)
            if 4 * d["BM"] * d["BK"] * d["STAGES"] > 0xc000:
                details[g] = said
                evaluations.append(Evaluation(g, (float("inf"),), float("inf"), "compile-error"))
            else:
                evaluations.append(Evaluation(g, (-float(d["BM"] * d["BK"] * d["STAGES"]),)))   # bigger is faster
        return evaluations

    engine = Engine(SHARED_SPACE, np.random.default_rng(seed), population=8, seeds=[SHARED_SPACE.baseline()],
                    avoid=learner)
    run_search(engine, evaluate, Budget(evaluations=60))
    refused = [g for g in details]
    return engine, generations, refused


def test_a_search_that_learns_compiles_fewer_tiles_ptxas_refuses_and_none_larger_than_one_it_knows(
        tmp_path, real_nvcc):
    from nvcc_evo.execute.learned import _covers
    status, said = _compiled(tmp_path, real_nvcc, SHARED_SPACE.genome({"define.BM": 256, "define.BK": 64,
                                                                        "define.STAGES": 4}))
    assert status == "compile-error" and "too much shared data" in said
    learned = blind = avoided = 0
    for seed in range(4):
        engine, generations, refused = _shared_search(True, said, seed)
        for generation in generations:        # each proposal: none as large as a refusal known when it was made
            for genome, known in generation:
                assert not any(_covers(((), _only_defines(genome)), r, frozenset()) for r in known), genome
        learned, avoided = learned + len(refused), avoided + len(engine.avoided)
        blind += len(_shared_search(False, said, seed)[2])
    assert avoided > 10
    assert learned < 0.7 * blind, (learned, blind)


def test_a_retune_says_what_refused_compiles_taught(tmp_path, evo_cache):
    """A static retune of TILED (real nvcc and ptxas) ends saying how many
    proposals it did not build because ptxas refused their tiles' shared memory."""
    from tests.conftest import evo_env, run_evo
    (tmp_path / "tiled.cu").write_text(TILED)
    (tmp_path / "nvcc-evo.acf").write_text(TILED_ACF)
    done = run_evo("--retune", "--backend", "static", "tiled.cu", "--all", "--evaluations", "30", "--seed", "2",
                   "--population", "6", cwd=tmp_path, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    assert re.search(r"\d+ proposal\(s\) known to fail: \d+ compile\(s\) refused for static shared memory "
                     r"\(e\.g\. \d+ bytes with BM=", done.stdout), done.stdout


# ---------------------------------------------------------------- wrong outputs
SOFTMAX = SearchSpace((Dimension("define.BLOCK", (128, 256, 512, 1024), 256), Dimension("define.VEC", (1, 2, 4), 1),
                       Dimension("define.ITEMS", (1, 2, 4, 8), 1), Dimension("ptxas.dlcm", (None, "cg", "cs"), None),
                       Dimension("ptxas.opt_level", (None, 1, 2), None),
                       Dimension("nvcc.use_fast_math", (False, True), False)))
SOFTMAX_EXACT = SearchSpace(SOFTMAX.dimensions[:-1])          # kernels/softmax.cu's space: no fast math


def _check(spoil) -> Wrong | None:
    """What the real check finds in an output that `spoil` made of the reference, as the GPU backend asks it."""
    from nvcc_evo.measure.check import outputs_match
    plan = plan_bench(BENCH, {"BX": 32, "BY": 1, "STAGES": 1})
    reference = np.ones(4096, np.float32)
    got = reference.copy()
    spoil(got)
    found = outputs_match({"y": got}, {"y": reference}, plan)
    return found.kind if found is not None else None


def _unwritten() -> Wrong | None:
    """Elements never written (NaN-filled: the worker poisons outputs before the launch)."""
    return _check(lambda got: got.__setitem__(slice(2048, None), np.nan))


def _point(block: int, **knobs) -> Genome:
    return SOFTMAX.genome({"define.BLOCK": block, "define.VEC": 1, "define.ITEMS": 4, **knobs})


def test_a_wrong_output_forbids_its_defines_under_knobs_that_cannot_change_results():
    from nvcc_evo.execute.learned import WrongAnswers
    found = {"rounding": _check(lambda got: got.__setitem__(slice(0, 3), 1.001)), "unwritten": _unwritten()}
    assert found == {"rounding": Wrong.OUTSIDE, "unwritten": Wrong.UNWRITTEN}
    wrong = _point(256)
    for kind, said in found.items():
        learner = WrongAnswers(_only_defines, lambda genome: said)
        learner.learn(Evaluation(wrong, (float("inf"),), float("inf"), "wrong-answer"))
        assert learner.forbids(_point(256, **{"ptxas.dlcm": "cg"}))      # a cache modifier changes no result
        assert not learner.forbids(_point(512))                          # other defines
        # a tolerance missed may be -O3's rounding, so -O1 is tried; an unwritten output is not rounding
        assert learner.forbids(_point(256, **{"ptxas.opt_level": 1})) == (kind == "unwritten"), kind
        # fast math computes other values (a NaN could be its own): still tried
        assert not learner.forbids(_point(256, **{"ptxas.opt_level": 1, "nvcc.use_fast_math": True}))


def test_what_a_wrong_output_teaches_is_the_checks_fact_kept_by_the_store_not_its_words(tmp_path):
    """The learner reads the measurement's `wrong` (measure.check's finding), through the results store as a
    resumed search does; it read the detail's words before, so a bench command's output that printed them
    taught 'unwritten' and an unwritten output told in other words taught nothing."""
    from nvcc_evo.execute.goal import Goal
    from nvcc_evo.execute.learned import wrong_for
    from nvcc_evo.execute.measured import Measured
    from nvcc_evo.execute.store import Context, StoredResult, Store
    (tmp_path / "softmax.cu").write_text("#define BLOCK 256\n")
    echoed, unwritten = _point(256), _point(128)
    store = Store(tmp_path / "results.jsonl")
    context = Context("13.0.88", "f" * 16, "sm_90", "H200", "pycuda", '"softmax.cu"', "b" * 16)
    store.append(StoredResult(echoed, (), failed(WRONG, "check failed: y: 7 NaN or unwritten elements (the "
                                                        "command's own words)"), "", context))
    store.append(StoredResult(unwritten, (), failed(WRONG, "y: wrong", wrong=_unwritten()), "", context))
    measured = Measured(Goal(("runtime",)), context)
    measured.resume(store.read())
    assert [measured.wrong(g) for g in measured] == [None, Wrong.UNWRITTEN]
    learner = wrong_for(tmp_path / "softmax.cu", SOFTMAX_EXACT, measured)
    for genome in (echoed, unwritten):
        learner.learn(Evaluation(genome, (float("inf"),), float("inf"), WRONG))
    assert learner.broken == [_only_defines(unwritten)]


def _softmax_search(learn: bool, seed: int):
    """A search whose outputs are unwritten where BLOCK * VEC * ITEMS does not cover a 4096-column row (as
    kernels/softmax.cu's are), faster for more work per thread."""
    from nvcc_evo.execute.learned import WrongAnswers
    details: dict = {}
    learner = WrongAnswers(_only_defines, details.get) if learn else None
    generations: list = []

    def evaluate(genomes):
        generations.append([(g, list(learner.broken) if learner else []) for g in genomes])
        evaluations = []
        for g in genomes:
            d = _only_defines(g)
            if d["BLOCK"] * d["VEC"] * d["ITEMS"] < 4096:
                details[g] = _unwritten()
                evaluations.append(Evaluation(g, (float("inf"),), float("inf"), "wrong-answer"))
            else:
                evaluations.append(Evaluation(g, (1.0 / (d["VEC"] * d["ITEMS"]),)))
        return evaluations

    engine = Engine(SOFTMAX_EXACT, np.random.default_rng(seed), population=12, seeds=[SOFTMAX_EXACT.baseline()],
                    avoid=learner)
    run_search(engine, evaluate, Budget(evaluations=60))
    return engine, generations, details


def test_a_search_that_learns_wrong_outputs_runs_fewer_of_them_and_none_of_defines_it_knows_wrong():
    from nvcc_evo.execute.learned import _covers
    learned = blind = avoided = 0
    for seed in range(4):
        engine, generations, details = _softmax_search(True, seed)
        for generation in generations:        # no proposal, exact math, with defines known broken when it was made
            for genome, broken in generation:
                defines = _only_defines(genome)
                assert not any(_covers(((), b), ((), defines), frozenset()) for b in broken), genome
        learned, avoided = learned + len(details), avoided + len(engine.avoided)
        blind += len(_softmax_search(False, seed)[2])
    assert avoided > 10
    assert learned < 0.75 * blind, (learned, blind)     # 54 against 86 when written


class Compiling:
    """An evaluate with start/finish, as execute.evaluate.Evaluator's, whose compiles ptxas refuses over 48 KiB
    of static shared memory (SHARED_SPACE's floats); with `early`, it says a started batch's refusals before
    that batch is measured (Evaluator.refused), as the overlap asks it to before breeding the next batch."""

    def __init__(self, said: str, early: bool):
        self.said, self.details, self.compiled, self.early = said, {}, [], early

    def refused(self, started):
        return [self._evaluation(g) for g in started if self._evaluation(g).status != "ok"] if self.early else []

    def _evaluation(self, g: Genome) -> Evaluation:
        d = _only_defines(g)
        if 4 * d["BM"] * d["BK"] * d["STAGES"] > 0xc000:
            self.details[g] = self.said
            return Evaluation(g, (float("inf"),), float("inf"), "compile-error")
        return Evaluation(g, (-float(d["BM"] * d["BK"] * d["STAGES"]),))

    def start(self, batch):
        self.compiled += batch
        return list(batch)

    def finish(self, started, begin, end):
        return [self._evaluation(g) for g in started[begin:end]]


def test_with_overlap_a_refused_compile_teaches_the_batch_asked_next_not_the_one_after():
    """Compiling a batch ahead, the engine breeds it before the batch it measures is told: without an early
    word of that batch's refused compiles, what they teach reaches proposals a generation late."""
    from nvcc_evo.execute.learned import SharedData
    said = "ptxas error   : Entry function 'k' uses too much shared data (0x10200 bytes, 0xc000 max)"
    refused = {}
    for early in (False, True):
        refused[early] = 0
        for seed in range(6):
            evaluate = Compiling(said, early)
            learner = SharedData(_only_defines, lambda g, e=evaluate: overflow_of(e.details.get(g, "")))
            engine = Engine(SHARED_SPACE, np.random.default_rng(seed), population=8, seeds=[SHARED_SPACE.baseline()],
                            avoid=learner)
            run_search(engine, evaluate, Budget(evaluations=60), overlap=True)
            refused[early] += sum(1 for g in evaluate.compiled if evaluate._evaluation(g).status != "ok")
            assert all(learner.refused.count(r) == 1 for r in learner.refused)     # each learned once, early or told
    assert refused[True] < 0.85 * refused[False], refused       # 53 against 70 when written


def test_a_refused_launch_is_a_fact_the_store_keeps_and_a_resumed_search_learns_from(tmp_path):
    """The refusal crosses the results store as its fields (no English read back): a search resumed from the
    store learns what the measuring one did."""
    from nvcc_evo.execute.store import Context, StoredResult, Store
    from nvcc_evo.measure import failed
    g = SPACE.genome({"define.BX": 128, "define.BY": 16})       # 2048 threads
    refusal = _launch(g)
    assert refusal is not None and refusal.limit == "threads" and refusal.threads == 2048
    store = Store(tmp_path / "results.jsonl")
    context = Context("13.0.88", "f" * 16, "sm_90", "H200", "pycuda", '"k.cu"', "b" * 16)
    store.append(StoredResult(g, (), failed("launch-refused", str(refusal), refusal), "", context))
    [back] = store.read()
    assert back.measurement.refusal == refusal and back.measurement.detail == str(refusal)
    limits = LaunchLimits(BENCH, _defines, lambda genome: back.measurement.refusal)
    limits.learn(Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
    assert limits.threads == 2048 and limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 32}))
