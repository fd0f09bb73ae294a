"""`nvcc-evo --report`: one self-contained HTML page per ACF, from the ACF
and its results stores alone (no GPU, no compile; `nvcc --version` at most,
to say whether the toolkit changed).

Per unit and target (one section per device and backend that measured it):
the entry's knobs against the baseline's, objectives with their spreads,
the verification as the provenance records it, the Pareto front and the
convergence (plots, report.plots), failures by status with an example, and
why the entry is stale. Only evaluations of each unit's source as it is now
count (an edited kernel's old candidates are another kernel's).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Sequence

from nvcc_evo.acf.edit.spelling import show_value
from nvcc_evo.acf.resolve import load
from nvcc_evo.driver.common import replace_file
from nvcc_evo.driver.project import Project, open_project
from nvcc_evo.driver.toolkit import toolkit_version
from nvcc_evo.engine.evolve import Evaluation, pareto_front
from nvcc_evo.engine.space import Genome
from nvcc_evo.errors import EnvironmentProblem, ExitCode, UsageError
from nvcc_evo.execute.store import StoredResult
from nvcc_evo.report.markup import Markup, join, table, tag, text
from nvcc_evo.report.plots import MISSING, available, convergence_figure, front_figure, svg
from nvcc_evo.report.sections import Section, sections
from nvcc_evo.kerneldiff.compare import STORE_NAME, Comparison, KernelStore
from nvcc_evo.kerneldiff.view import change, demangled, rows
from nvcc_evo.retune.scope.tasks import select_units
from nvcc_evo.system.files import Refused, check_regular, folders

UNITS_OF = {"runtime": "us", "energy": "mJ", "power": "W", "spills": "bytes"}


def _metric(record: StoredResult | None, name: str) -> Markup | str:
    if record is None:
        return "—"
    metrics, spreads = dict(record.measurement.metrics), dict(record.measurement.spreads)
    value = metrics.get(name)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    spread = spreads.get(name)
    spread = spread if isinstance(spread, (int, float)) and math.isfinite(spread) else None
    return join([f"{value:.4g}",
                 *([" ", tag("small", f"p20..p80 {spread:.2%} wide")] if spread else [])])


def _change(section: Section, chosen: StoredResult | None, name: str) -> str:
    base = dict(section.baseline.measurement.metrics).get(name)
    return change(base, dict(chosen.measurement.metrics).get(name) if chosen is not None else None)


def _knobs(section: Section) -> Markup:
    target = section.entry()
    if chosen_by := section.chosen_by():
        return tag("p", _elsewhere(section, chosen_by))
    if target is None:
        return tag("p", f"No entry for {section.arch} in the ACF.")
    chosen = {s.knob: show_value(s.value) for s in target.settings}
    base = dict(section.baseline.genome.items)
    rows = [[k, show_value(base[k]) if base.get(k) is not None else "(default)", tag("b", v)]
            for k, v in chosen.items()]
    return table(["knob", "baseline", "chosen"], rows) if rows else tag("p", "The entry keeps the "
                                                                             "defaults.")


def _objectives(section: Section, chosen: StoredResult | None) -> Markup:
    metrics = [m for m, _ in section.baseline.measurement.metrics]
    rows = [[m + (f" ({UNITS_OF[m]})" if m in UNITS_OF else ""), _metric(section.baseline, m),
             _metric(chosen, m), _change(section, chosen, m)] for m in metrics]
    notes = [] if chosen is not None else [tag("p", "The entry's knobs are not among these "
                                                    "evaluations.")]
    if section.apart:
        notes.append(tag("p", f"{section.apart} evaluation(s) of another search space or build are "
                              "not part of this section (its baseline is the current space's and "
                              "build's)."))
    return join([table(["objective", "baseline", "chosen", "change"], rows), *notes])


def _kernels(section: Section, chosen: StoredResult | None, stores: list[Path]) -> Markup:
    """The baseline's and the chosen build's kernels, as the retune that chose it compared them."""
    if chosen is None:
        return tag("p", "The entry's knobs are not among these evaluations.")
    for folder in dict.fromkeys(store.parent for store in stores):
        found = KernelStore(folder / STORE_NAME).latest(str(section.unit), section.arch,
                                                        section.baseline.sass_hash,
                                                        chosen.sass_hash)
        if found is not None:
            return kernel_tables(found)
    return tag("p", "No comparison of these two builds recorded (a retune records one as it ends; ",
               tag("code", "nvcc-evo --sass"), " builds one in the terminal).")


def kernel_tables(comparison: Comparison) -> Markup:
    """A comparison's table per kernel (kerneldiff.view's rows), as the terminal shows them."""
    pairs = comparison.pairs()
    names = demangled([name for name, _, _ in pairs])
    parts = [table(["", "baseline", "chosen", "change"],
                   [list(row) for row in rows(comparison, base, mine)],
                   caption=tag("code", names[name]), class_="kernel") for name, base, mine in pairs]
    note = [tag("p", tag("small", comparison.note))] if comparison.note else []
    return join(parts + note) if parts else join([tag("p", "ptxas reported no kernel."), *note])


def _verification(section: Section) -> Markup:
    target = section.entry()
    if chosen_by := section.chosen_by():
        return tag("p", _elsewhere(section, chosen_by))
    if target is None or not target.provenance:
        return tag("p", "No provenance: never tuned.")
    keys = ("verdict", "test", "p_value", "effect_size", "significant", "date", "evaluations",
            "search_seconds")
    shown = [r for r in target.provenance if r.key in keys or r.key.startswith(("baseline.",
                                                                                "tuned."))]
    said = lambda value: value if isinstance(value, str) else show_value(value)
    rows = [[r.key, said(r.value) + (f" ± {r.spread:g}" if r.spread else "")] for r in shown]
    return table(["provenance", "value"], rows)


def _elsewhere(section: Section, chosen_by: str) -> str:
    return (f"The ACF's entry for {section.arch} was chosen by the {chosen_by} backend, not from "
            "these evaluations.")


def _failures(section: Section) -> Markup:
    failed: dict[str, list] = {}
    for record in section.records:
        if not record.measurement.ok:
            entry = failed.setdefault(record.measurement.status, [0, record])
            entry[0] += 1
    if not failed:
        return tag("p", f"No failures in {len(section.records)} evaluations.")
    rows = []
    for status, (count, example) in sorted(failed.items(), key=lambda s: -s[1][0]):
        line = next((l for l in example.measurement.detail.splitlines() if l.strip()),
                    "(no message)")
        knobs = ", ".join(f"{k}={show_value(v)}" for k, v in example.genome.items if v is not None)
        rows.append([status, str(count),
                     join([tag("code", line[:300]), Markup("<br>"), tag("small", knobs)])])
    return table(["status", "count", "example"], rows)


def _metric_of(record: StoredResult, metric: str) -> float:
    """A record's value of one metric (infinite where it failed or did not measure it)."""
    if not record.measurement.ok:
        return math.inf
    return dict(record.measurement.metrics).get(metric, math.inf)


def _plots(section: Section, chosen: StoredResult | None) -> Markup:
    if not available():
        return tag("p", tag("small", MISSING))
    first, second = section.objectives()
    values = _metric_of
    plain = lambda words: words.replace("$", r"\$")  # (matplotlib would read $...$ as mathematics)
    title = plain(f"{section.unit} [{section.arch}]")
    parts = []
    if second is not None:
        points: dict[Genome, Evaluation] = {}
        for record in section.records:              # the first measurement of a genome counts
            scores = (values(record, first), values(record, second))
            points.setdefault(record.genome, Evaluation(record.genome, scores,
                                                        status=record.measurement.status))
        front = pareto_front(points.values())
        label = lambda m: plain(m + (f" ({UNITS_OF[m]})" if m in UNITS_OF else ""))
        parts.append(svg(front_figure(
            # (two objectives)
            [(e.objectives[0], e.objectives[1]) for e in points.values() if e.feasible],
            [(e.objectives[0], e.objectives[1]) for e in front],
            f"{title}: {len(points)} candidates", label(first), label(second),
            baseline=(values(section.baseline, first), values(section.baseline, second)),
            chosen=None if chosen is None else (values(chosen, first), values(chosen, second)))))
    start = section.records[0].time
    seconds = None
    if start and all(r.time for r in section.records):
        seconds = [r.time - start for r in section.records]
    parts.append(svg(convergence_figure([values(r, first) for r in section.records], seconds,
                                        values(section.baseline, first), f"{title}: best "
                                                                         f"{plain(first)} so far",
                                        plain(first))))
    # (matplotlib's SVG escapes its text)
    return join(tag("figure", Markup(p), class_="plot") for p in parts)


def _summary_row(section: Section) -> list:
    chosen = section.chosen()
    first, _ = section.objectives()
    target = section.entry()
    verdict = target.record("verdict") if target is not None else None
    if verdict:
        verdict_text = str(verdict.value)
    elif section.chosen_by():
        verdict_text = f"(entry by {section.chosen_by()})"
    else:
        verdict_text = "—"
    failed = sum(1 for r in section.records if not r.measurement.ok)
    return [tag("a", str(section.unit), href=f"#{_anchor(section)}"), section.arch, section.device,
            verdict_text,
            f"{first} {_change(section, chosen, first) or '—'}", str(len(section.records)),
            str(failed), "; ".join(map(str, section.stale)) or "up to date"]


def _anchor(section: Section) -> str:
    return "".join(c if c.isalnum() else "-" for c in section.title).strip("-")


STYLE = """body{font-family:sans-serif;max-width:1150px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2}section{border-top:2px solid #888;margin-top:2em}
figure.plot{display:inline-block;margin:0 .5em}figure.plot svg{max-width:100%;height:auto}
.stale{color:#a40}small{color:#666}table.kernel{display:inline-table;margin-right:1em}
table.kernel td:nth-child(n+2){text-align:right}caption{text-align:left;font-weight:bold}"""


def render(acf_path: Path, found: list[Section], stores: list[Path], aside: int,
           toolkit_version: str | None, unsearched: Sequence[tuple[str, str]] = ()) -> str:
    """The page: every value read from a file goes through report.markup's escaping."""
    body = [tag("h1", f"nvcc-evo report: {acf_path}"),
            tag("p", f"From {', '.join(str(s) for s in stores)}: "
                     f"{sum(len(s.records) for s in found)} evaluations of the sources as they "
                     "are now"
                     + (f" ({aside} of earlier sources left aside)" if aside else "")
                     + "; toolkit here: "
                     f"{toolkit_version or 'not found (staleness by toolkit not judged)'}. Written "
                     f"{time.strftime('%Y-%m-%d %H:%M')} without a GPU or a compile.")]
    if not found:
        body.append(tag("p", "No evaluations of these units in the results stores."))
    else:
        body.append(table(["unit", "target", "device", "verdict", "chosen vs baseline",
                           "evaluations", "failed", "stale"], [_summary_row(s) for s in found]))
    if unsearched:
        body += [tag("h2", "Units with no evaluations in these stores"),
                 table(["unit", "entries"], [[u, state] for u, state in unsearched])]
    for section in found:
        chosen = section.chosen()
        why = "; ".join(map(str, section.stale))
        stale = tag("p", f"Stale: {why}", class_="stale") if why else tag("p", "Up to date.")
        body.append(tag("section", tag("h2", section.title), stale,
                        tag("h3", "Chosen knobs"), _knobs(section), tag("h3", "Objectives"),
                        _objectives(section, chosen), tag("h3", "Kernels: baseline against chosen"),
                        _kernels(section, chosen, stores), tag("h3", "Verification"),
                        _verification(section),
                        tag("h3", "Front and convergence"), _plots(section, chosen),
                        tag("h3", "Failures"), _failures(section), id=_anchor(section)))
    head = join([Markup('<meta charset="utf-8">'), tag("title", "nvcc-evo report: "
                                                                f"{acf_path.name}"),
                 tag("style", Markup(STYLE))])
    return (f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>\n' + join(body,
                                                                                   Markup("\n"))
            + "\n</body></html>\n")


# ---------------------------------------------------------------- entry point
def run_report(acf: str | None, globs: tuple[str, ...], stores: list[str], out: str | None) -> int:
    """Write the report of the ACF (`--acf`, else the nearest) to `out`
    (default .nvcc-evo/report.html beside it); its path on stdout."""
    opened = open_project("the report", acf, globs)  # found, trusted, readable; settings
    acf_path, project = opened.acf_path, opened.settings         # ([report] stores, out: the
                                                                 # command line wins)
    file = load(acf_path)
    try:
        chosen = select_units(file, acf_path, tuple(globs), Path.cwd())
    except UsageError as error:
        raise UsageError(str(error).replace("--retune", "--report", 1)) from None
    # (a list, a str)
    listed, named = project.value("report.stores").value, project.value("report.out").value
    stores = stores or (listed if isinstance(listed, list) else [])
    out = out or (named if isinstance(named, str) else None)
    paths = [Path(s) for s in stores] or [acf_path.parent / ".nvcc-evo" / "results.jsonl"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"no results store at {', '.join(missing)} (a retune writes one; name "
                         "others with --store)")
    version = _toolkit_version(opened)
    found, aside, unsearched = sections(file, acf_path, paths, chosen, version)
    target = report_file(Path(out) if out else acf_path.parent / ".nvcc-evo" / "report.html")
    try:
        if out is None:
            folders(acf_path.parent, ".nvcc-evo")        # nvcc-evo's own folder: no link followed
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, render(acf_path, found, paths, aside, version, unsearched))
    except OSError as error:
        raise EnvironmentProblem(f"cannot write the report {target}: "
                                 f"{error.strerror or error}") from None
    if found and not available():
        print(f"nvcc-evo: note: the report has {MISSING}", file=sys.stderr)
    print(target)
    return ExitCode.OK


def report_file(named: Path) -> Path:
    """Where the report goes: a link, folder, device or FIFO of that name is
    refused (a cloned repository's `.nvcc-evo/report.html` may link to any
    file; the write is a rename over the name: as root `--out /dev/full`
    replaced the device with the page)."""
    try:
        check_regular(named)
    except Refused as refused:
        raise UsageError(f"the report file {refused} (or name another file with --out)") from None
    return named


def _toolkit_version(opened: Project) -> str | None:
    """The real nvcc's version (`nvcc --version`: no compile), None without one."""
    try:
        return toolkit_version(opened.real_nvcc())
    except (EnvironmentProblem, OSError):
        return None
