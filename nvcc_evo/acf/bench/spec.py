"""Bench specs: the tables they are checked against and expression evaluation.

Pure Python (no numpy) so that the checker and the wrapper can use it; the
GPU backend turns an evaluated spec into device buffers.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence, cast

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import Binary, Call, Expr, Literal, Ref, Unary

# dtype -> (bytes per element, numpy name)
DTYPES: dict[str, tuple[int, str]] = {
    "f16": (2, "float16"),
    "bf16": (2, "uint16"),   # stored as raw bits; numpy has no bfloat16
    "f32": (4, "float32"),
    "f64": (8, "float64"),
    "i8": (1, "int8"),
    "u8": (1, "uint8"),
    "i16": (2, "int16"),
    "u16": (2, "uint16"),
    "i32": (4, "int32"),
    "u32": (4, "uint32"),
    "i64": (8, "int64"),
    "u64": (8, "uint64"),
}

# init kind -> (named parameters it takes, how many may be positional)
INITS: dict[str, tuple[tuple[str, ...], int]] = {
    "output": ((), 0),
    "random": (("seed", "low", "high"), 0),
    "range": (("start", "step"), 0),
    "constant": (("value",), 1),
}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


FUNCTIONS: dict[str, tuple[int, Callable]] = {
    "cdiv": (2, _cdiv),
    "min": (2, min),
    "max": (2, max),
}


class ExprError(ValueError):
    """An expression that cannot be evaluated; carries the offending node."""

    def __init__(self, node: Expr, message: str):
        super().__init__(message)
        self.node = node


def names_in(expr: Expr | None) -> list[Ref]:
    if isinstance(expr, Ref):
        return [expr]
    if isinstance(expr, Unary):
        return names_in(expr.operand)
    if isinstance(expr, Binary):
        return names_in(expr.left) + names_in(expr.right)
    if isinstance(expr, Call):
        return [ref for arg in expr.args for ref in names_in(arg)]
    return []


def calls_in(expr: Expr | None) -> list[Call]:
    if isinstance(expr, Call):
        return [expr] + [c for arg in expr.args for c in calls_in(arg)]
    if isinstance(expr, Unary):
        return calls_in(expr.operand)
    if isinstance(expr, Binary):
        return calls_in(expr.left) + calls_in(expr.right)
    return []


def evaluate(expr: Expr, env: Mapping[str, int | float]) -> int | float:
    """C-like arithmetic: `/` and `%` on integers truncate, as in the kernel."""
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Ref):
        if expr.name not in env:
            raise ExprError(expr, f"undefined name '{expr.name}'")
        return env[expr.name]
    if isinstance(expr, Unary):
        return -evaluate(expr.operand, env)
    if isinstance(expr, Call):
        _, function = FUNCTIONS[expr.function]
        return function(*(evaluate(a, env) for a in expr.args))
    left, right = evaluate(expr.left, env), evaluate(expr.right, env)
    if expr.op in "/%" and right == 0:
        raise ExprError(expr, "division by zero")
    both_int = isinstance(left, int) and isinstance(right, int)
    if expr.op == "/":
        return int(left / right) if both_int else left / right
    if expr.op == "%":
        return left - right * int(left / right) if both_int else left % right
    return {"+": left + right, "-": left - right, "*": left * right}[expr.op]


COMPARE: dict[str, Callable] = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
                                ">=": lambda a, b: a >= b,
                                 ">": lambda a, b: a > b, "==": lambda a, b: a == b}


def require_holds(require: model.SpaceRequire, defines: Mapping[str, int | float]) -> bool:
    """Whether a search block's `require` holds for these define values; one
    that cannot be evaluated (a division by zero, a name without a value)
    does not."""
    try:
        return bool(COMPARE[require.op](evaluate(require.left, defines),
                                        evaluate(require.right, defines)))
    except (ExprError, TypeError):
        return False


def require_names(requires: Iterable[model.SpaceRequire]) -> list[str]:
    """The define names a set of requires reads, sorted."""
    return sorted({r.name for q in requires for side in (q.left, q.right) for r in names_in(side)})


def requires_unmet(requires: Sequence[model.SpaceRequire], values: Mapping[str, tuple],
                   limit: int) -> int:
    """How many combinations of the named defines' values were tried and
    none met every require (0: one did, or there are more than `limit`)."""
    named = require_names(requires)
    combinations = math.prod(len(values[n]) for n in named)
    if combinations > limit:
        return 0
    for combination in itertools.product(*(values[n] for n in named)):
        env = dict(zip(named, combination))
        if all(require_holds(r, env) for r in requires):
            return 0
    return combinations


# ---------------------------------------------------------------- plans
@dataclass(frozen=True)
class ArrayPlan:
    name: str
    dtype: str
    count: int
    init: str                                  # output, random, range, constant
    params: tuple[tuple[str, float], ...]      # evaluated, with defaults filled in


@dataclass(frozen=True)
class ScalarPlan:
    name: str
    dtype: str
    value: int | float


@dataclass(frozen=True)
class CheckPlan:
    name: str
    rtol: float
    atol: float
    exact: bool


@dataclass(frozen=True)
class BenchPlan:
    """A bench spec with every expression evaluated for one candidate."""

    kernel: str
    args: tuple                                # ArrayPlan | ScalarPlan, in launch order
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    checks: tuple[CheckPlan, ...]
    sizes: tuple[tuple[str, int | float], ...] = ()    # lets and defines, for references

    @property
    def arrays(self) -> tuple[ArrayPlan, ...]:
        return tuple(a for a in self.args if isinstance(a, ArrayPlan))

    @property
    def bytes_moved(self) -> int:
        """Each input read once and each output written once: the floor a
        memory-bound kernel can't beat. A checked array that also has initial
        data (saxpy's y) is read and written: it counts twice."""
        checked = {c.name for c in self.checks}
        return sum(a.count * DTYPES[a.dtype][0] * (2 if a.name in checked and
                                                   a.init != "output" else 1)
                   for a in self.arrays)


INIT_DEFAULTS: dict[str, dict[str, int | float]] = {
    "random": {"seed": 0, "low": -1.0, "high": 1.0}, "range": {"start": 0, "step": 1},
    "constant": {"value": 0}, "output": {}}


def _dims(exprs: Sequence[Expr] | None, env: Mapping[str, int | float],
          what: str) -> tuple[int, int, int]:
    assert exprs is not None                 # (resolve: every bench has its grid and block)
    values = [evaluate(e, env) for e in exprs]
    if any(not isinstance(v, int) or v <= 0 for v in values):
        raise ExprError(exprs[0], f"{what} must be positive integers, got {values}")
    # (resolve: at most 3)
    return cast("tuple[int, int, int]", tuple(values + [1] * (3 - len(values))))


def _rtol(check: model.Check) -> float:
    """A check's relative tolerance: its own, else none for an exact one, else 1e-5."""
    if check.rtol is not None:
        return check.rtol
    return 0.0 if check.exact else 1e-5


def plan_bench(bench: model.Bench, defines: Mapping[str, int | float],
               lets: Mapping[str, int | float] | None = None) -> BenchPlan:
    """Evaluate sizes, argument counts, initialisers, grid and block with the
    candidate's defines (ExprError on an undefined name or a bad value).
    `lets` replaces the values of some of the bench's own `let`s: the same
    bench at another shape. The bench is a checked kernel bench (resolve)."""
    assert bench.kernel is not None
    lets = dict(lets or {})
    unknown = sorted(set(lets) - {let.name for let in bench.lets})
    if unknown:
        raise ValueError(f"no `let {unknown[0]}` in the bench of kernel {bench.kernel.text} to "
                         "replace")
    env = dict(defines)
    for let in bench.lets:
        env[let.name] = lets[let.name] if let.name in lets else evaluate(let.expr, env)
    args: list[ScalarPlan | ArrayPlan] = []
    for arg in bench.args:
        if arg.count is None:                      # (not arg.is_array)
            assert arg.value is not None
            value = evaluate(arg.value, env)
            floating = arg.dtype.startswith(("f", "bf"))
            args.append(ScalarPlan(arg.name, arg.dtype, float(value) if floating else int(value)))
            continue
        count = evaluate(arg.count, env)
        if not isinstance(count, int) or count <= 0:
            raise ExprError(arg.count, f"element count of {arg.name} must be a positive integer, "
                                       f"got {count}")
        params = dict(INIT_DEFAULTS[arg.init])
        names = INITS[arg.init][0]
        for position, param in enumerate(arg.params):
            params[param.name or names[position]] = evaluate(param.expr, env)
        args.append(ArrayPlan(arg.name, arg.dtype, count, arg.init, tuple(sorted(params.items()))))
    grid = _dims(bench.launch_dims("grid"), env, "grid")
    block = _dims(bench.launch_dims("block"), env, "block")
    shared_dims = bench.launch_dims("shared")
    shared = int(evaluate(shared_dims[0], env)) if shared_dims else 0
    checks = tuple(CheckPlan(c.name, _rtol(c), c.atol if c.atol is not None else 0.0, c.exact)
                   for c in bench.checks)
    return BenchPlan(bench.kernel.text, tuple(args), grid, block, shared, checks,
                     tuple(sorted(env.items())))
