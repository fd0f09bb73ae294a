"""Where a kernel comes from: the recorded build whose code defines it, and the ACF unit that covers
that.

The compile database (driver.compiledb) records every compile an ACF unit
covers. For each recorded input (its latest record) the kernels it defines
are read from a recompile of the record to a cubin (its symbols, with
ptxas's registers; kept in `.nvcc-evo/hot/symbols.json` by the input's
content and the compile's arguments) or, for a kernel unit (Triton's,
through nvcc-evo-ptxas), from the kept PTX's `.entry` names. A name several
inputs define (a `static` kernel of one name in two units, an inline
template both instantiate) has each as an origin.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from nvcc_evo.acf import model
from nvcc_evo.acf.kernelname import matches as kernel_matches
from nvcc_evo.acf.knobs import arch_order
from nvcc_evo.acf.unitpath import inside, matches as path_matches
from nvcc_evo.cubin.compile import CompileJob, compile_each
from nvcc_evo.cubin.sass import kernel_facts
from nvcc_evo.driver.common import NvccNotFound, find_real_nvcc
from nvcc_evo.driver.compiledb import CompileRecord, scan
from nvcc_evo.driver.dropin_ptxas.untouched import entries
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.hot.names import base, demangled, fits, normal, shape
from nvcc_evo.system.files import folders, open_regular, replace
from nvcc_evo.system.say import log

SYMBOLS_FORM = 2     # the cache's form: a symbol's name, registers and launch bounds (a key of
                     # another form misses)


class Symbol(NamedTuple):
    name: str                 # mangled (a PTX entry's name as it is)
    registers: int            # ptxas's count for the recorded build (0: not known)
    bounded: bool = False     # launch bounds fix its block (__launch_bounds__, .maxntid, .reqntid):
                              # a register
                              # cap reaches it only with ptxas.override_directive_values


class Origin(NamedTuple):
    """One recorded build that defines a kernel."""

    source: str               # the input, relative to the ACF's folder where it lies under it
    arch: str
    record: CompileRecord
    unit: model.Unit | None   # the ACF unit that covers it (the first that matches), or None
    registers: int
    entries: tuple[str, ...] = ()      # a kernel unit's PTX entries (empty for a source)
    bounded: bool = False              # its launch bounds fix its block (Symbol.bounded)
    built_for: tuple[str, ...] = ()    # every architecture its input is recorded for, in order

    @property
    def archs(self) -> str:
        """The architectures it is built for, in words: `sm_80, sm_90` (its record's alone where
        none other is known)."""
        return ", ".join(self.built_for or (self.arch,))

    @property
    def is_kernel(self) -> bool:
        return self.record.input.endswith(".ptx")

    @property
    def tuned(self) -> bool:
        """Whether its unit tunes it (a search block, or an entry): a build adds nothing for a unit
        of neither."""
        return self.unit is not None and bool(self.unit.space or self.unit.targets)


def covering(units: tuple[model.Unit, ...], acf_dir: Path, record: CompileRecord,
             entries: tuple[str, ...], digest: str) -> model.Unit | None:
    """The unit a build matches for this record: the first source unit whose globs name its input
    (as the wrapper matches), or the first kernel unit naming one of its PTX's entries."""
    if entries:
        return next((u for u in units if u.is_kernel and any(kernel_matches(g, entries, digest)
                                                             for g in u.globs)),
                    None)
    parts = inside(record.input, acf_dir)
    return next((u for u in units if not u.is_kernel and any(path_matches(g,
                                                                          parts) for g in u.globs)),
                None)


class Origins:
    """The recorded builds of an ACF's folder, asked by kernel name."""

    def __init__(self, acf_path: Path, units: tuple[model.Unit, ...]):
        self.acf_path, self.folder = acf_path, acf_path.parent
        records, unusable = scan(acf_path)
        for problem in unusable:
            log(f"compile database {problem}: not used")
        latest: dict[str, CompileRecord] = {}
        self.archs: dict[str, set[str]] = {}        # every architecture an input is recorded for
        for record in sorted(records, key=lambda r: r.time):
            latest[record.input] = record
            self.archs.setdefault(record.input, set()).add(record.arch)
        self.by_symbol: dict[str, list[Origin]] = {}
        cache = _Cache(self.folder)
        found = _symbols(list(latest.values()), cache)
        for record in latest.values():
            symbols, entries, digest = found[record.input]
            unit = covering(units, self.folder, record, entries, digest)
            shown = record.input
            built_for = tuple(sorted(self.archs[record.input], key=arch_order))
            if inside(record.input, self.folder):
                shown = os.path.relpath(record.input, self.folder)
            for symbol in symbols:
                self.by_symbol.setdefault(symbol.name, []).append(
                    Origin(shown, record.arch, record, unit, symbol.registers, entries,
                           symbol.bounded, built_for))
        for origins in self.by_symbol.values():
            origins.sort(key=lambda o: (o.source, o.arch))     # (records come in the order the
                                                               # build wrote them)
        cache.save()
        spelled = demangled(sorted(self.by_symbol))
        self.spelling = spelled
        self.by_normal: dict[str, list[str]] = {}
        self.by_shape: dict[str, list[str]] = {}
        self.by_base: dict[str, list[str]] = {}
        for name, text in spelled.items():
            self.by_normal.setdefault(normal(text), []).append(name)
            self.by_shape.setdefault(shape(text), []).append(name)
            self.by_base.setdefault(base(text), []).append(name)

    def find(self, name: str, mangled: bool) -> tuple[str, list[Origin]]:
        """(the symbol, the builds defining it) for a profile's kernel name; ("", []) for none of
        them."""
        if mangled:
            return (name, self.by_symbol[name]) if name in self.by_symbol else ("", [])
        symbols = (self.by_normal.get(normal(name)) or self._shaped(name)
                   or self.by_base.get(base(name)) or [])
        if name in self.by_symbol:            # (extern "C", a PTX entry: spelled as it is)
            symbols = [name]
        # (the symbols of files' anonymous namespaces come in any order)
        found = sorted({(o.source, o.arch): o for s in symbols for o in self.by_symbol[s]}.values(),
                       key=lambda o: (o.source, o.arch))
        return (symbols[0] if len(symbols) == 1 else " | ".join(symbols)), found


    def _shaped(self, name: str) -> list[str]:
        """The symbols of the same name and template arguments (parameters aside), those whose
        parameters the name's `T1`, `T2` stand for first (Nsight Systems' spelling)."""
        found = self.by_shape.get(shape(name), [])
        return [s for s in found if fits(normal(name), normal(self.spelling[s]))] or found


class _Cache:
    """Symbols per recorded compile, kept by its input's content and its arguments."""

    def __init__(self, folder: Path):
        self.path = folder / ".nvcc-evo" / "hot" / "symbols.json"
        try:
            # (never through a link)
            with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as handle:
                self.data = json.loads(handle.read())
            assert isinstance(self.data, dict)
        except (OSError, ValueError, AssertionError):
            self.data = {}
        self.changed = False

    def get(self, key: str) -> list[Symbol] | None:
        found = self.data.get(key)
        try:
            return [Symbol(str(n), int(r), bool(b))
                    for n, r, b in found] if isinstance(found, list) else None
        except (TypeError, ValueError):
            return None

    def put(self, key: str, symbols: list[Symbol]) -> None:
        self.data[key] = [list(s) for s in symbols]
        self.changed = True

    def save(self) -> None:
        if self.changed:
            folders(self.path.parents[2], ".nvcc-evo", "hot")
            replace(self.path, json.dumps(self.data))


def _symbols(records: list[CompileRecord],
             cache: _Cache) -> dict[str, tuple[list[Symbol], tuple[str, ...], str]]:
    """Per record's input: the kernels its build defines; for a kernel unit's PTX also its entries
    and digest. Records the cache does not hold are compiled again, in parallel."""
    found: dict[str, tuple[list[Symbol], tuple[str, ...], str]] = {}
    wanted: list[tuple[CompileRecord, str, str]] = []
    for record in records:
        try:
            content = Path(record.input).read_bytes()
        except OSError as error:
            log(f"{record.input}: cannot be read ({error.strerror}): its kernels are not known")
            found[record.input] = ([], (), "")
            continue
        digest = hashlib.sha256(content).hexdigest()
        if record.input.endswith(".ptx"):
            names = entries(content)
            found[record.input] = ([Symbol(n, 0) for n in names], names, digest)
            continue
        key = hashlib.sha256(json.dumps([SYMBOLS_FORM, digest, record.argv, record.flags,
                                         record.arch, record.cwd]).encode()).hexdigest()
        known = cache.get(key)
        found[record.input] = (known or [], (), digest)
        if known is None:
            wanted.append((record, key, digest))
    if wanted:
        log(f"reading the kernels of {len(wanted)} recorded compile(s) (once: kept in "
            f"{cache.path})")
    for (record, key, digest), symbols in zip(wanted, _compiled([r for r, _, _ in wanted])):
        if symbols is not None:
            cache.put(key, symbols)
        found[record.input] = (symbols or [], (), digest)
    return found


def _compiled(records: list[CompileRecord]) -> list[list[Symbol] | None]:
    """Each record compiled again to a cubin, as the build compiles it (in parallel): its kernels
    and their registers; None for one that does not compile now (said)."""
    jobs = []
    for record in records:
        nvcc = record.nvcc if os.path.isfile(record.nvcc) else None
        try:
            nvcc = nvcc or find_real_nvcc(os.environ)
        except NvccNotFound as error:
            raise EnvironmentProblem(f"--hot: {error}") from None
        real = os.path.realpath(record.input)
        token = next((a for a in record.argv if os.path.realpath(os.path.join(record.cwd,
                                                                              a)) == real),
                     record.input)
        jobs.append(CompileJob(nvcc, tuple(record.argv), record.cwd, token, record.arch,
                               tuple(record.flags), record.compile_env(), 300.0))
    symbols: list[list[Symbol] | None] = [None] * len(jobs)
    for index, done in compile_each(jobs):
        if done.ok:
            symbols[index] = [Symbol(k.name, k.registers, k.threads > 0)
                              for k in kernel_facts(done.stderr, done.cubin, records[index].arch)]
        else:
            said = done.stderr.strip().splitlines()[-1:] or [done.status]
            log(f"{records[index].input}: its recorded compile fails now ({said[0][:200]}): its "
                "kernels are not known")
    return symbols
