"""What `--report` shows, read from the ACF and its results stores: one
`Section` per unit and target as one device and backend measured it (only
evaluations of each unit's source as it is now, of the current search
space and build, the baseline first), what is stale about its entry, and
the units no store has evaluations of. The page (report.page) draws them.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nvcc_evo.acf import model
from nvcc_evo.acf.edit.spelling import show_value
from nvcc_evo.acf.knobs import arch_order
from nvcc_evo.acf.sources import unit_sources
from nvcc_evo.driver import compiledb
from nvcc_evo.driver.match.stale import Reason
from nvcc_evo.engine.space import build_space
from nvcc_evo.execute.store import Store, StoredResult
from nvcc_evo.retune.scope.staleness import current_fingerprints, stale_reasons

SECOND_AXES = ("energy", "registers", "instructions", "spills")     # the front's other axis, for
                                                                    # one objective


@dataclass(frozen=True)
class Section:
    """One unit and target as one device and backend measured it."""

    unit: model.Unit
    arch: str
    device: str
    backend: str
    records: tuple[StoredResult, ...]    # in the order they were measured: the baseline first
    stale: tuple[Reason, ...]
    apart: int = 0  # evaluations of another search space or build: not in this section

    @property
    def title(self) -> str:
        return f"{self.unit} [{self.arch}] on {self.device} ({self.backend})"

    @property
    def baseline(self) -> StoredResult:
        return self.records[0]

    def objectives(self) -> tuple[str, str | None]:
        """The front's two axes: the unit's first two objectives, else its
        objective and the first other metric measured."""
        named = list(self.unit.tune.minimize) if self.unit.tune and self.unit.tune.minimize else []
        measured = list(dict.fromkeys(m for r in self.records for m, _ in r.measurement.metrics))
        # (a failed baseline measured nothing; every evaluation may have failed: then the axis is
        # runtime)
        if named:
            first = named[0]
        elif "runtime" in measured or not measured:
            first = "runtime"
        else:
            first = measured[0]
        candidates = named[1:] + list(SECOND_AXES) + measured
        others = [m for m in candidates if m != first and m in measured]
        return first, (others[0] if others else None)

    def entry(self) -> model.Target | None:
        """The ACF's entry for this section's target, where these evaluations
        chose it (not where another backend's did: see `chosen_by`)."""
        return None if self.chosen_by() else self._target()

    def _target(self) -> model.Target | None:
        return next((t for t in self.unit.targets
                     if t.serves(self.arch) and t.gpu in (None, self.device)), None)

    def chosen_by(self) -> str | None:
        """The backend that chose the entry, where it is another than this section's."""
        target = self._target()
        backend = target.backend if target is not None else None
        return backend if backend is not None and backend != self.backend else None

    def chosen(self) -> StoredResult | None:
        """The stored evaluation of the entry's knobs (the rest at the baseline's values)."""
        target = self.entry()
        if target is None:
            return None
        wanted = {s.knob: show_value(s.value) for s in target.settings}
        for record in self.records:
            items = dict(record.genome.items)
            chosen = all(show_value(items[k]) == v
                         for k, v in wanted.items() if k in items and items[k] is not None)
            others = all(items.get(k) == b
                         for k, b in self.baseline.genome.items if k not in wanted)
            if chosen and others:
                return record
        return None


def sections(file: model.AcfFile, acf_path: Path, stores: list[Path], chosen_units: list[int],
             toolkit_version: str | None) -> tuple[list[Section], int, list[tuple[str, str]]]:
    """The report's sections, how many records were left aside (another
    source fingerprint than its recorded builds read now, or a unit the ACF no longer has), and the
    units with no evaluation in the stores, each with what is stale about its entries."""
    folder = acf_path.parent
    units = {str(file.units[i]): file.units[i] for i in chosen_units}
    recorded, _ = compiledb.scan(acf_path)  # (as the build compiles each unit: its -I folders)
    prints = {str(unit): current_fingerprints(unit, acf_path, recorded, file.units)
              for unit in units.values()}
    groups: dict[tuple, list[StoredResult]] = {}
    aside = 0
    for path in stores:
        store = Store(path)
        records = store.read()
        if store.skipped:
            print(f"nvcc-evo: note: {store.skipped} line(s) of the results store {path} skipped "
                  "(cut short, or not results of this version's shape)", file=sys.stderr)
        for record in records:
            c = record.context
            if c.unit not in units or c.fingerprint not in prints[c.unit]:
                aside += c.unit in units
                continue
            groups.setdefault((c.unit, c.arch, c.device, c.backend), []).append(record)
    found = []
    for (name, arch, device, backend), records in sorted(groups.items(),
                                                         key=lambda g: (g[0][0],
                                                                        arch_order(g[0][1]),
                                                                        g[0][2:])):
        unit = units[name]
        stale = stale_reasons(unit, arch, records[0].context.fingerprint,
                              toolkit_version or _entry_toolkit(unit, arch))
        current = _current(records, unit, folder)
        found.append(Section(unit, arch, device, backend, current, stale,
                             len(records) - len(current)))
    searched = {section.unit for section in found}
    unsearched = [(str(unit), _unsearched_state(unit, prints[str(unit)], toolkit_version))
                  for unit in units.values() if unit not in searched]
    return found, aside, unsearched


def _current(records: list[StoredResult], unit: model.Unit,
             folder: Path) -> tuple[StoredResult, ...]:
    """The evaluations of the unit's current search space and of the build
    measured last, its baseline first (the genome at the space's baseline,
    where one was stored); records of other spaces or builds never stand as
    the baseline."""
    latest = records[-1]
    knobs = [k for k, _ in latest.genome.items]
    current = [r for r in records if r.context.build == latest.context.build and
               [k for k, _ in r.genome.items] == knobs]
    sources = unit_sources(unit, folder)
    if sources:
        baseline = build_space(unit, sources[0]).baseline()
        first = next((r for r in current if r.genome == baseline), None)
        if first is not None:
            current = [first] + [r for r in current if r is not first]
    return tuple(current)


def _unsearched_state(unit: model.Unit, prints: set[str], toolkit_version: str | None) -> str:
    if not unit.targets:
        return "no entry: never tuned"
    if len(prints) != 1:
        return (f"{len(prints)} fingerprints of its sources here (several files, or builds that "
                "read them apart)")
    states = []
    for t in unit.targets:
        why = stale_reasons(unit, t.arch, next(iter(prints)),
                            toolkit_version or _entry_toolkit(unit, t.arch))
        states.append(f"{', '.join(t.archs)}{' ' + t.gpu if t.gpu else ''}: "
                      f"{'; '.join(map(str, why)) or 'up to date'}")
    return "; ".join(states)


def _entry_toolkit(unit: model.Unit, arch: str) -> str:
    target = next((t for t in unit.targets if t.serves(arch)), None)
    record = target.record("toolkit") if target is not None else None
    return str(record.value) if record is not None else ""
