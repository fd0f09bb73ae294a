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

import html
import math
import time
from pathlib import Path
from typing import Sequence

from nvcc_evo.acf.edit.spelling import show_value
from nvcc_evo.engine.evolve import Evaluation, pareto_front
from nvcc_evo.engine.space import Genome
from nvcc_evo.report.plots import MISSING, available, convergence_figure, front_figure, svg
from nvcc_evo.report.sections import Section, sections
from nvcc_evo.execute.store import Record

UNITS_OF = {"runtime": "us", "energy": "mJ", "power": "W", "spills": "bytes"}


def _metric(record: Record | None, name: str) -> str:
    if record is None:
        return "—"
    metrics, spreads = dict(record.measurement.metrics), dict(record.measurement.spreads)
    value = metrics.get(name)
    if value is None or not math.isfinite(value):
        return "—"
    spread = spreads.get(name)
    return f"{value:.4g}" + (f" <small>p20..p80 {spread:.2%} wide</small>" if spread else "")   # (relative)


def _change(section: Section, chosen: Record | None, name: str) -> str:
    base = dict(section.baseline.measurement.metrics).get(name)
    mine = dict(chosen.measurement.metrics).get(name) if chosen is not None else None
    if not base or mine is None or not (math.isfinite(base) and math.isfinite(mine)):
        return ""
    return f"{mine / base - 1:+.1%}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = lambda row, tag: "".join(f"<{tag}>{c}</{tag}>" for c in row)
    return ("<table><tr>" + cells(head, "th") + "</tr>" + "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
            + "</table>")


def _knobs(section: Section) -> str:
    target = section.entry()
    if chosen_by := section.chosen_by():
        return f"<p>{_elsewhere(section, chosen_by)}</p>"
    if target is None:
        return f"<p>No entry for {section.arch} in the ACF.</p>"
    chosen = {s.knob: show_value(s.value) for s in target.settings}
    base = dict(section.baseline.genome.items)
    rows = [[html.escape(k), html.escape(show_value(base[k]) if base.get(k) is not None else "(default)"),
             f"<b>{html.escape(v)}</b>"] for k, v in chosen.items()]
    return _table(["knob", "baseline", "chosen"], rows) if rows else "<p>The entry keeps the defaults.</p>"


def _objectives(section: Section, chosen: Record | None) -> str:
    metrics = [m for m, _ in section.baseline.measurement.metrics]
    rows = [[m + (f" ({UNITS_OF[m]})" if m in UNITS_OF else ""), _metric(section.baseline, m),
             _metric(chosen, m), _change(section, chosen, m)] for m in metrics]
    note = "" if chosen is not None else "<p>The entry's knobs are not among these evaluations.</p>"
    if section.apart:
        note += (f"<p>{section.apart} evaluation(s) of another search space or build are not part of this "
                 f"section (its baseline is the current space's and build's).</p>")
    return _table(["objective", "baseline", "chosen", "change"], rows) + note


def _kernels(section: Section, chosen: Record | None, stores: list[Path]) -> str:
    """The baseline's and the chosen build's kernels, as the retune that chose it compared them."""
    from nvcc_evo.retune.kernels import STORE_NAME, KernelStore
    from nvcc_evo.retune.kernelview import html_tables
    if chosen is None:
        return "<p>The entry's knobs are not among these evaluations.</p>"
    for folder in dict.fromkeys(store.parent for store in stores):
        found = KernelStore(folder / STORE_NAME).latest(str(section.unit), section.arch, section.baseline.sass_hash,
                                                        chosen.sass_hash)
        if found is not None:
            return html_tables(found)
    return ("<p>No comparison of these two builds recorded (a retune records one as it ends; "
            "<code>nvcc-evo --sass</code> builds one in the terminal).</p>")


def _verification(section: Section) -> str:
    target = section.entry()
    if chosen_by := section.chosen_by():
        return f"<p>{_elsewhere(section, chosen_by)}</p>"
    if target is None or not target.provenance:
        return "<p>No provenance: never tuned.</p>"
    keys = ("verdict", "test", "p_value", "effect_size", "significant", "date", "evaluations", "search_seconds")
    shown = [r for r in target.provenance if r.key in keys or r.key.startswith(("baseline.", "tuned."))]
    text = lambda value: value if isinstance(value, str) else show_value(value)
    rows = [[html.escape(r.key), html.escape(text(r.value)) + (f" ± {r.spread:g}" if r.spread else "")]
            for r in shown]
    return _table(["provenance", "value"], rows)


def _elsewhere(section: Section, chosen_by: str) -> str:
    return (f"The ACF's entry for {html.escape(section.arch)} was chosen by the {html.escape(chosen_by)} "
            f"backend, not from these evaluations.")


def _failures(section: Section) -> str:
    failed: dict[str, list] = {}
    for record in section.records:
        if not record.measurement.ok:
            entry = failed.setdefault(record.measurement.status, [0, record])
            entry[0] += 1
    if not failed:
        return f"<p>No failures in {len(section.records)} evaluations.</p>"
    rows = []
    for status, (count, example) in sorted(failed.items(), key=lambda s: -s[1][0]):
        line = next((l for l in example.measurement.detail.splitlines() if l.strip()), "(no message)")
        knobs = ", ".join(f"{k}={show_value(v)}" for k, v in example.genome.items if v is not None)
        rows.append([html.escape(status), str(count), f"<code>{html.escape(line[:300])}</code><br>"
                     f"<small>{html.escape(knobs)}</small>"])
    return _table(["status", "count", "example"], rows)


def _plots(section: Section, chosen: Record | None) -> str:
    if not available():
        return f"<p><small>{html.escape(MISSING)}</small></p>"
    first, second = section.objectives()
    values = lambda r, m: dict(r.measurement.metrics).get(m, math.inf) if r.measurement.ok else math.inf
    parts = []
    if second is not None:
        points: dict[Genome, Evaluation] = {}
        for record in section.records:              # the first measurement of a genome counts
            points.setdefault(record.genome, Evaluation(record.genome, (values(record, first), values(record, second)),
                                                        status=record.measurement.status))
        front = pareto_front(points.values())
        label = lambda m: m + (f" ({UNITS_OF[m]})" if m in UNITS_OF else "")
        parts.append(svg(front_figure(
            [(e.objectives[0], e.objectives[1]) for e in points.values() if e.feasible],     # (two objectives)
            [(e.objectives[0], e.objectives[1]) for e in front],
            f"{section.unit} [{section.arch}]: {len(points)} candidates", label(first), label(second),
            baseline=(values(section.baseline, first), values(section.baseline, second)),
            chosen=(values(chosen, first), values(chosen, second)) if chosen is not None else None)))
    start = section.records[0].time
    seconds = [r.time - start for r in section.records] if start and all(r.time for r in section.records) else None
    parts.append(svg(convergence_figure([values(r, first) for r in section.records], seconds,
                                        values(section.baseline, first), f"{section.unit} [{section.arch}]: "
                                        f"best {first} so far", first)))
    return "".join(f'<figure class="plot">{p}</figure>' for p in parts)


def _summary_row(section: Section) -> list[str]:
    chosen = section.chosen()
    first, _ = section.objectives()
    target = section.entry()
    verdict = target.record("verdict") if target is not None else None
    verdict_text = str(verdict.value) if verdict else (f"(entry by {section.chosen_by()})" if section.chosen_by() else "—")
    failed = sum(1 for r in section.records if not r.measurement.ok)
    return [f'<a href="#{_anchor(section)}">{html.escape(str(section.unit))}</a>', section.arch,
            html.escape(section.device), html.escape(verdict_text),
            f"{first} {_change(section, chosen, first) or '—'}", str(len(section.records)), str(failed),
            html.escape("; ".join(section.stale) or "up to date")]


def _anchor(section: Section) -> str:
    return "".join(c if c.isalnum() else "-" for c in section.title).strip("-")


STYLE = """body{font-family:sans-serif;max-width:1150px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f2f2f2}section{border-top:2px solid #888;margin-top:2em}
figure.plot{display:inline-block;margin:0 .5em}figure.plot svg{max-width:100%;height:auto}
.stale{color:#a40}small{color:#666}table.kernel{display:inline-table;margin-right:1em}
table.kernel td:nth-child(n+2){text-align:right}caption{text-align:left;font-weight:bold}"""


def render(acf_path: Path, found: list[Section], stores: list[Path], aside: int, toolkit_version: str | None,
           unsearched: Sequence[tuple[str, str]] = ()) -> str:
    body = [f"<h1>nvcc-evo report: {html.escape(str(acf_path))}</h1>",
            f"<p>From {', '.join(html.escape(str(s)) for s in stores)}: {sum(len(s.records) for s in found)} "
            f"evaluations of the sources as they are now"
            + (f" ({aside} of earlier sources left aside)" if aside else "")
            + f"; toolkit here: {html.escape(toolkit_version or 'not found (staleness by toolkit not judged)')}. "
            f"Written {time.strftime('%Y-%m-%d %H:%M')} without a GPU or a compile.</p>"]
    if not found:
        body.append("<p>No evaluations of these units in the results stores.</p>")
    else:
        body.append(_table(["unit", "target", "device", "verdict", "chosen vs baseline", "evaluations",
                            "failed", "stale"], [_summary_row(s) for s in found]))
    if unsearched:
        body += ["<h2>Units with no evaluations in these stores</h2>",
                 _table(["unit", "entries"], [[html.escape(u), html.escape(state)] for u, state in unsearched])]
    for section in found:
        chosen = section.chosen()
        stale = (f'<p class="stale">Stale: {html.escape("; ".join(section.stale))}</p>' if section.stale
                 else "<p>Up to date.</p>")
        body += [f'<section id="{_anchor(section)}"><h2>{html.escape(section.title)}</h2>', stale,
                 "<h3>Chosen knobs</h3>", _knobs(section), "<h3>Objectives</h3>", _objectives(section, chosen),
                 "<h3>Kernels: baseline against chosen</h3>", _kernels(section, chosen, stores),
                 "<h3>Verification</h3>", _verification(section), "<h3>Front and convergence</h3>",
                 _plots(section, chosen), "<h3>Failures</h3>", _failures(section), "</section>"]
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>nvcc-evo report: "
            f"{html.escape(acf_path.name)}</title><style>{STYLE}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


# ---------------------------------------------------------------- entry point
def run_report(acf: str | None, globs: tuple[str, ...], stores: list[str], out: str | None) -> int:
    """Write the report of the ACF (`--acf`, else the nearest) to `out`
    (default .nvcc-evo/report.html beside it); its path on stdout."""
    import os
    import sys
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver import settings
    from nvcc_evo.driver.common import replace_file
    from nvcc_evo.system.files import folders
    from nvcc_evo.driver.common import ACF_NAME
    from nvcc_evo.driver.match.find import acf_problem, find_acf, untrusted_acf
    from nvcc_evo.errors import EnvironmentProblem, ExitCode, UsageError
    from nvcc_evo.retune.tasks import select_units
    acf_path = Path(acf).resolve() if acf else find_acf([Path.cwd()], os.environ)
    if acf_path is None:
        raise UsageError(f"no {ACF_NAME} here or above; name one with --acf")
    problem = (not acf and untrusted_acf(acf_path, os.environ)) or acf_problem(acf_path, os.environ)
    if problem:           # another user's ACF; a folder, a FIFO, a link loop of that name
        raise EnvironmentProblem(problem)
    file = load(acf_path)
    try:
        chosen = select_units(file, acf_path, tuple(globs), Path.cwd())
    except UsageError as error:
        raise UsageError(str(error).replace("--retune", "--report", 1)) from None
    project = settings.load(acf_path, os.environ)          # [report] stores, out: the command line wins
    if project.ignored:
        print(f"nvcc-evo: warning: {project.ignored}; the report goes on without them", file=sys.stderr)
    listed, named = project.value("report.stores").value, project.value("report.out").value   # (a list, a str)
    stores = stores or (listed if isinstance(listed, list) else [])
    out = out or (named if isinstance(named, str) else None)
    paths = [Path(s) for s in stores] or [acf_path.parent / ".nvcc-evo" / "results.jsonl"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"no results store at {', '.join(missing)} (a retune writes one; name others with --store)")
    version = _toolkit_version()
    found, aside, unsearched = sections(file, acf_path, paths, chosen, version)
    target = report_file(Path(out) if out else acf_path.parent / ".nvcc-evo" / "report.html")
    try:
        if out is None:
            folders(acf_path.parent, ".nvcc-evo")        # nvcc-evo's own folder: no link followed
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, render(acf_path, found, paths, aside, version, unsearched))
    except OSError as error:
        raise EnvironmentProblem(f"cannot write the report {target}: {error.strerror or error}") from None
    if found and not available():
        print(f"nvcc-evo: note: the report has {MISSING}", file=sys.stderr)
    print(target)
    return ExitCode.OK


def report_file(named: Path) -> Path:
    """Where the report goes: a link, folder, device or FIFO of that name is
    refused (a cloned repository's `.nvcc-evo/report.html` may link to any
    file; the write is a rename over the name: as root `--out /dev/full`
    replaced the device with the page)."""
    from nvcc_evo.errors import UsageError
    from nvcc_evo.system.files import Refused, check_regular
    try:
        check_regular(named)
    except Refused as refused:
        raise UsageError(f"the report file {refused} (or name another file with --out)") from None
    return named


def _toolkit_version() -> str | None:
    """The real nvcc's version (`nvcc --version`: no compile), None without one."""
    from nvcc_evo.driver.common import NvccNotFound, find_real_nvcc
    from nvcc_evo.driver.toolkit import toolkit_version
    try:
        return toolkit_version(Path(find_real_nvcc()))
    except (NvccNotFound, OSError):
        return None
