"""What a search can minimise, and what provenance records may say; the
resolve stage's checks of both (a part of resolve.Checker, as the bench's
checks are): a tune block's objectives and a target's provenance records."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import Span
from nvcc_evo.acf.bench.check import listed, shown


@dataclass(frozen=True)
class Objective:
    name: str
    unit: str
    needs_gpu: bool
    meaning: str


OBJECTIVES: tuple[Objective, ...] = (
    Objective("runtime", "us", True, "median kernel time, CUDA events"),
    Objective("energy", "mJ", True, "energy per launch from NVML's total-energy counter"),
    Objective("metric", "", False, "the number a bench command prints"),
    Objective("compile_time", "s", False, "wall time of the candidate's compile"),
    Objective("registers", "", False, "registers per thread (ptxas -v)"),
    Objective("spills", "B", False, "spill stores + spill loads in bytes (ptxas -v)"),
    Objective("stack", "B", False, "stack frame bytes (ptxas -v)"),
    Objective("shared", "B", False, "static shared memory bytes (ptxas -v)"),
    Objective("instructions", "", False, "SASS instruction count"),
    Objective("binary_size", "B", False, "cubin bytes"),
)
OBJECTIVE_BY_NAME = {o.name: o for o in OBJECTIVES}

# Provenance keys a retune writes; `baseline.X` and `tuned.X` take any
# objective X and may carry a spread (`812.5 +- 3.1`).
PROVENANCE_KEYS: dict[str, type] = {
    "fingerprint": str,
    "toolkit": str,
    "space_digest": str,  # of the unit's pins and search block (acf.Unit.space_digest): staleness
    "tune_digest": str,      # of the unit's tune block (acf.Unit.tune_digest): staleness
    "settings_digest": str,  # of the knobs it wrote (acf.model.settings_digest): --acf-check says a
                             # hand edit
    "build": str,            # the build it was tuned for (retune.scope.staleness.build_identity):
                             # staleness
    "gpu": str,
    "cc": str,
    "driver": str,
    "backend": str,
    "date": str,
    "seed": int,
    "evaluations": int,      # candidates judged, those read back from the results store included
    "reused": int,           # of them, the same binary as an earlier one (its measurement reused)
    "resumed": int,          # of them, read back from the results store (an earlier run's)
    "search_seconds": float,
    "test": str,
    "p_value": float,
    "effect_size": float,
    "significant": bool,
    "verdict": str,
    "rounds": int,           # of the confirmation: runs of each side, interleaved
    "repeats": int,          # runs of each candidate while searching (the most, when adaptive)
}
MEASURED_PREFIXES = ("baseline.", "tuned.")


def provenance_type(key: str, metrics: tuple[str, ...] = ()) -> type | None:
    """The value type of a provenance key, float for measured objectives
    (built-in ones, and the `metrics` the unit's bench command prints)."""
    for prefix in MEASURED_PREFIXES:
        if key.startswith(prefix) and (key[len(prefix):] in OBJECTIVE_BY_NAME or
                                       key[len(prefix):] in metrics):
            return float
    return PROVENANCE_KEYS.get(key)


def known_provenance_keys() -> list[str]:
    return sorted(PROVENANCE_KEYS) + [f"{p}<objective>" for p in MEASURED_PREFIXES]


class ObjectiveChecks:
    """The tune block's and the provenance's checks; `error(span, message)` is the Checker's."""

    def error(self, span: Span, message: str) -> None:
        raise NotImplementedError              # resolve.Checker's

    def check_metric(self, name: str, span: Span, metrics: tuple[str, ...] = ()) -> None:
        """An objective: a built-in one, or a metric the unit's bench command prints."""
        if name not in OBJECTIVE_BY_NAME and name not in metrics:
            known = set(OBJECTIVE_BY_NAME) | set(metrics)
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            self.error(span, f"unknown objective '{name}'{hint} (known: {listed(known)})")

    def check_tune(self, tune: model.Tune, metrics: tuple[str, ...] = ()) -> None:
        minimize_span = next((span for kind, span in tune.item_spans if kind == "minimize"),
                             tune.span)
        if len(set(tune.minimize)) != len(tune.minimize):
            self.error(minimize_span, "an objective is listed twice in minimize")
        for name in tune.minimize:
            self.check_metric(name, minimize_span, metrics)
        if tune.select is not None:
            self.check_metric(tune.select,
                              next(span for kind, span in tune.item_spans if kind == "select"),
                              metrics)
        for condition in tune.require + tune.select_where:
            self.check_metric(condition.metric, condition.span, metrics)

    def check_record(self, record: model.Record, metrics: tuple[str, ...] = ()) -> None:
        expected = provenance_type(record.key, metrics)
        if expected is None:
            self.error(record.span, f"unknown provenance key '{record.key}' "
                       f"(known: {', '.join(known_provenance_keys())})")
            return
        value = record.value
        ok = {str: isinstance(value, str), bool: isinstance(value, bool),
              int: isinstance(value, int) and not isinstance(value, bool),
              float: isinstance(value, (int, float)) and not isinstance(value, bool)}[expected]
        if not ok:
            self.error(record.span, f"provenance '{record.key}' takes {expected.__name__}, got "
                                    f"{shown(value)}")
        if record.spread is not None and expected is not float:
            self.error(record.span, "only measured values (baseline.X, tuned.X) take a spread")
