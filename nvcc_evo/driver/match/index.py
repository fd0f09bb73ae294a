"""The index cache: the lean view of a checked ACF that builds need
(`UnitEntry`, `TargetEntry`: NamedTuples, no lark nor the ACF model), kept
as JSON keyed by the ACF's bytes (nvcc_evo.driver.match.indexfile) so that a
build neither parses nor checks an unchanged file.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.match import indexfile
from nvcc_evo.system.files import read_regular

if TYPE_CHECKING:
    from pathlib import Path

    from nvcc_evo.acf.model import AcfFile


class TargetEntry(NamedTuple):
    """What a build needs of one target block (a lean copy, cached as JSON)."""

    arch: str
    gpu: str | None
    line: int
    settings: tuple[tuple[str, object], ...]
    fingerprint: str | None = None
    toolkit: str | None = None
    space_digest: str | None = None    # of the unit's pins and search block when it was tuned
    more_archs: tuple[str, ...] = ()   # the others a block of several architectures serves
    tune_digest: str | None = None     # of the unit's tune block when it was tuned

    def serves(self, arch: str) -> bool:
        return arch == self.arch or arch in self.more_archs

    def __str__(self) -> str:
        archs = ", ".join((self.arch, *self.more_archs))
        return f"{archs} {self.gpu!r}" if self.gpu else archs


class UnitEntry(NamedTuple):
    position: int                  # the unit's index in the ACF
    globs: tuple[str, ...]
    line: int
    pins: tuple[tuple[str, object], ...]
    targets: tuple[TargetEntry, ...]
    space_digest: str = ""             # of its pins and search block now (acf.Unit.space_digest)
    files: tuple[str, ...] = ()        # the files its knobs name (acf.Unit.named_files), in its
                                       # fingerprint
    kind: str = "source"               # "kernel": its globs name PTX entries
                                       # (nvcc_evo.driver.dropin_ptxas.decide)
    tune_digest: str = ""              # of its tune block now (acf.Unit.tune_digest)

    def __str__(self) -> str:
        names = " ".join(f'"{g}"' for g in self.globs)
        return f"kernel {names}" if self.kind == "kernel" else names

def index_units(file: AcfFile) -> tuple[UnitEntry, ...]:
    """The lean view of a checked AcfFile that builds need."""
    units = []
    for index, unit in enumerate(file.units):
        targets = []
        for target in unit.targets:
            # (a checked ACF's provenance keys are strings: acf.objectives' table of them)
            record = {r.key: str(r.value) for r in target.provenance or ()}
            targets.append(TargetEntry(target.arch, target.gpu, target.span.line,
                                       tuple((s.knob, s.value) for s in target.settings),
                                       record.get("fingerprint"), record.get("toolkit"),
                                       record.get("space_digest"),
                                       target.more_archs, record.get("tune_digest")))
        units.append(UnitEntry(index, unit.globs, unit.span.line,
                               tuple((p.knob, p.value) for p in unit.pins), tuple(targets),
                               unit.space_digest,
                               unit.named_files(), unit.kind, unit.tune_digest))
    return tuple(units)


def _to_json(units: tuple[UnitEntry, ...]) -> list:
    return [[u.position, list(u.globs), u.line, [list(p) for p in u.pins],
             [[t.arch, t.gpu, t.line, [list(s) for s in t.settings], t.fingerprint, t.toolkit,
               t.space_digest,
               list(t.more_archs), t.tune_digest]
              for t in u.targets], u.space_digest, list(u.files), u.kind, u.tune_digest]
            for u in units]


def _from_json(data: list) -> tuple[UnitEntry, ...]:
    return tuple(UnitEntry(index, tuple(globs), line, tuple(tuple(p) for p in pins),
                           tuple(TargetEntry(a, g, l, tuple(tuple(s) for s in st), f, tk, sd,
                                             tuple(more), td)
                                 for a, g, l, st, f, tk, sd, more, td in targets), space,
                           tuple(files), kind, tune)
                 for index, globs, line, pins, targets, space, files, kind, tune in data)


def load_units(path: Path, cache_dir: Path | None) -> tuple[UnitEntry, ...]:
    """The ACF's units, from a JSON cache while its bytes (and the files its
    check looked at) are unchanged, so that a build neither imports lark nor
    re-checks the file; AcfError if it has errors (kept in the cache too: a
    broken ACF is parsed once, not on every call)."""
    data = read_regular(path)
    entry = indexfile.read(str(cache_dir), data, str(path)) if cache_dir is not None else None
    if entry is None:
        entry = _checked(data, str(path))
        if cache_dir is not None:
            indexfile.write(str(cache_dir), data, str(path), entry)
    if "errors" in entry:
        from nvcc_evo.errors import AcfError, Diagnostic, Location
        raise AcfError([Diagnostic(Location(where, line, column), message, source, severity)
                        for where, line, column, message, source, severity in entry["errors"]])
    return _from_json(entry["units"])


def _checked(data: bytes, path: str) -> dict:
    """The cache entry of an ACF: parsed and checked (lark), its units or its errors."""
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.acf.resolve import check
    from nvcc_evo.acf.text import decode
    from nvcc_evo.errors import AcfError
    try:
        text = decode(data, path).text
        file = parse_text(text, path)
        files = check(file, text)
    except AcfError as error:
        return {"errors": [[d.location.path, d.location.line, d.location.column, d.message,
                            d.source_line,
                            d.severity] for d in error.diagnostics],
                "files": indexfile.looked_at(error.files, path)}
    units = index_units(file)
    return {"units": _to_json(units),
            "kernel_globs": [list(u.globs) for u in units if u.kind == "kernel"],
            "files": indexfile.looked_at(files, path)}
