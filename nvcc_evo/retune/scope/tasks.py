"""What a retune covers: the units the command line names (by their globs or by a file they cover:
`--retune 'sgemm*'`, `--retune kernels/a.cu`), the `--target` architecture, which (unit, target)
pairs are stale (retune.scope.staleness says why), and how each is built (its compile-database
record, or `-c SOURCE`). A name that matches no unit, or an architecture the toolkit does not build,
is a usage error before anything is compiled."""
from __future__ import annotations

import difflib
import fnmatch
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nvcc_evo.acf import model
from nvcc_evo import backends
from nvcc_evo.acf.knobs import arch_order
from nvcc_evo.acf.sources import unit_sources
from nvcc_evo.driver import compiledb
from nvcc_evo.cubin.compile import CompileJob
from nvcc_evo.driver.cmdline.nvcc_options import parse_call
from nvcc_evo.driver.match.builds import build_key, compiled, difference, older_keys, where
from nvcc_evo.driver.match.calls import is_lto_compile
from nvcc_evo.driver.match.index import index_units
from nvcc_evo.driver.match.stale import Reason
from nvcc_evo.driver.common import GPU_ENV, GUARD_ENV
from nvcc_evo.driver.dropin_ptxas.afresh import afresh
from nvcc_evo.driver.match.units import entry_for, match_unit, records_building
from nvcc_evo.driver.targets import not_built
from nvcc_evo.errors import UsageError
from nvcc_evo.execute.measurers import bench_problem, check_benches, check_kernel_times
from nvcc_evo.retune.scope.staleness import (ASKED, STATIC_ONLY, Namer, build_identity,
                                             served_release, source_fingerprint, stale_reasons)
from nvcc_evo.system.leftovers import SHELL, run_in_group
from nvcc_evo.system.say import log

if TYPE_CHECKING:
    from nvcc_evo.driver.match.index import UnitEntry
    from nvcc_evo.driver.toolkit import Toolkit
    from nvcc_evo.retune.scope.options import Selection

DEFAULT_ARCH = "sm_90"
# What a compile for link-time optimisation ships (measured with CUDA 13.0: tests/test_fidelity.py).
LTO_BUILD = ("its build compiles it for link-time optimisation (-dlto): ptxas never compiles it "
             "on its own; the device link (-dlink -dlto) makes its SASS, with every object of the "
             "link at once, so no candidate compiled alone is what the binary holds: not tuned (an "
             "entry written by hand still applies: its defines at this compile, its ptxas knobs at "
             "the link where every object's entry gives the same; of nvcc's options only some "
             "reach the linked code, see docs/wrapper.md)")
NEVER_THROUGH_PTXAS = ("never compiled through nvcc-evo-ptxas for this ACF: run the program "
                       "that compiles it once with TRITON_PTXAS_PATH=nvcc-evo-ptxas (and, for "
                       "sm_100 and later, "
                       "TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell), so that its PTX "
                       "is known")
CHOOSING_ENV = (GPU_ENV, "NVCC_EVO_STALE")      # a build's environment that chooses its entries


@dataclass(frozen=True)
class Task:
    unit_index: int
    unit: model.Unit
    arch: str
    source: Path
    job: CompileJob
    fingerprint: str
    reasons: tuple[Reason, ...]
    # The record's environment that chooses entries (NVCC_EVO_GPU).
    build_env: tuple[tuple[str, str], ...] = ()
    build: str = ""       # build_identity: what the entry is tuned for
    release: str = ""     # the ptxas release a kernel unit's program runs ("": the toolkit's; see
                          # served_release)
    gpu: str = ""         # the GPU model the retune measures on ("": none)

    @property
    def built_for(self) -> str | None:
        """The GPU model the recorded build names (NVCC_EVO_GPU), which chooses the block it
        reads."""
        return dict(self.build_env).get(GPU_ENV)

    @property
    def entry(self) -> model.Target | None:
        """The unit's target block the build reads for `arch`: the retune's and the build's one
        rule."""
        return entry_for(self.unit, self.arch, self.built_for)

    def toolkit(self, toolkit: Toolkit) -> str:
        """The release its entry's `toolkit` names, its results are kept under and a change of makes
        it stale."""
        return self.release or toolkit.version

    def __str__(self) -> str:
        return f"{self.unit} [{self.arch}]"


def _named(units: tuple[model.Unit, ...], entries: tuple[UnitEntry, ...], pattern: str,
           acf_path: Path, cwd: Path) -> set[int]:
    """The units a selection names: by their globs (`sgemm*`, `./a.cu`), or by a file (relative to
    the working folder) that a build gives them (the first unit that covers it: a later one's
    entries are never read for that file)."""
    wanted = pattern[2:] if pattern.startswith("./") else pattern
    hits = {i for i, unit in enumerate(units)
            if any(fnmatch.fnmatchcase(g, wanted) or g == wanted for g in unit.globs)}
    named = cwd / pattern
    first = match_unit(entries, acf_path.parent, named) if named.is_file() else None
    return hits | ({first.position} if first is not None else set())


def select_units(file: model.AcfFile, acf_path: Path, patterns: tuple[str, ...],
                 cwd: Path) -> list[int]:
    """The indices of the units the command line names (all without
    patterns); a pattern that names no unit is a usage error."""
    if not patterns:
        return list(range(len(file.units)))
    entries = index_units(file)
    chosen = set()
    for pattern in patterns:
        hits = _named(file.units, entries, pattern, acf_path, cwd)
        if not hits:
            known = ", ".join(str(u) for u in file.units) or "none"
            globs = [g for u in file.units for g in u.globs]
            close = difflib.get_close_matches(pattern, globs, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"--retune {pattern}: no unit of {acf_path} matches it{hint} "
                             f"(units: {known})")
        chosen |= hits
    return sorted(chosen)


def _job_for(unit: model.Unit, arch: str, acf_path: Path, mine: list, unreadable: list, nvcc: str,
             timeout: float) -> tuple[CompileJob, Path, tuple] | str:
    """How the build compiles this unit: its latest usable compile-database record (`mine`), else
    `-c SOURCE`; or why it cannot be built as the build does (`unreadable`: records of no known
    unit)."""
    if mine:
        return _recorded_job(unit, arch, mine, nvcc, timeout)
    if unreadable:
        return (f"no usable compile-database record, and {len(unreadable)} record(s) cannot be "
                f"read (e.g. {unreadable[0]}), so how the build compiles it is unknown: not tuned "
                f"(rebuild it through nvcc-evo, or remove the broken file)")
    if unit.is_kernel:
        return NEVER_THROUGH_PTXAS
    files = unit_sources(unit, acf_path.parent)
    if not files:
        return f"no source file matches it under {acf_path.parent}"
    source = files[0]
    folder = str(acf_path.parent)
    job = CompileJob(nvcc, ("-c", str(source)), folder, str(source), arch, (), (), timeout)
    return job, source, ()


def _recorded_job(unit: model.Unit, arch: str, mine: list, nvcc: str,
                  timeout: float) -> tuple[CompileJob, Path, tuple] | str:
    """How the unit's latest compile-database record for `arch` (else its latest) compiles it, and
    the record's environment that chooses its entries; why not, for a compile for link-time
    optimisation."""
    record = max(mine, key=lambda r: (r.arch == arch, r.time))
    real = os.path.realpath(record.input)
    token = next((a for a in record.argv if os.path.realpath(os.path.join(record.cwd, a)) == real),
                 record.input)
    chooses = tuple((k, record.env[k]) for k in CHOOSING_ENV if k in record.env)
    # (options files: the call's folder)
    if is_lto_compile(parse_call(list(record.argv), {}, record.cwd)):
        return LTO_BUILD
    # A kernel unit's PTX is compiled by the ptxas its program ran (Triton's own): what it
    # measures ships.
    program = record.nvcc if unit.is_kernel and os.path.isfile(record.nvcc) else None
    job = CompileJob(nvcc, tuple(record.argv), record.cwd, token, arch, (), record.compile_env(),
                     timeout, program)
    return job, Path(record.input), chooses


def _say_records(unit: model.Unit, mine: list, not_used: list, unreadable: list, folder: Path,
                 defaulted: bool, bench_builds: bool = False) -> None:
    """Each unused compile-database record of `unit` and what happens instead, or that it has none
    (so it is built as `-c SOURCE`, for DEFAULT_ARCH unless `--target` or a block says; in a dry
    run where its bench would build it first, `bench_builds`, that the retune would); globs
    matching no file first."""
    if not (mine or not_used or unit.is_kernel) and not unit_sources(unit, folder):
        log(f"unit {unit}: its globs match no file under {folder}")
        return
    instead = ("another record of it is used" if mine else
               "it is compiled as `nvcc -c SOURCE` instead")
    for entry in not_used:
        log(f"{unit}: compile database {entry}: not used; {instead}")
    if not (mine or not_used or unreadable or unit.is_kernel):
        arch = ""
        if defaulted:
            arch = f" for {DEFAULT_ARCH} (the built-in default target; --target sm_XX for another)"
        if bench_builds:
            assert unit.bench is not None and unit.bench.command is not None
            log(f"{unit}: never built through nvcc-evo for this ACF: a retune runs its bench "
                f"command once first, so that the build it measures is recorded "
                f"({unit.bench.command.text}), and tunes it for that build's architectures and "
                f"flags; this dry run runs nothing, so it lists it as `nvcc -c SOURCE`"
                f"{' for ' + DEFAULT_ARCH if defaulted else ''} builds it")
            return
        log(f"{unit}: never built through nvcc-evo for this ACF: compiled as `nvcc -c "
            f"SOURCE`{arch}, without the build's own flags (build it once through nvcc-evo to tune "
            f"it as the build compiles it)")


def find_tasks(file: model.AcfFile, acf_path: Path, toolkit: Toolkit, selection: Selection,
               gpu: str = "", run_benches: bool = False) -> tuple[list[Task], list[str], int]:
    """The (unit, target) searches to run, those that cannot be, and how many stale entries a static
    retune keeps for a GPU (both said on stderr); `gpu`: the model the pycuda backend measures on
    ("": none). A unit of neither search nor bench block records the build's compiles: a backend
    that runs a bench passes it by, said (a usage error where it is all that is selected). A query,
    which runs nothing, unless `run_benches` (a retune): then a unit never built that its command
    bench builds is looked at last, after its bench has run once (_bench_builds_it), and only once
    every other unit to search has the bench its backend needs."""
    records, unusable = compiledb.scan(acf_path)
    unreadable = [u for u in unusable if not u.unit_globs]
    for broken in unreadable:
        log(f"compile database {broken}: cannot be used (a unit with no other record is not tuned)")
    found = Found([], [], 0)
    selected = select_units(file, acf_path, selection.globs, Path.cwd())
    built_by_bench, records_only = [], []
    for index, unit in enumerate(file.units):
        if index not in selected:
            continue
        problem = bench_problem(unit, selection.backend)
        if not (unit.space or unit.requires or unit.bench) and problem:
            records_only.append(str(problem))    # (it records the build's compiles)
            continue
        recorded = bool(records_building(unit, file.units, records, acf_path.parent))
        if run_benches and not recorded and _built_by_bench(unit, selection):
            built_by_bench.append((index, unit))
            continue
        _unit_tasks(found, index, file.units, acf_path, toolkit, selection, gpu, records,
                    unusable, unreadable)
    if built_by_bench:
        check_benches(found.tasks, selection.backend)
        check_kernel_times([t.unit for t in found.tasks] + [u for _, u in built_by_bench],
                           selection.backend, toolkit.nvcc)
        for index, unit in built_by_bench:
            _bench_builds_it(unit, acf_path, selection)
        records, unusable = compiledb.scan(acf_path)     # with what the benches' builds recorded
        for index, unit in built_by_bench:
            _unit_tasks(found, index, file.units, acf_path, toolkit, selection, gpu, records,
                        unusable, unreadable)
    if records_only and len(records_only) == len(selected):
        raise UsageError("; ".join(records_only)
                         + " (nor a search block: it records the build's compiles)")
    for problem in records_only:
        log(f"{problem}, nor a search block: it records the build's compiles (for --hot, other "
            f"units): not retuned")
    return sorted(found.tasks, key=lambda t: t.unit_index), found.skipped, found.kept


@dataclass
class Found:
    """What find_tasks has found so far."""

    tasks: list[Task]
    skipped: list[str]
    kept: int


def _unit_tasks(found: Found, index: int, units: tuple[model.Unit, ...], acf_path: Path,
                toolkit: Toolkit, selection: Selection, gpu: str, records: list, unusable: list,
                unreadable: list) -> None:
    """The searches of the unit at `index` of `units` (each architecture its records, its target
    blocks or --target name), into `found`."""
    unit = units[index]
    mine = records_building(unit, units, records, acf_path.parent)
    asked, measures = selection.all or bool(selection.globs), backends.row(selection.backend)
    root = acf_path.parent
    archs, named = _archs(found, unit, mine, toolkit, selection)
    not_used = [u for u in unusable if u.unit_globs == unit.globs]
    bench = unit.bench
    bench_builds = (selection.dry_run and backends.row(selection.backend).rebuilds
                    and bool(bench and bench.command))          # (what _built_by_bench would run)
    _say_records(unit, mine, not_used, unreadable, root, not named, bench_builds)
    for arch in archs:
        job_found = _job_for(unit, arch, acf_path, mine, unreadable, toolkit.nvcc,
                             selection.timeout)
        if isinstance(job_found, str):
            log(f"unit {unit} [{arch}]: {job_found}; skipped")
            found.skipped.append(f"{unit} [{arch}]")
            continue
        job, source, chooses = job_found
        built_for = dict(chooses).get(GPU_ENV)
        entry = entry_for(unit, arch, built_for)           # (the block the build reads)
        unit_fingerprint = source_fingerprint(unit, source, job.argv, job.env, job.cwd, root)
        build = build_identity(job, root, bool(mine))
        older = tuple(f"recorded compile {key}" for key in older_keys(job, root)) if mine else ()
        release = served_release(job)
        namer = Namer(arch, source, job, mine, root, toolkit.nvcc)
        reasons: tuple[Reason, ...] = (ASKED,)
        if not asked:
            reasons = stale_reasons(unit, arch, unit_fingerprint, release or toolkit.version, build,
                                    gpu, older, built_for, namer)
        _say_other_builds(unit, arch, mine, root, toolkit.nvcc)
        measured = None if asked else _measured_on(entry)
        if reasons and measures.facts_only and measured:
            log(f"{unit} [{arch}]: {'; '.join(map(str, reasons))}, but its entry was measured "
                f"({measured}); static objectives cannot judge runtime, so it stays until a retune "
                f"on a GPU (name the unit or use --all to overwrite it anyway)")
            found.kept += 1
            continue
        static_entry = backends.row(entry.backend if entry else None).facts_only
        if not reasons and measures.times and static_entry:
            reasons = (STATIC_ONLY,)
        if reasons:
            found.tasks.append(Task(index, unit, arch, source, job, unit_fingerprint, reasons,
                                    chooses, build, release, gpu))


def _archs(found: Found, unit: model.Unit, mine: list, toolkit: Toolkit,
           selection: Selection) -> tuple[list[str], list[str]]:
    """The architectures to search the unit for (DEFAULT_ARCH where none is named), and those
    named: --target's, else its records' and target blocks'. A block's architecture the toolkit
    does not build is skipped, said."""
    named = [selection.target] if selection.target else sorted(
        {r.arch for r in mine} | set(unit.archs), key=arch_order)
    archs = named or [DEFAULT_ARCH]
    for arch in [a for a in archs if a in unit.archs and not selection.target]:
        why = not_built(arch, toolkit.nvcc, toolkit.version)
        if why:
            log(f"unit {unit} [{arch}]: its target block names {arch}: {why}; skipped")
            found.skipped.append(f"{unit} [{arch}]")
            archs.remove(arch)
    return archs, named


def _say_other_builds(unit: model.Unit, arch: str, mine: list, root: Path, nvcc: str) -> None:
    """Where the unit's records for `arch` compile it in more than one way (a Debug and a Release
    folder, not output names alone), which one the retune tunes for (the latest) and what the others
    do differently."""
    # (build_key, fingerprint) -> its latest record
    ways: dict[tuple[str, str], compiledb.CompileRecord] = {}
    for record in sorted((r for r in mine if r.arch == arch), key=lambda r: r.time, reverse=True):
        unit_fingerprint = source_fingerprint(unit, Path(record.input), record.argv,
                                              record.compile_env(), record.cwd, root)
        ways.setdefault((build_key(compiled(record, nvcc), root), unit_fingerprint), record)
    if len(ways) < 2:
        return
    latest, other, *more = ways.values()
    log(f"{unit} [{arch}]: {len(ways)} builds compile it differently (recorded in "
        f"{where(latest, other)} and {where(other, latest)}{' and more' if more else ''}; "
        f"{difference(latest, other, root)}): tuned for the latest, in {latest.cwd}")


def _built_by_bench(unit: model.Unit, selection: Selection) -> bool:
    """A unit the bench command of a backend that rebuilds the project builds, in a retune that runs
    it."""
    bench = unit.bench
    runs = backends.row(selection.backend).rebuilds and not selection.dry_run
    return runs and bool(bench and bench.command)


def _bench_builds_it(unit: model.Unit, acf_path: Path, selection: Selection) -> None:
    """A command-backend retune of a unit never built through nvcc-evo (a kernel unit: never
    compiled as this unit, as after --hot --write) runs its bench command once first, as a user's
    build would run (the ACF as it is; Triton's compiles through the stand-ins, its caches fresh, as
    for a candidate), so that the build it measures is recorded, tuned as it compiles and named in
    the entry (else: "no recorded build", stale for the build its own bench recorded next time; a
    kernel unit skipped)."""
    bench = unit.bench
    assert bench is not None and bench.command is not None        # (_built_by_bench)
    command = bench.command.text
    never = ("compiled through nvcc-evo-ptxas" if unit.is_kernel else
             "built through nvcc-evo")
    log(f"{unit}: never {never} for this ACF: its bench command runs once first, so that the build "
        f"it measures is recorded ({command})")
    plain = {k: v for k, v in os.environ.items() if k != GUARD_ENV}
    timeout = bench.timeout.seconds if bench.timeout else selection.timeout
    with afresh(plain) if unit.is_kernel else nullcontext(plain) as env:
        done = run_in_group([SHELL, "-c", command], cwd=acf_path.parent, env=env, timeout=timeout)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()[-3:]
        ended = ("ran past its timeout" if done.returncode is None else
                 f"exited with status {done.returncode}")
        log(f"{unit}: its bench command {ended}" + "".join(f"\n    {line}" for line in said))


def _measured_on(target: model.Target | None) -> str | None:
    """Where the unit's current entry was measured (runtime, not compiler facts), or None."""
    if target is None or not backends.row(target.backend).times:
        return None
    gpu, date = target.record("gpu"), target.record("date")
    on = f" on {gpu.value}" if gpu else ""
    when = f", {date.value}" if date else ""
    return f"backend {target.backend}{on}{when}"
