"""Bench specs: the tables they are checked against and expression evaluation.

Pure Python (no numpy) so that the checker and the wrapper can use it; the
GPU backend turns an evaluated spec into device buffers.
"""
from __future__ import annotations

from typing import Callable, Mapping

from nvcc_evo import acf

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


def _cdiv(a, b):
    return -(-a // b)


FUNCTIONS: dict[str, tuple[int, Callable]] = {
    "cdiv": (2, _cdiv),
    "min": (2, min),
    "max": (2, max),
}


class ExprError(ValueError):
    """An expression that cannot be evaluated; carries the offending node."""

    def __init__(self, node: acf.Expr, message: str):
        super().__init__(message)
        self.node = node


def names_in(expr: acf.Expr) -> list[acf.Ref]:
    if isinstance(expr, acf.Ref):
        return [expr]
    if isinstance(expr, acf.Unary):
        return names_in(expr.operand)
    if isinstance(expr, acf.Binary):
        return names_in(expr.left) + names_in(expr.right)
    if isinstance(expr, acf.Call):
        return [ref for arg in expr.args for ref in names_in(arg)]
    return []


def calls_in(expr: acf.Expr) -> list[acf.Call]:
    if isinstance(expr, acf.Call):
        return [expr] + [c for arg in expr.args for c in calls_in(arg)]
    if isinstance(expr, acf.Unary):
        return calls_in(expr.operand)
    if isinstance(expr, acf.Binary):
        return calls_in(expr.left) + calls_in(expr.right)
    return []


def evaluate(expr: acf.Expr, env: Mapping[str, int | float]) -> int | float:
    """C-like arithmetic: `/` and `%` on integers truncate, as in the kernel."""
    if isinstance(expr, acf.Literal):
        return expr.value
    if isinstance(expr, acf.Ref):
        if expr.name not in env:
            raise ExprError(expr, f"undefined name '{expr.name}'")
        return env[expr.name]
    if isinstance(expr, acf.Unary):
        return -evaluate(expr.operand, env)
    if isinstance(expr, acf.Call):
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
