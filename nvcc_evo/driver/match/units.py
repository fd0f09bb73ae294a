"""Matching a compile against its ACF: which unit covers each input (its globs,
relative to the ACF's folder: nvcc_evo.acf.unitpath), which target each SASS
architecture the call builds; `build_plan` (a compile) and `build_link_plan`
(an LTO device link, its objects' units from the compile database) put them
together as a `CallPlan`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from nvcc_evo.acf import unitpath
from nvcc_evo.driver.common import GPU_ENV, STALE_ENV
from nvcc_evo.driver.compiledb import read_all
from nvcc_evo.driver.match.archs import no_sass_archs, sass_archs
from nvcc_evo.driver.match.calls import is_lto_compile, lto_objects, tunable_inputs
from nvcc_evo.driver.match.index import TargetEntry, UnitEntry, load_units
from nvcc_evo.driver.match.stale import Reason, fingerprint, staleness
from nvcc_evo.errors import AcfError
from nvcc_evo.system.files import cache_folder

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall
    from nvcc_evo.driver.compiledb import CompileRecord
    from nvcc_evo.driver.toolkit import Toolkit

LTO_NOTE = ("a compile for link-time optimisation: no ptxas runs here, so its ptxas knobs reach no "
            "linked SASS; the device link (-dlink -dlto) through nvcc-evo gives them where every "
            "object's entry agrees")


class Match(NamedTuple):
    """One input file, one SASS architecture: the entry that applies."""

    input: str
    arch: str
    unit: UnitEntry | None
    target: TargetEntry | None = None
    fingerprint: str = ""
    stale: tuple[Reason, ...] = ()    # why the entry is out of date
    note: str = ""

    def settings(self, stale_policy: str) -> dict:
        if self.unit is None:
            return {}
        chosen = dict(self.unit.pins)
        if self.target is not None and not (self.stale and stale_policy == "default"):
            chosen.update(self.target.settings)
            chosen.update(self.unit.pins)   # pins always win
        return chosen


class CallPlan(NamedTuple):
    acf_path: Path | None
    matches: tuple[Match, ...] = ()
    archs: tuple[str, ...] = ()
    passthrough: str = ""              # why nothing is injected, when so
    notes: tuple[str, ...] = ()
    # A call that builds no SASS: its inputs' units for each architecture it ships as PTX or LTO IR
    # alone (no entry, no flags), recorded so that a retune knows the build makes no SASS of them.
    no_sass: tuple[Match, ...] = ()


class Covering(Protocol):
    """A unit as match_unit reads it: an index's UnitEntry (a build's) or acf.model.Unit (a
    retune's)."""

    @property
    def kind(self) -> str: ...

    @property
    def globs(self) -> tuple[str, ...]: ...


C = TypeVar("C", bound=Covering)


def match_unit(units: Sequence[C], acf_dir: Path, source: str | Path) -> C | None:
    """The first unit whose globs name `source` (nvcc_evo.acf.unitpath: path
    segments, inside the ACF's folder only); kernel units name PTX entries, never files."""
    parts = unitpath.inside(source, acf_dir)
    for unit in units:
        if unit.kind == "source" and any(unitpath.matches(glob, parts) for glob in unit.globs):
            return unit
    return None


class UnitRecord(Protocol):
    """A compile-database record as records_building reads it (compiledb.CompileRecord)."""

    @property
    def unit_globs(self) -> tuple[str, ...]: ...

    @property
    def input(self) -> str: ...


R = TypeVar("R", bound=UnitRecord)


def records_building(unit: C, units: Sequence[C], records: Iterable[R], acf_dir: Path) -> list[R]:
    """The compile-database records that build `unit` (one of `units`, the ACF's): those made for
    its globs; with none, those another unit made of a file a build now gives `unit` (the first
    source unit whose globs name it, as the wrapper matches): a unit added before the unit that
    recorded its file (`--hot --write` adds it before `unit "**/*.cu" {}`) is built as the build
    compiled that file, and its objects are those that build wrote."""
    records = list(records)
    mine = [r for r in records if tuple(r.unit_globs) == tuple(unit.globs)]
    if mine or unit.kind != "source":
        return mine
    return [r for r in records if match_unit(units, acf_dir, r.input) is unit]


def unit_outputs(acf_path: Path, globs: tuple[str, ...], arch: str) -> list[Path]:
    """The files the build's compiles of the ACF's unit of `globs` (for one architecture) wrote, as
    the records that build it say (records_building): what a build system compares with the
    sources. An ACF that cannot be read: the records made for those globs."""
    records = read_all(acf_path)
    try:
        units: tuple[UnitEntry, ...] = load_units(acf_path, Path(cache_folder()))
    except (AcfError, OSError):
        units = ()
    unit = next((u for u in units if u.globs == tuple(globs)), None)
    mine = records_building(unit, units, records, acf_path.parent) if unit is not None \
        else [r for r in records if tuple(r.unit_globs) == tuple(globs)]
    return sorted({Path(r.cwd) / r.output for r in mine if r.arch == arch and r.output})


class Block(Protocol):
    """A unit's target block as the rule below reads it: acf.model.Target (the retune's) or
    TargetEntry (a build's)."""

    @property
    def gpu(self) -> str | None: ...

    def serves(self, arch: str) -> bool: ...


B = TypeVar("B", bound=Block)
B_co = TypeVar("B_co", bound=Block, covariant=True)


class HasBlocks(Protocol[B_co]):
    @property
    def targets(self) -> tuple[B_co, ...]: ...


def entry_for(unit: HasBlocks[B], arch: str, gpu: str | None = None) -> B | None:
    """The block a build for `gpu` (its NVCC_EVO_GPU; None: it names none) compiles `arch` with,
    by `choose_target`: what the retune reads, and writes its choice into."""
    return choose_target(unit, arch, gpu)[0]


def written_for(unit: HasBlocks[B], arch: str, gpu: str | None) -> str | None:
    """The GPU name of the block a retune writes `arch`'s choice into, for a build for `gpu`: that
    of the block the build reads (`entry_for`), else `gpu` (None: a plain block), so that the build
    reads it from then on."""
    read = entry_for(unit, arch, gpu)
    return read.gpu if read is not None else gpu


def choose_target(unit: HasBlocks[B], arch: str, gpu: str | None) -> tuple[B | None, str]:
    """The unit's entry for `arch` (for the GPU named, else the plain one), and a note where it is
    not plain
    to see; an `a`/`f` variant (sm_90a) with no entry of its own is served by its architecture's
    (sm_90: the same knobs, on a superset of its instructions), as the drop-in ptxas serves Triton's
    sm_90a."""
    for_arch = [t for t in unit.targets if t.serves(arch)]
    family = arch[:-1] if arch[-1:] in ("a", "f") else ""
    if not for_arch and family and any(t.serves(family) for t in unit.targets):
        found, note = choose_target(unit, family, gpu)
        said = f"no entry for {arch}: the entry for {family} serves it"
        return found, said + (f" ({note})" if note else "")
    if gpu:
        named = [t for t in for_arch if t.gpu == gpu]
        if named:
            return named[0], ""
    plain = [t for t in for_arch if t.gpu is None]
    if plain:
        return plain[0], ""
    if len(for_arch) == 1:
        return for_arch[0], f"only entry for {arch} is for {for_arch[0].gpu!r}; used it"
    if for_arch:
        names = ", ".join(repr(t.gpu) for t in for_arch)
        return None, f"several entries for {arch} ({names}): set {GPU_ENV} to choose"
    return None, (f"no entry for {arch}: defaults (a build through nvcc-evo records the compile, "
                  "for --retune)")


def _ptxas_knobs(settings: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    """The ptxas.* knobs of a unit's pins or a target's settings: all an LTO link's ptxas takes."""
    return tuple(s for s in settings if s[0].startswith("ptxas."))


def build_link_plan(call: NvccCall, cwd: Path, environ: Mapping[str, str], toolkit: Toolkit,
                    cache_dir: Path | None, acf_path: Path,
                    compiled: dict[str, CompileRecord]) -> CallPlan:
    """For an LTO device link: each object's unit comes from the compile
    database (how the build compiled it); its target from the link's archs.
    Only ptxas knobs apply here: the sources were compiled already."""
    units = {u.position: u for u in load_units(acf_path, cache_dir)}
    archs, arch_note = sass_archs(call, toolkit)
    matches = []
    for name in lto_objects(call):
        record = compiled.get(str((cwd / name).resolve()))
        unit = units.get(record.unit_index) if record is not None else None
        if unit is not None and record is not None and unit.globs != tuple(record.unit_globs):
            unit = None
        for arch in archs:
            if unit is None or record is None:          # (a unit only where there is a record)
                matches.append(Match(name, arch, None, note="not compiled through nvcc-evo for "
                                                            "this ACF"))
                continue
            target, note = choose_target(unit, arch, environ.get(GPU_ENV))
            ptxas_only = unit._replace(pins=_ptxas_knobs(unit.pins))
            if target is not None:
                target = target._replace(settings=_ptxas_knobs(target.settings))
            stale = staleness(target, record.fingerprint, toolkit.version, unit.space_digest,
                              unit.tune_digest)
            matches.append(Match(name, arch, ptxas_only, target, record.fingerprint, stale, note))
    return CallPlan(acf_path, tuple(matches), tuple(archs), notes=(arch_note,) if arch_note else ())


def build_plan(call: NvccCall, cwd: Path, environ: Mapping[str, str], toolkit: Toolkit,
               cache_dir: Path | None, acf_path: Path) -> CallPlan:
    """Which ACF entries apply to this call, per input and architecture."""
    inputs = tunable_inputs(call)
    units = load_units(acf_path, cache_dir)
    archs, arch_note = sass_archs(call, toolkit)
    matches, no_sass = [], []
    unbuilt = [] if archs else no_sass_archs(call)     # (with SASS too, the record of a SASS step
                                                       # stands for the call)
    for name in inputs:
        source = cwd / name
        unit = match_unit(units, acf_path.parent, source)
        unit_fingerprint = fingerprint(source, call, cwd, unit.files, acf_path.parent) \
            if unit is not None else ""
        no_sass += [Match(name, arch, unit, None, unit_fingerprint, note="no SASS")
                    for arch in unbuilt if unit is not None]
        for arch in archs:
            if unit is None:
                matches.append(Match(name, arch, None, note=f"no unit in {acf_path.name} "
                                                            "covers it"))
                continue
            target, note = choose_target(unit, arch, environ.get(GPU_ENV))
            matches.append(Match(name, arch, unit, target, unit_fingerprint,
                                 staleness(target, unit_fingerprint, toolkit.version,
                                           unit.space_digest,
                                           unit.tune_digest), note))
    notes = ((arch_note,) if arch_note else ()) + ((LTO_NOTE,) if is_lto_compile(call) else ())
    return CallPlan(acf_path, tuple(matches), tuple(archs), notes=notes, no_sass=tuple(no_sass))
