"""What one `--retune` does: its Options, each search setting decided once
from the command line, the environment, the project settings and the
built-in defaults (`with_settings`, the settings' own precedence), where each
came from (`say_settings`), the ptxas binaries its candidates choose among
(the build setting `ptxas`, as a build decides it), and the budget
(`decided`: the user's as given, else the backend's default from the table
of backends; `describe`).

A search setting is declared once, in the settings' table
(nvcc_evo.driver.specs.KEYS): its key, environment variable, type,
default, checks and help. Its Options field takes the default from there
(`_default`), `SETTING_FIELDS` pairs keys and fields, and `add_flags` makes
the `--retune` flags from the same rows. The fields are written out (not
made from the table at run time) so that a type checker can follow them;
tests/test_settings.py checks that they and the table agree.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nvcc_evo import backends
from nvcc_evo.acf.knobs import TOOLKIT_TOOL
from nvcc_evo.driver import settings
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.engine.space import SearchSpace
from nvcc_evo.system.say import log

if TYPE_CHECKING:
    from nvcc_evo.driver.toolkit import Toolkit


# How candidates are measured: "fast" races clearly slower candidates out
# and measures energy only where the tune block names it; "full" measures
# every candidate the whole way (energy, every timed launch), as before
# racing, for comparisons. The confirmation is the same in both.
PROTOCOLS = ("fast", "full")


# Options field of each project setting of the search, in the table's order.
SETTING_FIELDS = {name: settings.BY_NAME[name].field_name for name in settings.RETUNE_KEYS}
_KEY_OF = {field: settings.BY_NAME[name] for name, field in SETTING_FIELDS.items()}
FLAG_TYPES = {"int": int, "float": float}       # other kinds: the text as given


def _default(field: str):
    """The table's default of the setting an Options field holds."""
    return _KEY_OF[field].default


def _setting(name: str):
    """The table's default of a setting that is no search setting."""
    return settings.BY_NAME[name].default


@dataclass(frozen=True)
class Options:
    """What one retune does. The search's settings come from the command line,
    the environment, the project settings and the built-in defaults, in that
    order (`with_settings`, at the start of `run_retune`)."""
    acf: str | None = None
    globs: tuple[str, ...] = ()
    target: str | None = _default("target")
    all: bool = False
    backend: str = _default("backend")
    evaluations: float = _default("evaluations")     # a cap (inf: none, once decided)
    generations: int = _default("generations")
    seconds: float = _default("seconds")
    patience: int = _default("patience")
    population: int = _default("population")
    search: str = _default("search")              # operators, or guided (a surrogate proposes a share)
    seed: int = _default("seed")
    jobs: int | None = _default("jobs")
    timeout: float = _default("timeout")
    replay: str | None = _default("replay")
    dry_run: bool = False
    protocol: str = "fast"      # PROTOCOLS
    device: int = _default("device")              # the CUDA device the pycuda backend measures on
    gpus: str | None = _default("gpus")           # the GPUs it measures on, one lane each (execute.lanes)
    cluster: str | None = _default("cluster")     # a Ray cluster (execute.cluster), or None: this machine
    at_once: int | None = _default("at_once")     # searches run at once (execute.together; None: 1, or the cluster's)
    progress: str = _default("progress")          # auto (a live bar on a terminal), bar, lines
    # The ptxas binaries ptxas.version chooses among, as for a build: the project setting `ptxas`
    # (NVCC_EVO_PTXAS over the settings file; set here in code, it wins), decided by with_settings.
    ptxas: tuple[str, ...] = ()
    ptxas_source: str = settings.DEFAULT
    lock_wait: float = _setting("lock.wait")      # seconds a wait for another's lock lasts (system.locks)
    command_line: tuple[str, ...] = ()            # the fields given on the command line (they win)
    sources: tuple[tuple[str, str], ...] = ()     # (setting, where its value came from), by with_settings


def with_settings(options: Options, project: settings.Settings) -> Options:
    """The options with each search setting decided once (command line >
    environment > settings file > default) and where each came from. A field
    set in code to other than its default counts as given on the command line."""
    given = {key: getattr(options, name) for key, name in SETTING_FIELDS.items()
             if name in options.command_line or getattr(options, name) != settings.BY_NAME[key].default}
    chosen = {key: project.value(key, given) for key in SETTING_FIELDS}
    listed = project.value("ptxas", {"ptxas": list(options.ptxas)} if options.ptxas else None)
    value = listed.value                       # a path list: text (the environment) or a list (file, code)
    paths = value.split(os.pathsep) if isinstance(value, str) else value if isinstance(value, list) else []
    # Each value has its key's type (specs.KEYS checks it; tests/test_settings.py checks the fields).
    decided: dict[str, Any] = {SETTING_FIELDS[key]: value.value for key, value in chosen.items()}
    return replace(options, **decided,
                   sources=tuple((key, value.source) for key, value in chosen.items()),
                   ptxas=tuple(p for p in paths if p), ptxas_source=listed.source,
                   lock_wait=cast(float, project.value("lock.wait").value))


def add_flags(parser) -> None:
    """A `--retune` flag for each search setting, from the settings' table:
    its spelling, the Options field it fills, type, choices, metavar and help
    (the default said by the table)."""
    for field, key in _KEY_OF.items():
        parser.add_argument(key.flag, dest=field, type=FLAG_TYPES.get(key.kind, str), choices=key.choices or None,
                            metavar=key.metavar or None, help=key.help())


def usage() -> list[str]:
    """`[--flag VALUE]` of each search setting, for `--evo-help`."""
    return [key.usage() for key in _KEY_OF.values()]


def backend_resolved(options: Options, backend: str) -> Options:
    """`options` with `auto` resolved to `backend`, its source saying so (a
    dry run showed "backend = 'static' (built-in default)": the default is auto)."""
    if options.backend != backends.AUTO or backend == backends.AUTO:
        return replace(options, backend=backend)
    sources = dict(options.sources)
    asked = sources.get("retune.backend", settings.DEFAULT)
    why = backends.row(backend).auto or "the cluster's"
    said = f"auto, {'built-in default' if asked == settings.DEFAULT else asked}: {why}"
    return replace(options, backend=backend, sources=tuple({**sources, "retune.backend": said}.items()))


def say_settings(project: settings.Settings, options: Options) -> None:
    """Where the search's settings came from: every one in a dry run, else
    those not left at their defaults."""
    where = f"project settings {project.path}" if project.path else "no project settings file"
    sources = dict(options.sources)
    shown = [key for key in SETTING_FIELDS if options.dry_run or sources[key] != settings.DEFAULT]
    values = [f"{key.partition('.')[2]} = {settings.Value(getattr(options, SETTING_FIELDS[key]), sources[key])}"
              for key in shown]
    if options.dry_run or options.ptxas_source != settings.DEFAULT:      # a build setting the candidates use too
        values.append(f"ptxas = {settings.Value(list(options.ptxas) or None, options.ptxas_source)}")
    if not values:
        return
    log(f"settings ({where}):\n    " + "\n    ".join(values))


def ptxas_programs(space: SearchSpace, toolkit: Toolkit, acf_path: Path, options: Options, arch: str,
                   fixed=None) -> dict[str, str | None]:
    """{ptxas.version value: the ptxas binary} for the releases the space
    names (and `fixed`, the unit's value outside it) besides the toolkit's,
    chosen among the binaries a build chooses among (`options.ptxas`: the
    project setting `ptxas`, NVCC_EVO_PTXAS over the settings file). One that
    is not listed, or whose cubins the driver here does not load (asked where
    the backend runs them on this machine's GPU), is an error before anything
    is searched, saying which."""
    from nvcc_evo.driver.cmdline import ptxas
    dimension = next((d for d in space.dimensions if d.knob == "ptxas.version"), None)
    wanted = [str(v) for v in (*(dimension.choices if dimension else ()), fixed) if v not in (None, TOOLKIT_TOOL)]
    listed = {ptxas.PTXAS_ENV: os.pathsep.join(options.ptxas)}
    programs = {}
    for version in dict.fromkeys(wanted):
        try:
            found = ptxas.choose(version, toolkit, listed)
        except ptxas.NoPtxas as missing:
            raise EnvironmentProblem(f"{acf_path}: ptxas.version {version}: {missing}"
                                     + (f" (the list: {options.ptxas_source})" if options.ptxas else "")) from None
        if backends.row(options.backend).needs_gpu:
            problem = ptxas.driver_problem(found, arch)
            if problem:
                raise EnvironmentProblem(f"{acf_path}: ptxas.version {version}: {problem}")
        programs[version] = None if found == ptxas.toolkit_ptxas(toolkit) else found.path
    return programs


INF = math.inf
# The budget of a backend not resolved yet ("auto" in code that skips run_retune): auto's choice without a GPU.
FALLBACK = backends.row(backends.auto_choice(gpu=False))


def _given(options: Options, name: str) -> bool:
    """The setting came from the user (command line, environment, a settings
    file), or was set in code: not left to the built-in default."""
    sources = dict(options.sources)
    key = f"retune.{name}"
    if key in sources:
        return sources[key] != settings.DEFAULT
    return getattr(options, settings.BY_NAME[key].field_name) is not None


def decided(options: Options) -> Options:
    """`options` with the budget filled in: the user's as given (`--evaluations N` alone is N evaluations
    and no time limit, `--time-limit S` alone S seconds and no cap, both are both), else the backend's
    default (its row in the table of backends), its source saying so."""
    evaluations, seconds = _given(options, "evaluations"), _given(options, "time-limit")
    if evaluations or seconds:
        return replace(options, evaluations=options.evaluations if evaluations else INF,
                       seconds=options.seconds if seconds else INF)
    default = backends.BACKENDS.get(options.backend, FALLBACK)
    said = f"built-in default for the {options.backend} backend"
    sources = {**dict(options.sources), "retune.evaluations": said, "retune.time-limit": said}
    return replace(options, evaluations=default.evaluations, seconds=default.seconds,
                   sources=tuple(sources.items()))


def describe(options: Options) -> str:
    """The budget in words, said before the search: `budget 180 s (built-in
    default for the pycuda backend)`."""
    options = decided(options) if options.evaluations is None or options.seconds is None else options
    parts = []
    if math.isfinite(options.seconds):
        parts.append(f"{options.seconds:g} s")
    if math.isfinite(options.evaluations):
        parts.append(f"{options.evaluations} evaluations")
    source = dict(options.sources).get("retune.time-limit" if math.isfinite(options.seconds)
                                       else "retune.evaluations", "")
    said = "budget " + (" or ".join(parts) or "none") + (f" ({source})" if source.startswith("built-in") else "")
    if options.patience is not None:
        said += f", stopping after {options.patience} generations without a new front point"
    return said
