"""What each project setting is, and the forms of those whose values are specs.

The key table (`KEYS`): each setting declared once, with its environment
variable, type, default, checks and help; driver.settings reads a file and
the environment by it, and nvcc_evo.retune.scope.options makes a retune's Options
fields and `--retune` flags from its `retune.` rows. The settings whose
values are specs (`retune.gpus`, `retune.cluster`, a target): their forms,
which driver.settings checks wherever a value comes from (so that a bad one
stops a retune before anything starts, saying where it is), and the typed
values execute receives (`gpus`, `ray_place`), parsed by the same forms once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from nvcc_evo.backends import CHOICES as BACKENDS, help_text as backend_help
from nvcc_evo.driver.common import LOG_ENV, REAL_NVCC_ENV, STALE_CHOICES, STALE_ENV
from nvcc_evo.errors import UsageError

FORMS = {
    "gpus": (re.compile(r"\s*(?:all|count:([1-9][0-9]*)|([0-9]+(?:\s*,\s*[0-9]+)*))\s*"),
             "all, count:N or device numbers (0 or 0,2)"),
    "cluster": (re.compile(r"\s*(auto|ray://\S+|local(?::([1-9][0-9]*))?)\s*"), "ray://HEAD:PORT, "
                                                                                "auto, local or "
                                                                                "local:N"),
    "target": (re.compile(r"sm_[0-9]{2,3}[af]?"), "a SASS architecture such as sm_90 or sm_90a"),
}


# retune.search: a Gaussian process proposes a share (engine.bayes), the operators alone, or a
# TPE-like surrogate proposes a share (engine.surrogate)
SEARCHES = ("bayes", "operators", "guided")


class Key(NamedTuple):
    """One setting, declared once: its name in the file (`retune.` keys in
    the `[retune]` table), its type, the environment variable that overrides
    the file, the built-in default, what it is for, the values it may take.
    A `retune.` key is also a field of a retune's Options (`field_name`) and
    a flag of `--retune` (`flag`, `metavar`, `help`): nvcc_evo.retune.scope.options
    builds both from this table."""

    name: str
    kind: str           # "str", "path" (relative to the settings file), "int", "float", "choice",
    #                     "paths" (a table of name = path), "pathlist" (an array of paths)
    env: str
    default: object
    what: str
    choices: tuple = ()
    positive: bool = False
    counted: bool = False     # 0 or more (a device number)
    finite: bool = False      # seconds a wait takes: inf (and nan) would never end, or crash it
    form: str = ""            # a str's shape: a key of FORMS
    default_said: str = ""    # the default in words, where the value (None) does not say it
    field: str = ""           # the Options field, where it is not the name's last part with - as _
    metavar: str = ""         # the flag's value in usage lines (N, S, JSONL, ...)
    inside: bool = False      # a path of nvcc-evo's own data: a file may name one inside the
                              # project

    @property
    def flag(self) -> str:
        return f"--{self.name.rpartition('.')[2]}"

    @property
    def field_name(self) -> str:
        return self.field or self.name.rpartition(".")[2].replace("-", "_")

    def help(self) -> str:
        """What it is for, with its default (said here only)."""
        said = self.default_said or _default_said(self.default)
        return f"{self.what} (default: {said})" if said else self.what

    def usage(self) -> str:
        """`[--flag VALUE]`, as usage lines show it."""
        return f"[{self.flag} {self.metavar or '|'.join(self.choices)}]"


def _default_said(default: object) -> str:
    if default is None:
        return ""
    return f"{default:g}" if isinstance(default, float) else str(default)


KEYS = (
    Key("nvcc", "path", REAL_NVCC_ENV, None,
        "the real nvcc (default: $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, PATH)"),
    Key("gpu", "str", "NVCC_EVO_GPU", None,
        "the GPU model builds are for: picks target blocks named for a GPU"),
    Key("stale", "choice", STALE_ENV, "keep",
        "a stale entry builds with its knobs (keep) or with defaults", STALE_CHOICES),
    Key("log", "path", LOG_ENV, None, "a file the wrapper appends one JSON line per compile to",
        inside=True),
    Key("ptxas", "pathlist", "NVCC_EVO_PTXAS", None,
        "ptxas binaries the ptxas.version knob chooses among"),
    Key("real-ptxas", "path", "NVCC_EVO_REAL_PTXAS", None,
        "the ptxas nvcc-evo-ptxas stands for (default: Triton's own when Triton calls it, else "
        "$CUDA_HOME/bin/ptxas, PATH)"),
    Key("real-ptxas-blackwell", "path", "NVCC_EVO_REAL_PTXAS_BLACKWELL", None,
        "the ptxas-blackwell its stand-in runs"),
    Key("retune.backend", "choice", "NVCC_EVO_BACKEND", "auto", backend_help(), BACKENDS),
    Key("retune.evaluations", "int", "NVCC_EVO_EVALUATIONS", None,
        "evaluations per unit and target: a cap; alone, the budget", positive=True,
        default_said="the backend's: 60 for static and replay", metavar="N"),
    Key("retune.generations", "int", "NVCC_EVO_GENERATIONS", None, "a cap on generations",
        positive=True, default_said="none", metavar="N"),
    Key("retune.patience", "int", "NVCC_EVO_PATIENCE", None,
        "stop after N generations without a new front point", positive=True,
        default_said="never; a stagnant search diversifies until its budget ends", metavar="N"),
    Key("retune.population", "int", "NVCC_EVO_POPULATION", 12, "candidates per generation",
        positive=True, metavar="N"),
    Key("retune.search", "choice", "NVCC_EVO_SEARCH", "bayes",
        "how candidates are proposed: bayes (after two generations a Gaussian process proposes "
        "half of each by expected improvement, the operators the rest), operators (the "
        "evolutionary operators alone) or guided (a TPE-like surrogate proposes half)", SEARCHES),
    Key("retune.seed", "int", "NVCC_EVO_SEED", 0,
        "seed of the search (the same seed, the same search)", metavar="N"),
    Key("retune.jobs", "int", "NVCC_EVO_JOBS", None, "parallel compiles", positive=True,
        default_said="CPU cores", metavar="N"),
    Key("retune.timeout", "float", "NVCC_EVO_TIMEOUT", 300.0,
        "seconds before a compile or a GPU run counts as hung", positive=True, finite=True,
        metavar="S"),
    Key("retune.time-limit", "float", "NVCC_EVO_TIME_LIMIT", None, "seconds per unit and target",
        positive=True,
        default_said="the backend's: 180 for pycuda, 300 for command, none for static and replay",
        field="seconds", metavar="S"),
    Key("retune.target", "str", "NVCC_EVO_TARGET", None,
        "the SASS architecture to tune for (sm_90, ...)", form="target", metavar="sm_XX"),
    Key("retune.device", "int", "NVCC_EVO_DEVICE", 0,
        "the CUDA device the pycuda backend measures on", counted=True, metavar="N"),
    Key("retune.gpus", "str", "NVCC_EVO_GPUS", None,
        "the GPUs the pycuda backend measures on, a process each: all (those of --device's "
        "model), count:N (the first N) or device numbers (1, 0,2)", form="gpus",
        default_said="all", metavar="all|count:N|0,2"),
    Key("retune.cluster", "str", "NVCC_EVO_CLUSTER", None,
        "compile and measure on a Ray cluster (needs nvcc-evo[cluster]): ray://HEAD:PORT through "
        "Ray Client, auto: the cluster `ray start` made this machine a node of, local:N: a Ray of "
        "N workers on this machine", form="cluster", metavar="ray://HEAD:PORT|auto|local[:N]"),
    Key("retune.at-once", "int", "NVCC_EVO_AT_ONCE", None,
        "tune N (unit, target) pairs at once, sharing the compile slots and the GPUs",
        positive=True, default_said="1; on a cluster, as many as its CPUs keep compiling",
        metavar="N"),
    Key("retune.replay", "path", "NVCC_EVO_REPLAY", None,
        "results store to answer from, with --backend replay", metavar="JSONL", inside=True),
    Key("retune.progress", "choice", "NVCC_EVO_PROGRESS", "auto",
        "a live bar (bar), one line per generation (lines), or auto: a live bar when stderr is a "
        "terminal, else one line per generation", ("auto", "bar", "lines")),
    Key("lock.wait", "float", "NVCC_EVO_LOCK_WAIT", 600.0, "seconds a lock is waited for",
        positive=True, finite=True),
    Key("report.stores", "pathlist", "", None,
        "results stores --report reads (default: .nvcc-evo/results.jsonl)", inside=True),
    Key("report.out", "path", "", None,
        "the HTML file --report writes (default: .nvcc-evo/report.html)", inside=True),
)
BY_NAME = {key.name: key for key in KEYS}
BUILD_KEYS = tuple(name for name in BY_NAME if "." not in name)
RETUNE_KEYS = tuple(name for name in BY_NAME if name.startswith("retune."))
REPORT_KEYS = tuple(name for name in BY_NAME if name.startswith("report."))
TABLES = {name.rpartition(".")[0] for name in BY_NAME if "." in name}


@dataclass(frozen=True)
class Gpus:
    """`retune.gpus`: the first `count` GPUs, these `devices`, or (neither) every GPU of --device's
    model."""

    text: str                          # as given, for messages
    count: int = 0
    devices: tuple[int, ...] = ()


@dataclass(frozen=True)
class RayPlace:
    """`retune.cluster`: the cluster at `address` (ray://HEAD:PORT, or auto: the one `ray start`
    made this machine a node of), or (None) a Ray of this machine with `workers` (None: as many as
    its cores)."""

    text: str                          # as given, for messages
    address: str | None = None
    workers: int | None = None


def _formed(form: str, flag: str, text: str) -> re.Match:
    found = FORMS[form][0].fullmatch(text)
    if found is None:
        raise UsageError(f"{flag} {text}: expected {FORMS[form][1]}")
    return found


def gpus(text: str | None) -> Gpus | None:
    """`retune.gpus` parsed (None: unset); UsageError where it is not of its form."""
    if text is None:
        return None
    count, numbers = _formed("gpus", "--gpus", text).groups()
    return Gpus(text, int(count or 0), tuple(int(n) for n in numbers.split(",")) if numbers else ())


def ray_place(text: str | None) -> RayPlace | None:
    """`retune.cluster` parsed (None: unset, this machine); UsageError where it is not of its
    form."""
    if not text:
        return None
    word, workers = _formed("cluster", "--cluster", text).groups()
    return RayPlace(text, None if word.startswith("local") else word,
                    int(workers) if workers else None)
