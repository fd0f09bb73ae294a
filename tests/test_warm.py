"""Warm starts from what the project measured before (issue 40, execute.warm): the same unit in another
context, and similar units of the same project (largely the same knobs, the same source parameters), read
from real results stores, mapped into this search's space; never from another user's store, a link, a store
outside the project or a unit the ACF does not have. End to end with real nvcc and the static backend."""
from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import DATA, ROOT, evo_env, run_evo
from nvcc_evo.acf.resolve import load
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.cubin.mix import find_disassembler
from nvcc_evo.cubin.sass import kernel_facts, with_mix
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace, build_space
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.store import Context, StoredResult, Store
from nvcc_evo.execute.warm import ProjectStores, project_stores, unlike_kernels, unlike_search, warm_starts
from nvcc_evo.measure import Measurement
from nvcc_evo.status import Status

STRANGER = 65534


def _kernel_spaces() -> dict[str, SearchSpace]:
    """The repository's kernels' search spaces, as a retune builds them (their ACF, their sources)."""
    acf = ROOT / "kernels" / "nvcc-evo.acf"
    return {unit.globs[0]: build_space(unit, acf.parent / unit.globs[0]) for unit in load(acf).units}


def test_the_kernels_alike_are_those_of_one_source_tuned_per_shape():
    """Of the repository's ten kernels, three pairs: the flash attentions, the WMMA GEMMs (one unit per M
    class), the block reductions of one header; a block size alone shared, or pinned shapes, are not enough."""
    spaces = _kernel_spaces()
    alike = {(mine, theirs) for mine in spaces for theirs in spaces
             if mine != theirs and unlike_search(spaces[mine], [spaces[theirs].baseline()]) == ""}
    pairs = {("flash_attention.cu", "flash_attention_d64.cu"), ("hgemm_wmma.cu", "hgemm_decode.cu"),
             ("softmax.cu", "rmsnorm.cu")}
    assert alike == pairs | {(b, a) for a, b in pairs}
    assert unlike_search(spaces["scale.cu"], [spaces["rmsnorm.cu"].baseline()]) == "2 of 4 knobs shared"
    assert unlike_search(spaces["decode_attention.cu"], [spaces["rmsnorm.cu"].baseline()]) == "3 of 7 knobs shared"


def test_compiler_knobs_alone_or_values_outside_the_domains_are_no_likeness():
    ptxas = SearchSpace((Dimension("ptxas.maxrregcount", (None, 32, 64), None),
                         Dimension("ptxas.opt_level", (1, 3), 3)))
    assert unlike_search(ptxas, [ptxas.baseline()]) == "no source parameter searched by both"
    blocks = SearchSpace((Dimension("define.BLOCK", (128, 256), 128), Dimension("define.VEC", (1, 2), 1),
                          Dimension("ptxas.opt_level", (1, 3), 3), Dimension("ptxas.dlcm", (None, "cg"), None)))
    unrolled = Genome((("define.BLOCK", 128), ("define.UNROLL", 2), ("ptxas.opt_level", 3), ("ptxas.dlcm", None)))
    assert unlike_search(blocks, [unrolled]) == "1 of 2 source parameters shared"
    mine = SearchSpace((Dimension("define.TILE", (8, 16), 8), Dimension("ptxas.opt_level", (1, 3), 3)))
    theirs = [Genome((("define.TILE", t), ("ptxas.opt_level", 2))) for t in (32, 64, 8)]
    assert unlike_search(mine, theirs) == "5 of 6 values outside this search's domains"


CONTEXT = Context("13.0", "fp-b", "sm_90", "cpu", "static", '"b.cu"', "build-b")
SPACE = SearchSpace((Dimension("define.TERMS", (16, 24, 32), 24),
                     Dimension("ptxas.maxrregcount", (None, 32, 64), None)))
GOAL = Goal(("registers",))


def _records(unit: str, arch: str = "sm_90", backend: str = "static") -> list[StoredResult]:
    """A search of `unit`: its baseline first (48 registers), then better and worse points, one compile
    error, one value (maxrregcount 255) outside SPACE's domain."""
    context = Context("13.0", f"fp-{unit}", arch, "cpu", backend, unit, f"build-{unit}")
    points = [((24, None), 48.0), ((16, 32), 32.0), ((16, 255), 30.0), ((32, 64), 64.0), ((32, 32), None)]
    return [StoredResult(Genome((("define.TERMS", terms), ("ptxas.maxrregcount", cap))), (),
                   Measurement(Status.OK, (("registers", registers),)) if registers else
                   Measurement(Status.COMPILE_ERROR, detail="ptxas error"), "", context)
            for (terms, cap), registers in points]


def _store(path: Path, records: list[StoredResult]) -> Path:
    store = Store(path)
    for record in records:
        store.append(record)
    return path


def test_similar_units_records_are_mapped_into_this_space_and_ranked_on_their_own(tmp_path):
    own = Store(_store(tmp_path / ".nvcc-evo" / "results.jsonl", _records('"a.cu"') + _records('"b.cu"', "sm_80")))
    said: list[str] = []
    found = warm_starts(own, ProjectStores(frozenset({'"a.cu"', '"b.cu"'})), CONTEXT, GOAL, SPACE, said.append)
    assert [group.origin for group in found] == ["this unit (sm_80, another source, another build)",
                                                 '"a.cu" (same knobs, same source parameters)']
    similar = {e.genome.settings().get("ptxas.maxrregcount"): e for e in found[1].evaluations
               if e.genome.value("define.TERMS") == 16}
    # (16, 255) dropped its cap (255 is outside this space: the baseline, no cap) and stays apart from (16, 32)
    assert similar[None].objectives == (30.0,) and similar[32].objectives == (32.0,)
    failed = [e for e in found[1].evaluations if not e.feasible]
    assert [e.status for e in failed] == [Status.COMPILE_ERROR]
    assert said == ['"b.cu" [sm_90]: warm start from 5 evaluations of this unit (sm_80, another source, another '
                    'build); 5 evaluations of "a.cu" (same knobs, same source parameters)']
    # without the project (no units known), the same unit's other contexts alone
    assert [g.origin for g in warm_starts(own, None, CONTEXT, GOAL, SPACE, said.append)] == [found[0].origin]


def test_no_warm_start_from_another_backend_target_or_knobs(tmp_path):
    other_knobs = [StoredResult(Genome((("define.BLOCK", 128), ("ptxas.dlcm", "cg"), *r.genome.items[1:])),
                          r.flags, r.measurement, "", r.context) for r in _records('"c.cu"')]
    own = Store(_store(tmp_path / "results.jsonl", _records('"a.cu"', "sm_80") + _records('"d.cu"', backend="pycuda")
                       + other_knobs))
    said: list[str] = []
    units = frozenset({'"a.cu"', '"b.cu"', '"c.cu"', '"d.cu"'})
    assert warm_starts(own, ProjectStores(units), CONTEXT, GOAL, SPACE, said.append) == []
    assert said == ['"b.cu" [sm_90]: not started from units unlike this one: "c.cu" (1 of 4 knobs shared)']


@pytest.mark.skipif(os.geteuid() != 0, reason="a store of another uid takes root to make (chown)")
def test_stores_not_the_users_or_outside_the_project_or_of_another_projects_units_are_not_read(tmp_path):
    """Listed stores, and the retune's own, for other units' evaluations."""
    project, elsewhere = tmp_path / "project", tmp_path / "other-project"
    own = Store(project / ".nvcc-evo" / "results.jsonl")
    theirs = _store(project / "theirs.jsonl", _records('"a.cu"'))
    os.chown(theirs, STRANGER, STRANGER)
    outside = _store(elsewhere / "results.jsonl", _records('"a.cu"'))
    (project / "linked.jsonl").symlink_to(outside)
    (project / "inside.jsonl").symlink_to(project / "theirs.jsonl")
    foreign = _store(project / "copied.jsonl", _records('"z.cu"'))           # a unit this ACF does not have
    said: list[str] = []
    listed = [theirs, outside, project / "linked.jsonl", project / "inside.jsonl", foreign, own.path]
    known = project_stores(project, ['"a.cu"', '"b.cu"'], listed, own.path, said.append)
    assert known == ProjectStores(frozenset({'"a.cu"', '"b.cu"'}), (foreign,))
    assert said == [
        f"results store {theirs} not read for warm starts: it is owned by uid {STRANGER}, not by you (uid 0): "
        "another user's file is not trusted",
        f"results store {outside} not read for warm starts: it is outside the project folder {project} (another "
        "project's results are not used)",
        f"results store {project / 'linked.jsonl'} not read for warm starts: it is outside the project folder "
        f"{project} (another project's results are not used)",
        f"results store {project / 'inside.jsonl'} not read for warm starts: it is a symbolic link (none is followed)"]
    said.clear()
    assert warm_starts(own, known, CONTEXT, GOAL, SPACE, said.append) == []
    assert said == ["\"b.cu\" [sm_90]: 5 evaluations of units this ACF does not have left aside (another project's "
                    "results)"]
    # the retune's own store, another user's: the same unit's other contexts read, no other unit's
    shutil.copy(theirs, own.path)
    _store(own.path, _records('"b.cu"', "sm_80"))
    os.chown(own.path, STRANGER, STRANGER)
    said.clear()
    known = project_stores(project, ['"a.cu"', '"b.cu"'], [], own.path, said.append)
    assert said == [f"results store {own.path} not read for other units' warm starts: it is owned by uid "
                    f"{STRANGER}, not by you (uid 0): another user's file is not trusted"]
    assert [g.origin for g in warm_starts(own, known, CONTEXT, GOAL, SPACE, said.append)] == \
        ["this unit (sm_80, another source, another build)"]
    # the listed store, the user's own: read (its a.cu, though the own store, not trusted, holds the same)
    os.chown(theirs, 0, 0)
    known = project_stores(project, ['"a.cu"', '"b.cu"'], [theirs], own.path, said.append)
    found = warm_starts(own, known, CONTEXT, GOAL, SPACE, said.append)
    assert [g.origin for g in found] == ["this unit (sm_80, another source, another build)",
                                         '"a.cu" (same knobs, same source parameters)']


def _job(nvcc: Path, folder: Path, name: str, text: str) -> CompileJob:
    (folder / name).write_text(text)
    return CompileJob(str(nvcc), ("-c", name), str(folder), name, "sm_90")


def _facts(job: CompileJob) -> tuple:
    built = compile_candidate(job)
    return with_mix(kernel_facts(built.stderr, built.cubin, "sm_90"), built.cubin, find_disassembler(job.nvcc))


def test_units_of_compiler_knobs_alone_are_alike_by_their_kernels(tmp_path, real_nvcc):
    """Real nvcc: where neither search names a source parameter, the two baselines' kernels (registers,
    instructions, shared memory, instruction mix) decide; this unit's baseline compiled only then."""
    regs, spill = (DATA / "cuda" / "regs.cu").read_text(), (DATA / "cuda" / "spill.cu").read_text()
    theirs = _facts(_job(real_nvcc, tmp_path, "e.cu", regs))
    assert theirs[0].mix                                            # (nvdisasm found: the mixes compared too)
    space = SearchSpace((Dimension("ptxas.maxrregcount", (None, 32, 64), None),
                         Dimension("ptxas.opt_level", (1, 3), 3)))
    context = Context("13.0", "fp-f", "sm_90", "cpu", "static", '"f.cu"', "build-f")
    records = [StoredResult(Genome((("ptxas.maxrregcount", cap), ("ptxas.opt_level", 3))), (),
                            Measurement(Status.OK, (("registers", registers),)), "",
                            Context("13.0", "fp-e", "sm_90", "cpu", "static", '"e.cu"', "build-e"))
               for cap, registers in ((None, 56.0), (32, 32.0), (64, 56.0))]
    own = Store(_store(tmp_path / "results.jsonl", records))
    known = ProjectStores(frozenset({'"e.cu"', '"f.cu"', '"g.cu"'}),
                          kernels_of=lambda unit, arch: theirs if (unit, arch) == ('"e.cu"', "sm_90") else None)
    said: list[str] = []
    alike = _job(real_nvcc, tmp_path, "f.cu", regs.replace("A kernel", "The same kernel"))
    found = warm_starts(own, known, context, GOAL, space, said.append, alike)
    assert [(g.origin, len(g.evaluations)) for g in found] == [('"e.cu" (same knobs, alike kernels)', 3)]
    unlike = _job(real_nvcc, tmp_path, "g.cu", spill)
    assert warm_starts(own, known, replace(context, unit='"g.cu"'), GOAL, space, said.append, unlike) == []
    assert said[-1].startswith('"g.cu" [sm_90]: not started from units unlike this one: "e.cu" (no source parameter '
                               "searched by both; kernels unlike: "), said
    assert unlike_kernels(theirs, theirs) == "" and unlike_kernels(theirs, theirs * 2) == "2 kernel(s) against 1"
    # without their kernels, or without a build of this unit's baseline: nothing compared, no warm start
    assert warm_starts(own, ProjectStores(known.units), context, GOAL, space, said.append, alike) == []
    assert said[-1].endswith('"e.cu" (no source parameter searched by both; their kernels not compared)')


ACF = """acf 1
unit "a.cu" {
    search {
        define.TERMS in {16, 24, 32}
        ptxas.maxrregcount in {32, 40, 48, 64}
    }
}
unit "b.cu" {
    search {
        define.TERMS in {16, 24, 32}
        ptxas.maxrregcount in {32, 40, 48, 64, 80}
    }
}
unit "c.cu" {
    search {
        ptxas.maxrregcount in {32, 40, 48, 64}
        ptxas.opt_level in 1..3
    }
}
unit "e.cu" {
    search {
        ptxas.maxrregcount in {32, 40, 48, 64}
        ptxas.opt_level in 1..3
    }
}
"""


def test_a_retune_starts_from_a_similar_unit_of_the_project_and_says_so(tmp_path, evo_cache):
    """Real nvcc, the static backend, one retune of four units in turn: b.cu (the same kernel as a.cu,
    another default) starts from a.cu's search; c.cu (compiler knobs alone) does not, nor does a.cu (nothing
    before it), nor e.cu (c.cu's knobs, but c.cu's kernels, as its retune kept them, are unlike its own);
    another user's store that the settings list is not read."""
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "a.cu")
    regs = (DATA / "cuda" / "regs.cu").read_text()
    (tmp_path / "b.cu").write_text(regs.replace("#define TERMS 32", "#define TERMS 24"))
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "c.cu")
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "e.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    if os.geteuid() == 0:
        os.chown(_store(tmp_path / "theirs.jsonl", _records('"a.cu"')), STRANGER, STRANGER)
        (tmp_path / "nvcc-evo.toml").write_text('[report]\nstores = ["theirs.jsonl"]\n')
    done = run_evo("--retune", "--target", "sm_90", "--backend", "static", "--evaluations", "3", "--progress", "lines",
                   cwd=tmp_path, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    similar = '"a.cu" (same knobs, same source parameters)'
    assert f'"b.cu" [sm_90]: warm start from 4 evaluations of {similar}' in done.stderr, done.stderr
    assert f"warm start 3 seed(s): 3 from {similar}" in done.stderr, done.stderr
    assert '"c.cu" [sm_90]: not started from units unlike this one: "a.cu" (1 of 3 knobs shared)' in done.stderr
    assert '"e.cu" [sm_90]: not started from units unlike this one: "a.cu" (1 of 3 knobs shared); "b.cu" (1 of 3 ' \
        'knobs shared); "c.cu" (no source parameter searched by both; kernels unlike: ' in done.stderr, done.stderr
    for unit in ('"a.cu"', '"c.cu"', '"e.cu"'):
        assert not [line for line in done.stderr.splitlines() if f"{unit} [sm_90]" in line and "warm start" in line]
    if os.geteuid() == 0:          # said once, before the searches
        assert done.stderr.count(f"nvcc-evo: results store {tmp_path / 'theirs.jsonl'} not read for warm starts: it "
                                 f"is owned by uid {STRANGER}") == 1, done.stderr
