"""What one `--retune` does, decided once.

`Request` is what the command line (or code) asks: each search setting
given, None where it is not. `run_retune` makes the retune's one `Options`
of it, after the project is opened, in two calls: `choose_settings` (each setting by
the settings' precedence, `driver.settings.Settings.value`: command line >
environment > settings file > built-in default, with where it came from:
`Chosen`), then `decide_options` (`auto` resolved where candidates are measured,
`Machine`; the budget: the user's as given, else the backend's default from
the table of backends; the pycuda backend's default target, the GPU's). The
Options is frozen: nothing below `run_retune` decides a setting again or
holds the Options; a stage takes the few of its values it needs, made once
there (`selection`: which units and how their tasks are found; `measuring`:
what makes the backend; `preparing`: what each search is prepared with;
`searching`: what its engine is asked, the budget (`Limits`) among it;
`ptxas`: the binaries ptxas.version chooses among, as a build decides them,
`PtxasList`). `say_settings` and `describe` say them.

A search setting is declared once, in the settings' table
(nvcc_evo.driver.specs.KEYS): its key, environment variable, type,
default, checks and help. `SETTING_FIELDS` pairs keys and the fields of
Request and Options, and `add_flags` makes the `--retune` flags from the
same rows. The fields are written out (not made from the table at run time)
so that a type checker can follow them; tests/test_settings.py checks that
they and the table agree.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from nvcc_evo import backends
from nvcc_evo.acf.knobs import TOOLKIT_TOOL
from nvcc_evo.driver import settings, specs
from nvcc_evo.driver.cmdline import ptxas
from nvcc_evo.driver.specs import Gpus, RayPlace
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.engine.space import SearchSpace
from nvcc_evo.execute.devices import Measuring
from nvcc_evo.system.say import log

if TYPE_CHECKING:
    from argparse import ArgumentParser

    from nvcc_evo.acf.knobs import Scalar
    from nvcc_evo.driver.toolkit import Toolkit


# How candidates are measured: "fast" races clearly slower candidates out
# and measures energy only where the tune block names it; "full" measures
# every candidate the whole way (energy, every timed launch), as before
# racing, for comparisons. The confirmation is the same in both.
PROTOCOLS = ("fast", "full")
INF = math.inf

# Request's and Options' field of each project setting of the search, in the table's order.
SETTING_FIELDS = {name: settings.BY_NAME[name].field_name for name in settings.RETUNE_KEYS}
_KEY_OF = {field: settings.BY_NAME[name] for name, field in SETTING_FIELDS.items()}
FLAG_TYPES = {"int": int, "float": float}       # other kinds: the text as given


@dataclass(frozen=True)
class Request:
    """What one retune is asked: the units, a dry run or not, the protocol,
    and each search setting given on the command line (or in code); None:
    not given (the environment, the settings file or the default decides)."""
    acf: str | None = None
    globs: tuple[str, ...] = ()
    all: bool = False
    dry_run: bool = False
    protocol: str = "fast"      # PROTOCOLS
    backend: str | None = None
    evaluations: int | None = None
    generations: int | None = None
    seconds: float | None = None
    patience: int | None = None
    population: int | None = None
    search: str | None = None
    seed: int | None = None
    jobs: int | None = None
    timeout: float | None = None
    replay: str | None = None
    target: str | None = None
    device: int | None = None
    gpus: str | None = None
    cluster: str | None = None
    at_once: int | None = None
    progress: str | None = None
    ptxas: tuple[str, ...] = ()     # ptxas binaries set in code: they win over NVCC_EVO_PTXAS
                                    # and the file

    def given(self) -> dict[str, object]:
        """{setting key: value} of the search settings given."""
        return {key: getattr(self, name) for key, name in SETTING_FIELDS.items()
                if getattr(self, name) is not None}


class PtxasList(NamedTuple):
    """The ptxas binaries ptxas.version chooses among, as a build chooses
    (the project setting `ptxas`: NVCC_EVO_PTXAS over the settings file),
    and where the list came from."""
    paths: tuple[str, ...] = ()
    source: str = settings.DEFAULT


def ptxas_listed(project: settings.Settings, given: tuple[str, ...] = ()) -> PtxasList:
    """The project's `ptxas` list (`given`, set in code, wins)."""
    listed = project.value("ptxas", {"ptxas": list(given)} if given else None)
    return PtxasList(tuple(p for p in _paths(listed.value) if p), listed.source)


def _paths(value: object) -> list[str]:
    """A path list as a setting holds it: text (the environment), or a list (the file, code)."""
    if isinstance(value, str):
        return value.split(os.pathsep)
    if isinstance(value, list):
        return value
    return []


class Chosen(NamedTuple):
    """Each setting of a retune as the settings' precedence chose it, with
    its source; what `decide_options` makes the Options of, and what `run_retune`
    reads before it can (the cluster to connect to, the lock's wait, the
    target to check)."""
    values: dict                      # setting key -> settings.Value
    ptxas: PtxasList
    lock_wait: float
    cluster: RayPlace | None          # retune.cluster, parsed

    def value(self, key: str) -> object:
        return self.values[key].value

    def source(self, key: str) -> str:
        return self.values[key].source


def choose_settings(request: Request, project: settings.Settings) -> Chosen:
    """Each search setting by the settings' precedence (command line >
    environment > settings file > default), and the build settings a retune
    reads too (`ptxas`, `lock.wait`)."""
    given = request.given()
    values = {key: project.value(key, given) for key in SETTING_FIELDS}
    lock_wait = cast(float, project.value("lock.wait").value)
    return Chosen(values, ptxas_listed(project, request.ptxas), lock_wait,
                  specs.ray_place(cast("str | None", values["retune.cluster"].value)))


class Machine(Protocol):
    """What deciding the options asks of where candidates are measured (this machine, or the
    cluster)."""

    def backend(self, asked: str) -> str: ...       # `auto` resolved (another backend: itself)

    def gpu_target(self, device: int) -> str: ...   # the SASS architecture of the GPU measured on


@dataclass(frozen=True)
class Options:
    """What one retune does, every setting decided (`decide_options`, once, at the
    start of `run_retune`): the backend resolved (never `auto`), the budget
    (inf where there is no limit), where each setting came from (`sources`)."""
    globs: tuple[str, ...]
    all: bool
    dry_run: bool
    protocol: str                     # PROTOCOLS
    backend: str
    auto: bool                        # the backend was `auto`, resolved here (search.speedsafe:
                                      # what waits for a GPU)
    evaluations: float                # a cap (inf: none)
    generations: int | None
    seconds: float                    # the time per unit and target (inf: none)
    patience: int | None
    population: int
    search: str                       # bayes, operators or guided (driver.specs.SEARCHES)
    seed: int
    jobs: int | None
    timeout: float
    replay: str | None
    target: str | None
    device: int                       # the CUDA device the pycuda backend measures on
    gpus: Gpus | None                 # the GPUs it measures on, one lane each (execute.lanes)
    cluster: RayPlace | None          # a Ray cluster (execute.cluster), or None: this machine
    at_once: int | None               # searches run at once (execute.together; None: 1, or the
                                      # cluster's)
    progress: str                     # auto (a live bar on a terminal), bar, lines
    ptxas: PtxasList
    lock_wait: float                  # seconds a wait for another's lock lasts (system.locks)
    sources: tuple[tuple[str, str], ...]    # (setting, where its value came from)

    def selection(self) -> Selection:
        return Selection(self.globs, self.all, self.target, self.backend, self.timeout,
                         self.dry_run)

    def measuring(self) -> Measuring:
        return Measuring(self.backend, self.device, self.gpus, self.replay, self.timeout,
                         self.protocol == "full")

    def preparing(self) -> Preparing:
        return Preparing(self.measuring(), self.ptxas, self.jobs, describe(self))

    def searching(self) -> Searching:
        limits = Limits(self.evaluations, self.generations, self.patience, self.seconds)
        return Searching(limits, self.population, self.search, self.seed,
                         self.progress, self.protocol == "fast", self.backend)


class Selection(NamedTuple):
    """Which units and targets a retune asks for (globs, all, a target) and
    what finding their tasks needs of how they are measured (the backend,
    the bench's timeout, a dry run runs no bench)."""
    globs: tuple[str, ...] = ()
    all: bool = False
    target: str | None = None
    backend: str = "static"
    timeout: float = cast(float, settings.BY_NAME["retune.timeout"].default)
    dry_run: bool = False


class Preparing(NamedTuple):
    """What preparing each search needs (retune.search.prepare): what makes the backend (the
    backend and the protocol among it), the ptxas binaries ptxas.version chooses among, the compile
    jobs, the budget in words (`describe`, said as the search starts)."""
    measuring: Measuring
    ptxas: PtxasList
    jobs: int | None
    budget: str


class Limits(NamedTuple):
    """A search's budget as decided (engine.budget.Asked, and its time): inf where there is no
    cap or no time limit."""
    evaluations: float
    generations: int | None
    patience: int | None
    seconds: float            # per unit and target


class Searching(NamedTuple):
    """What each search asks of its engine (retune.search.tune): the budget, the population, what
    proposes beside the operators (`search`: driver.specs.SEARCHES), the generator's seed, how
    progress is shown, the fast protocol (compiles ahead of the engine), the backend whose entry
    may stand."""
    limits: Limits
    population: int
    search: str
    seed: int
    progress: str             # auto, bar, lines
    fast: bool
    backend: str


def decide_options(request: Request, chosen: Chosen, machine: Machine) -> Options:
    """The retune's Options: the chosen settings, `auto` resolved by
    `machine`, the budget (the user's as given: `--evaluations N` alone is N
    evaluations and no time limit, `--time-limit S` alone S seconds and no
    cap, both are both; else the backend's default, its row in the table of
    backends, its source saying so), the pycuda backend's target where none
    is given (the GPU's; not in a dry run, which starts no GPU process)."""
    value, sources = chosen.value, {key: chosen.source(key) for key in SETTING_FIELDS}
    asked = cast(str, value("retune.backend"))
    backend = machine.backend(asked)
    row = backends.row(backend)
    if asked == backends.AUTO and backend != backends.AUTO:
        why = row.auto or "the cluster's"
        source = sources["retune.backend"]
        given = "built-in default" if source == settings.DEFAULT else source
        sources["retune.backend"] = f"auto, {given}: {why}"
    evaluations = cast("float | None", value("retune.evaluations"))
    seconds = cast("float | None", value("retune.time-limit"))
    if evaluations is None and seconds is None:
        evaluations, seconds = row.evaluations, row.seconds
        default = f"built-in default for the {backend} backend"
        sources["retune.evaluations"] = sources["retune.time-limit"] = default
    device, target = cast(int, value("retune.device")), cast("str | None", value("retune.target"))
    if row.needs_gpu and target is None and not request.dry_run:
        target = machine.gpu_target(device)          # what this GPU runs
    return Options(
        request.globs, request.all, request.dry_run, request.protocol, backend,
        asked == backends.AUTO, evaluations if evaluations is not None else INF,
        cast("int | None", value("retune.generations")), seconds if seconds is not None else INF,
        cast("int | None", value("retune.patience")), cast(int, value("retune.population")),
        cast(str, value("retune.search")), cast(int, value("retune.seed")),
        cast("int | None", value("retune.jobs")), cast(float, value("retune.timeout")),
        cast("str | None", value("retune.replay")), target, device,
        specs.gpus(cast("str | None", value("retune.gpus"))), chosen.cluster,
        cast("int | None", value("retune.at-once")), cast(str, value("retune.progress")),
        chosen.ptxas, chosen.lock_wait, tuple(sources.items()))


def add_flags(parser: ArgumentParser) -> None:
    """A `--retune` flag for each search setting, from the settings' table:
    its spelling, the Options field it fills, type, choices, metavar and help
    (the default said by the table)."""
    for field, key in _KEY_OF.items():
        parser.add_argument(key.flag, dest=field, type=FLAG_TYPES.get(key.kind, str),
                            choices=key.choices or None, metavar=key.metavar or None,
                            help=key.help())


def usage() -> list[str]:
    """`[--flag VALUE]` of each search setting, for `--evo-help`."""
    return [key.usage() for key in _KEY_OF.values()]


def say_settings(project: settings.Settings, options: Options) -> None:
    """Where the search's settings came from: every one in a dry run, else
    those not left at their defaults."""
    where = f"project settings {project.path}" if project.path else "no project settings file"
    sources = dict(options.sources)
    shown = [key for key in SETTING_FIELDS if options.dry_run or sources[key] != settings.DEFAULT]
    values = [f"{key.partition('.')[2]} = "
              f"{settings.Value(_as_given(getattr(options, SETTING_FIELDS[key])), sources[key])}"
              for key in shown]
    if options.dry_run or options.ptxas.source != settings.DEFAULT:
        # (a build setting the candidates use too)
        listed = settings.Value(list(options.ptxas.paths) or None, options.ptxas.source)
        values.append(f"ptxas = {listed}")
    if not values:
        return
    log(f"settings ({where}):\n    " + "\n    ".join(values))


def _as_given(value: object) -> object:
    """A setting's value as the user wrote it (a parsed form: its text)."""
    return value.text if isinstance(value, (Gpus, RayPlace)) else value


def ptxas_programs(space: SearchSpace, toolkit: Toolkit, acf_path: Path, listed: PtxasList,
                   backend: str, arch: str, fixed: Scalar | None = None) -> dict[str, str | None]:
    """{ptxas.version value: the ptxas binary} for the releases the space
    names (and `fixed`, the unit's value outside it) besides the toolkit's,
    chosen among the binaries a build chooses among (`listed`). One that
    is not listed, or whose cubins the driver here does not load (asked where
    the `backend` runs them on this machine's GPU), is an error before
    anything is searched, saying which."""
    dimension = next((d for d in space.dimensions if d.knob == "ptxas.version"), None)
    named = (*(dimension.choices if dimension else ()), fixed)
    wanted = [str(v) for v in named if v not in (None, TOOLKIT_TOOL)]
    environ = {ptxas.PTXAS_ENV: os.pathsep.join(listed.paths)}
    programs = {}
    for version in dict.fromkeys(wanted):
        try:
            found = ptxas.choose(version, toolkit, environ)
        except ptxas.NoPtxas as missing:
            where = f" (the list: {listed.source})" if listed.paths else ""
            said = f"{acf_path}: ptxas.version {version}: {missing}{where}"
            raise EnvironmentProblem(said) from None
        if backends.row(backend).needs_gpu:
            problem = ptxas.driver_problem(found, arch)
            if problem:
                raise EnvironmentProblem(f"{acf_path}: ptxas.version {version}: {problem}")
        programs[version] = None if found == ptxas.toolkit_ptxas(toolkit) else found.path
    return programs


def describe(options: Options) -> str:
    """The budget in words, said before the search: `budget 180 s (built-in
    default for the pycuda backend: kernels timed on the GPU, hundreds of
    binaries a minute)`, the backend's row saying why its default is what it is."""
    parts = []
    if math.isfinite(options.seconds):
        parts.append(f"{options.seconds:g} s")
    if math.isfinite(options.evaluations):
        parts.append(f"{options.evaluations} evaluations")
    source = dict(options.sources).get("retune.time-limit" if math.isfinite(options.seconds)
                                       else "retune.evaluations", "")
    said = "budget " + (" or ".join(parts) or "none")
    if source.startswith("built-in"):
        said += f" ({source}: {backends.row(options.backend).budget_why})"
    if options.patience is not None:
        said += f", stopping after {options.patience} generations without a new front point"
    return said
