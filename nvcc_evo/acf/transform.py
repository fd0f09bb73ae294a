"""The parse stage's transformer: lark's tree -> the model's values
(nvcc_evo.acf.model), one short method per grammar rule, with spans.
Problems the grammar cannot state (a once-only block repeated, a number out
of a double's range) are collected in `Build.problems`; parse_text reports
them with the syntax errors' format.
"""
from __future__ import annotations

import math
import re
import sys
from typing import Any, Callable

from lark import Token, Transformer, v_args
from lark.tree import Meta

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import NO_SPAN, Binary, Call, Literal, Ref, Span, Unary


def _span(meta: Any) -> Span:
    """Where a rule's meta (or a lexed token) stands (lark types their positions Optional)."""
    return Span(meta.line, meta.column, meta.end_line, meta.end_column,
                    meta.start_pos, meta.end_pos)


def _token_span(tok: Token) -> Span:
    """(A lexed token has every position, as a rule's meta does; lark types
    them Optional for tokens made by hand.)"""
    return _span(tok)


def unquote(token: str) -> str:
    """A string's text: `\\"` is a quote, `\\\\` a backslash; any other backslash
    stays as written, so that a regular expression reads as in a raw string."""
    return re.sub(r'\\(["\\])', r"\1", token[1:-1])


def _binary(op: str) -> Callable:
    return v_args(meta=True)(lambda self, meta, items: Binary(op, items[0], items[1], _span(meta)))


def _run_check(kind: str, read: Callable[[Any], str | int]) -> Callable:
    return v_args(meta=True)(lambda self, meta, items: model.RunCheck(kind, read(items[0]),
                                                                      _span(meta)))


def _group(group: Token | None) -> int | str | None:
    """A metric's group: a number, or a name."""
    if group is None:
        return None
    return int(group) if group.type == "INT" else str(group)


class Build(Transformer):
    """Lark tree -> acf values; one short method per grammar rule.

    Blocks that may appear once per parent (search, tune, bench, provenance,
    kernel, command, metric) are counted: repeats, and numbers out of range, land in
    `problems`."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[tuple[Span, str]] = []

    def _float(self, token: Token | str) -> float:
        """A float literal; one too large for a double (1e400) is a located error,
        not an infinity the formatter could not write back."""
        value = float(token)
        if math.isinf(value) and isinstance(token, Token):
            self.problems.append((_token_span(token), f"number {token} is out of range (a double's "
                                                     f"largest is {sys.float_info.max:.6g})"))
        return value

    def _once(self, parts: list[tuple[str, object, Span]], kinds: tuple[str, ...],
              where: str) -> None:
        """Note every repeat of a once-only part, given (kind, value, span)."""
        for kind in kinds:
            for _, _, span in [p for p in parts if p[0] == kind][1:]:
                self.problems.append((span, f"a {where} block has one '{kind}'; this one "
                                            "repeats it"))

    # values
    def signed_int(self, items: list) -> int:
        return int(items[0])

    def signed_float(self, items: list) -> float:
        return self._float(items[0])

    def true(self, _: list) -> bool:
        return True

    def false(self, _: list) -> bool:
        return False

    def symbol(self, items: list) -> str:
        return str(items[0])

    def string(self, items: list) -> str:
        return unquote(items[0])

    # expressions
    @v_args(meta=True)
    def int_literal(self, meta: Meta, items: list) -> Literal:
        return Literal(int(items[0]), _span(meta))

    @v_args(meta=True)
    def float_literal(self, meta: Meta, items: list) -> Literal:
        return Literal(self._float(items[0]), _span(meta))

    @v_args(meta=True)
    def ref(self, meta: Meta, items: list) -> Ref:
        return Ref(str(items[0]), _span(meta))

    @v_args(meta=True)
    def neg(self, meta: Meta, items: list) -> Unary:
        return Unary("-", items[0], _span(meta))

    @v_args(meta=True)
    def call(self, meta: Meta, items: list) -> Call:
        return Call(str(items[0]), tuple(items[1:]), _span(meta))

    add, sub, mul, div, mod = (_binary(op) for op in "+-*/%")

    # units
    def header(self, items: list) -> tuple:
        return (int(items[0]), _token_span(items[0]))

    @v_args(meta=True)
    def pin(self, meta: Meta, items: list) -> tuple:
        return ("pin", model.Setting(str(items[0]), items[1], _span(meta)), _span(meta))

    @v_args(meta=True)
    def setting(self, meta: Meta, items: list) -> model.Setting:
        return model.Setting(str(items[0]), items[1], _span(meta))

    @v_args(meta=True)
    def space(self, meta: Meta, items: list) -> model.Space:
        return model.Space(str(items[0]), items[1], _span(meta), unordered=items[2] is not None)

    def set_domain(self, items: list) -> model.SetDomain:
        return model.SetDomain(tuple(items))

    def range_domain(self, items: list) -> model.RangeDomain:
        return model.RangeDomain(items[0], items[1], int(items[2]) if items[2] is not None else 1)

    def bool_domain(self, _: list) -> model.BoolDomain:
        return model.BoolDomain()

    @v_args(meta=True)
    def space_require(self, meta: Meta, items: list) -> model.SpaceRequire:
        return model.SpaceRequire(items[0], str(items[1]), items[2], _span(meta))

    @v_args(meta=True)
    def search(self, meta: Meta, items: list) -> tuple:
        return ("search", tuple(items), _span(meta))

    # tune
    @v_args(meta=True)
    def condition(self, meta: Meta, items: list) -> model.Condition:
        bound, relative = items[2]
        return model.Condition(str(items[0]), str(items[1]), bound, relative, _span(meta))

    def absolute(self, items: list) -> tuple:
        return (items[0], False)

    def relative(self, items: list) -> tuple:
        return (items[0], True)

    def at_baseline(self, _: list) -> tuple:
        return (1.0, True)

    @v_args(meta=True)
    def minimize(self, meta: Meta, items: list) -> tuple:
        return ("minimize", tuple(str(i) for i in items), _span(meta))

    @v_args(meta=True)
    def require(self, meta: Meta, items: list) -> tuple:
        return ("require", items[0], _span(meta))

    @v_args(meta=True)
    def select(self, meta: Meta, items: list) -> tuple:
        return ("select", (str(items[0]), tuple(i for i in items[1:] if i is not None)),
                _span(meta))

    @v_args(meta=True)
    def tune(self, meta: Meta, items: list) -> tuple:
        minimize = tuple(m for kind, value, _ in items if kind == "minimize" for m in value)
        require = tuple(value for kind, value, _ in items if kind == "require")
        selects = [value for kind, value, _ in items if kind == "select"]
        select, where = selects[-1] if selects else (None, ())
        spans = tuple((kind, span) for kind, _, span in items)
        return ("tune", model.Tune(minimize, require, select, where, _span(meta), spans),
                _span(meta))

    # bench
    @v_args(meta=True)
    def kernel(self, meta: Meta, items: list) -> model.Text:
        tok = items[0]
        text = unquote(tok) if tok.type == "STRING" else str(tok)
        return model.Text("kernel", text, _span(meta))

    @v_args(meta=True)
    def reference(self, meta: Meta, items: list) -> model.Text:
        return model.Text("reference", unquote(items[0]), _span(meta))

    @v_args(meta=True)
    def command(self, meta: Meta, items: list) -> model.Text:
        return model.Text("command", unquote(items[0]), _span(meta))

    @v_args(meta=True)
    def metric(self, meta: Meta, items: list) -> model.Metric:
        name, regex, options = items[0], unquote(items[1]), dict(items[2:])
        group = _group(options.get("group"))
        return model.Metric(str(name) if name is not None else "metric", regex,
                            options.get("take", "first"),
                            group, options.get("unit", ""), "maximize" in options, name is not None,
                            _span(meta))

    @v_args(meta=True)
    def kernel_metric(self, meta: Meta, items: list) -> model.Metric:
        return model.Metric.of_kernels(str(items[0]), _span(meta))

    def take(self, items: list) -> tuple:
        return ("take", str(items[0]))

    def group(self, items: list) -> tuple:
        return ("group", items[0])

    def metric_unit(self, items: list) -> tuple:
        return ("unit", unquote(items[0]))

    def maximize(self, _: list) -> tuple:
        return ("maximize", True)

    check_exit = _run_check("exit", int)
    check_match = _run_check("match", unquote)
    check_absent = _run_check("absent", unquote)
    check_command = _run_check("command", unquote)

    @v_args(meta=True)
    def confirm(self, meta: Meta, items: list) -> model.Confirm:
        command, rounds = items
        return model.Confirm(unquote(command) if command is not None else None,
                             int(rounds) if rounds is not None else None, _span(meta))

    @v_args(meta=True)
    def repeat(self, meta: Meta, items: list) -> model.Repeat:
        low, high = int(items[0]), int(items[1]) if items[1] is not None else int(items[0])
        return model.Repeat(low, high, _span(meta))

    @v_args(meta=True)
    def timeout(self, meta: Meta, items: list) -> model.Timeout:
        return model.Timeout(items[0], _span(meta))

    @v_args(meta=True)
    def let(self, meta: Meta, items: list) -> model.Let:
        return model.Let(str(items[0]), items[1], _span(meta))

    @v_args(meta=True)
    def array_arg(self, meta: Meta, items: list) -> model.Arg:
        init, params = items[3]
        return model.Arg(str(items[0]), str(items[1]), count=items[2], init=init,
                       params=params, span=_span(meta))

    @v_args(meta=True)
    def scalar_arg(self, meta: Meta, items: list) -> model.Arg:
        return model.Arg(str(items[0]), str(items[1]), value=items[2], span=_span(meta))

    def output_init(self, _: list) -> tuple:
        return ("output", ())

    def call_init(self, items: list) -> tuple:
        return (str(items[0]), tuple(i for i in items[1:] if i is not None))

    def init_param(self, items: list) -> model.InitParam:
        return model.InitParam(str(items[0]) if items[0] is not None else None, items[1])

    @v_args(meta=True)
    def grid(self, meta: Meta, items: list) -> model.Launch:
        return model.Launch("grid", tuple(items), _span(meta))

    @v_args(meta=True)
    def block(self, meta: Meta, items: list) -> model.Launch:
        return model.Launch("block", tuple(items), _span(meta))

    @v_args(meta=True)
    def shared(self, meta: Meta, items: list) -> model.Launch:
        return model.Launch("shared", tuple(items), _span(meta))

    @v_args(meta=True)
    def check(self, meta: Meta, items: list) -> model.Check:
        tolerances = dict(items[1:])
        return model.Check(str(items[0]), tolerances.get("rtol"), tolerances.get("atol"),
                         "exact" in tolerances, _span(meta))

    def rtol(self, items: list) -> tuple:
        return ("rtol", self._float(items[0]))

    def atol(self, items: list) -> tuple:
        return ("atol", self._float(items[0]))

    def exact(self, _: list) -> tuple:
        return ("exact", True)

    @v_args(meta=True)
    def bench(self, meta: Meta, items: list) -> tuple:
        of = lambda cls: tuple(i for i in items if isinstance(i, cls))
        self._once([(t.what, t, t.span) for t in of(model.Text)],
                   ("kernel", "reference", "command"), "bench")
        self._once([(x.what, x, x.span) for x in of(model.Launch)], ("grid", "block", "shared"),
                   "bench")
        once = [(type(x).__name__.lower(), x, x.span)
                for x in of(model.Confirm) + of(model.Repeat) + of(model.Timeout)]
        self._once(once, ("confirm", "repeat", "timeout"), "bench")
        texts = {t.what: t for t in of(model.Text)}
        first = lambda cls: (of(cls) or (None,))[0]
        bench = model.Bench(texts.get("kernel"), of(model.Let), of(model.Arg), of(model.Launch),
                            of(model.Check),
                            texts.get("command"), of(model.Metric), _span(meta),
                            texts.get("reference"),
                            of(model.RunCheck), first(model.Confirm), first(model.Repeat),
                            first(model.Timeout))
        return ("bench", bench, _span(meta))

    # targets
    @v_args(meta=True)
    def record(self, meta: Meta, items: list) -> model.Record:
        spread = self._float(items[2]) if items[2] is not None else None
        return model.Record(str(items[0]), items[1], spread, _span(meta))

    @v_args(meta=True)
    def provenance(self, meta: Meta, items: list) -> tuple:
        return ("provenance", tuple(items), _span(meta))

    @v_args(meta=True)
    def target(self, meta: Meta, items: list) -> tuple:
        count = next(i
                     for i, item in enumerate(items) if not (isinstance(item,
                                                                        Token) and
                                                             item.type == "NAME"))
        archs, gpu, body = [str(a) for a in items[:count]], items[count], items[count + 1:]
        settings = tuple(i for i in body if isinstance(i, model.Setting))
        provs = [i for i in body if isinstance(i, tuple)]
        self._once(provs, ("provenance",), "target")
        records, prov_span = (provs[0][1], provs[0][2]) if provs else (None, NO_SPAN)
        target = model.Target(archs[0], unquote(gpu) if gpu is not None else None, settings,
                              records, _span(meta), prov_span, tuple(archs[1:]))
        return ("target", target, _span(meta))

    def unit_kernel(self, items: list) -> Any:
        return model.KERNEL

    @v_args(meta=True)
    def unit(self, meta: Meta, items: list) -> model.Unit:
        kind = items[0] or model.SOURCE
        globs = tuple(unquote(i) for i in items if isinstance(i, Token))
        parts = [i for i in items if isinstance(i, tuple)]
        self._once(parts, ("search", "tune", "bench"), "unit")
        pick = lambda kind: [value for k, value, _ in parts if k == kind]
        first = lambda kind: (pick(kind) or [None])[0]
        search_span = next((span for k, _, span in parts if k == "search"), NO_SPAN)
        search = first("search") or ()
        return model.Unit(globs, tuple(pick("pin")),
                          tuple(i for i in search if isinstance(i, model.Space)),
                          first("tune"), first("bench"), tuple(pick("target")), _span(meta),
                          search_span,
                          tuple(i for i in search if isinstance(i, model.SpaceRequire)), kind)
