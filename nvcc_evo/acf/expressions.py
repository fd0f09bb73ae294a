"""Where a value stands in the ACF's text (`Span`, kept by every value of
nvcc_evo.acf.model) and the expressions the language writes numbers with (`Literal`, `Ref`, `Unary`,
`Binary`, `Call`): a bench block's lets, counts, values and launch dimensions, a search
block's requires. Evaluated by nvcc_evo.acf.bench.spec (`evaluate`,
`require_holds`); spelled by nvcc_evo.acf.edit.format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int
    start: int      # character offsets into the text
    end: int


NO_SPAN = Span(0, 0, 0, 0, -1, -1)


@dataclass(frozen=True)
class Literal:
    value: int | float
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Ref:
    name: str
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Unary:
    op: str
    operand: "Expr"
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Binary:
    op: str
    left: "Expr"
    right: "Expr"
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple["Expr", ...]
    span: Span = field(default=NO_SPAN, compare=False)


Expr = Union[Literal, Ref, Unary, Binary, Call]
