"""Parse stage: ACF text -> AcfFile, or an AcfError with every syntax error.

The grammar is nvcc_evo/acf/grammar/acf.lark (package data);
nvcc_evo/acf/syntax.py turns lark's errors into located, labelled diagnostics;
nvcc_evo/acf/transform.py shapes the tree into the model's values.
"""
from __future__ import annotations

import functools
import sys
from importlib import resources
from typing import Iterable, Iterator

import lark

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import Binary, Call, Expr, Unary
from nvcc_evo.acf.syntax import parse_reporting_all, source_line
from nvcc_evo.acf.text import char_places, check_limits
from nvcc_evo.acf.transform import Build
from nvcc_evo.errors import AcfError, Diagnostic, Location
from nvcc_evo.system.files import cache_folder

GRAMMAR = resources.files("nvcc_evo.acf") / "grammar" / "acf.lark"  # package data, in the wheel too


def _grammar_text() -> str:
    return GRAMMAR.read_text()


def grammar_location() -> str:
    return str(GRAMMAR)


@functools.lru_cache(maxsize=None)
def build_parser(strict: bool = False) -> lark.Lark:
    return lark.Lark(_grammar_text(), parser="lalr", propagate_positions=True,
                     maybe_placeholders=True, strict=strict,
                     cache=False if strict else _parser_cache())


def _parser_cache() -> str | bool:
    """Where lark keeps the built parser: the user's own checked cache folder.
    lark's `cache=True` is a pickle in the shared temporary folder under a
    name anyone can work out (.lark_cache_USER_SHA256_3_11.tmp), loaded
    without a look at its owner: a file another user plants there ran code in
    ours. No cache (0.1 s more) where the folder cannot be had."""
    try:
        folder = cache_folder()
    except OSError:  # (a link in its place, another user's folder, a read-only home)
        return False
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return f"{folder}/grammar-lark-{lark.__version__}-py{python}.pickle"


def find_comments(text: str) -> tuple[model.Comment, ...]:
    """Every `#` comment outside strings (the only other place `#` can be)."""
    comments, line, line_start, previous = [], 1, 0, "code"
    for offset, ch, place in char_places(text):
        if ch == "\n":
            line, line_start = line + 1, offset + 1
        elif place == "comment" and previous != "comment":
            end = text.find("\n", offset)
            end = len(text) if end < 0 else end
            own_line = text[line_start:offset].strip() == ""
            comments.append(model.Comment(line, offset - line_start + 1, text[offset:end], own_line,
                                          offset))
        previous = place
    return tuple(comments)


def parse_text(text: str, path: str = "<acf>") -> model.AcfFile:
    """Parse ACF text; raise AcfError listing every syntax error (a line,
    string or comment over its limit first, before lark)."""
    check_limits(text, path)
    tree, diagnostics = parse_reporting_all(build_parser(), text, path)
    if diagnostics:
        raise AcfError(diagnostics)
    build = Build()
    try:
        (version, header_span), *units = build.transform(tree).children
    except RecursionError:          # (lark's transformer recurses once per level of an expression)
        line = _most_nested_line(text)
        raise AcfError([Diagnostic(Location(path, line, 1), "an expression is nested too deeply "
                                   f"(the limit is {MAX_EXPR_DEPTH} levels)",
                                   source_line(text, line))]) from None
    build.problems += [(e.span, f"an expression is nested too deeply ({depth} levels; the limit is "
                                f"{MAX_EXPR_DEPTH})")
                       for e, depth in _deep_expressions(units)]
    if build.problems:
        raise AcfError([Diagnostic(Location(path, span.line, span.column), message,
                                   source_line(text, span.line))
                        for span, message in build.problems])
    return model.AcfFile(path, version, tuple(units),
                       find_comments(text), header_span)


MAX_EXPR_DEPTH = 100  # later stages walk expressions recursively; keep them far from Python's limit


def _expr_depth(expr: Expr) -> int:
    """Levels of an expression, counted without recursion."""
    deepest, todo = 0, [(expr, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        children = {Unary: lambda n: [n.operand], Binary: lambda n: [n.left, n.right],
                    Call: lambda n: list(n.args)}.get(type(node), lambda n: [])(node)
        todo.extend((child, depth + 1) for child in children)
    return deepest


def _deep_expressions(units: Iterable[model.Unit]) -> Iterator[tuple[Expr, int]]:
    """(expression, depth) of each bench expression deeper than the limit."""
    for unit in units:
        exprs: list[Expr | None] = [side for r in unit.requires for side in (r.left, r.right)]
        bench = unit.bench
        if bench is not None:
            exprs += [let.expr for let in bench.lets]
            exprs += [d for launch in bench.launch for d in launch.dims]
            exprs += [a.count if a.is_array else a.value for a in bench.args]
            exprs += [p.expr for a in bench.args for p in a.params]
        for expr in exprs:
            depth = _expr_depth(expr) if expr is not None else 0
            if expr is not None and depth > MAX_EXPR_DEPTH:
                yield expr, depth


def _most_nested_line(text: str) -> int:
    """The line an over-deep expression most likely is on: the most operators."""
    counts = [sum(line.count(c) for c in "+-*/%(") for line in text.splitlines()] or [0]
    return counts.index(max(counts)) + 1
