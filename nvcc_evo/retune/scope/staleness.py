"""Why a unit's entry for a target is stale (`stale_reasons`): its sources, the
toolkit or the ptxas its program runs (`served_release`), its space or tune
block, the build it was tuned for (`build_identity`) or the GPU it was
measured on changed since it was written; `Namer` names what changed where the
retune knows how it builds the unit. A unit's fingerprint is made as the build
that compiles it reads its sources (`source_fingerprint`,
`current_fingerprints`), from the compile-database records that build it
(driver.match.units.records_building).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from nvcc_evo.acf import model
from nvcc_evo.acf.sources import unit_sources
from nvcc_evo.cubin.compile import CompileJob
from nvcc_evo.driver.cmdline.nvcc_options import parse_call
from nvcc_evo.driver.cmdline.ptxas import probe
from nvcc_evo.driver.match.builds import build_key, changed_sources, named_build, sources_read
from nvcc_evo.driver.match.stale import SPACE_CHANGED, TUNE_CHANGED, Reason, ReasonKind, fingerprint
from nvcc_evo.driver.match.units import entry_for, records_building

STATIC_ONLY = Reason(ReasonKind.STATIC_ONLY,
                     "its entry holds static objectives only (compiler facts): never measured")
ASKED = Reason(ReasonKind.ASKED, "asked")


def stale_reasons(unit: model.Unit, arch: str, unit_fingerprint: str, toolkit_version: str,
                  build: str = "", gpu: str = "", also_builds: tuple[str, ...] = (),
                  built_for: str | None = None, namer: Namer | None = None) -> tuple[Reason, ...]:
    """Why the unit's entry for `arch` (the block a build for the GPU `built_for` reads) is not what
    a retune here would write ("" each: it is), `gpu` the model this retune measures on ("" where it
    measures on none: the static and command backends); `also_builds`: the same build as older
    nvcc-evo named it; `namer` names what changed (the files, the other build) where the retune
    knows how it builds the unit."""
    target = entry_for(unit, arch, built_for)
    if target is None:
        return (Reason(ReasonKind.NO_ENTRY, f"no entry for {arch}"),)
    if target.provenance is None:
        return (Reason(ReasonKind.UNTUNED, "never tuned (no provenance)"),)
    reasons = []
    recorded = target.record("fingerprint")
    if recorded is None or recorded.value != unit_fingerprint:
        files = namer.changed_files(str(recorded.value)) if namer and recorded else ()
        reasons.append(Reason(ReasonKind.SOURCE, "source changed", files))
    toolkit = target.record("toolkit")
    if toolkit is None or toolkit.value != toolkit_version:
        then = toolkit.value if toolkit else "?"
        reasons.append(Reason(ReasonKind.TOOLKIT, f"toolkit {then} -> {toolkit_version}"))
    # Absent in entries written before it existed: not stale for it.
    space = target.record("space_digest")
    if space is not None and space.value != unit.space_digest:
        reasons.append(Reason(ReasonKind.SPACE, SPACE_CHANGED))
    tune = target.record("tune_digest")       # (likewise)
    if tune is not None and tune.value != unit.tune_digest:
        reasons.append(Reason(ReasonKind.TUNE, TUNE_CHANGED))
    tuned_for = target.record("build")        # (likewise absent in older entries)
    if build and tuned_for is not None and tuned_for.value not in (build, *also_builds):
        words = f"tuned for another build ({tuned_for.value}; now {build})"
        named = namer.another_build(str(tuned_for.value)) if namer else None
        reasons.append(Reason(ReasonKind.BUILD, named or words))
    measured_on = target.record("gpu")        # (entries the GPU backend measured)
    if gpu and measured_on is not None and measured_on.value != gpu:
        block = f'target {arch} "{measured_on.value}"'
        reasons.append(Reason(ReasonKind.GPU, f"measured on {measured_on.value}; this GPU is {gpu} "
                              f"(for an entry of each, name the GPU in a target of its own: "
                              f"{block})"))
    return tuple(reasons)


def source_fingerprint(unit: model.Unit, source: Path, argv: tuple[str, ...],
                       env: tuple[tuple[str, str], ...], cwd: str, acf_dir: Path) -> str:
    """The unit's fingerprint as the build that compiles it (a compile-database record, or `-c
    SOURCE` in the ACF's folder) reads its sources now, made as the build's own
    (match.stale.fingerprint, -I folders too)."""
    call = parse_call(list(argv), dict(env), cwd)
    return fingerprint(source, call, cwd, unit.named_files(), acf_dir)


def current_fingerprints(unit: model.Unit, acf_path: Path, records: list,
                         units: tuple[model.Unit, ...] = ()) -> set[str]:
    """The unit's fingerprints as each of its compile-database records (`records`: compiledb.scan's;
    `units`: the ACF's, for records another unit made: records_building) compiles it, or, with
    none, as `nvcc -c SOURCE` of each file its globs name: the sources as they are now."""
    folder = acf_path.parent
    mine = records_building(unit, units or (unit,), records, folder)
    if mine:
        return {source_fingerprint(unit, Path(r.input), r.argv, r.compile_env(), r.cwd, folder)
                for r in mine}
    return {source_fingerprint(unit, source, ("-c", str(source)), (), str(folder), folder)
            for source in unit_sources(unit, folder)}


class Namer(NamedTuple):
    """How a retune builds a unit for `arch`, which names what changed: a source's files (those a
    written entry's fingerprint read were kept: builds.keep_sources), another build's folder and
    difference (None: unknown)."""

    arch: str
    source: Path
    job: CompileJob
    mine: list
    root: Path
    nvcc: str

    def changed_files(self, recorded: str) -> tuple[str, ...]:
        """The files changed since the fingerprint `recorded` (where builds.keep_sources kept
        them)."""
        job, root = self.job, self.root
        now = sources_read(self.source, job.argv, job.env, job.cwd, root)
        return tuple(changed_sources(root, recorded, now))

    def another_build(self, tuned_for: str) -> str | None:
        records = sorted((r for r in self.mine if r.arch == self.arch), key=lambda r: r.time,
                         reverse=True)
        return named_build(tuned_for, records, self.root, self.nvcc)


def served_release(job: CompileJob) -> str:
    """The release of the ptxas a kernel unit's program runs (Triton's own), not the toolkit's:
    another ptxas makes its entries stale and sets its results aside. "" for a unit nvcc compiles
    (or a ptxas that cannot say)."""
    if not job.ptxas:
        return ""
    try:
        return probe(job.ptxas).version
    except OSError:
        return ""


def build_identity(job: CompileJob, root: Path, recorded: bool) -> str:
    """What provenance says of the build an entry was tuned for: the recorded compile's key, or that
    there was none (and what was compiled instead), so an entry tuned before the real build was
    recorded is stale once it is."""
    if recorded:
        return f"recorded compile {build_key(job, root)}"
    return f"no recorded build: nvcc -c {os.path.relpath(job.source, root)} for {job.arch}"
