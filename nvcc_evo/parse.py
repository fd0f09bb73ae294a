"""Parse stage: ACF text -> AcfFile, or an AcfError with every syntax error.

The grammar is grammar/acf.lark (installed as nvcc_evo/grammar/acf.lark).
Syntax errors are located and, where a table of example mistakes matches,
named in words a user knows. To report every error of a file in one run, the
statement at each error is blanked out (positions kept) and the text parsed
again.
"""
from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Transformer, v_args

from nvcc_evo import acf
from nvcc_evo.errors import AcfError, Diagnostic, Location

MAX_SYNTAX_ERRORS = 20

# Friendly names for terminals in "expected ..." lists.
TERMINAL_WORDS = {
    "KNOB": "a knob name (ptxas.NAME, nvcc.NAME or define.NAME)",
    "NAME": "a name",
    "STRING": "a quoted string",
    "INT": "an integer",
    "SIGNED_INT": "an integer",
    "FLOAT": "a number",
    "SIGNED_FLOAT": "a number",
    "CMP": "a comparison (<=, <, ==, >=, >)",
    "$END": "end of file",
}

# Example mistakes -> what to tell the user. Each row is tested
# (tests/test_parse.py) to produce exactly its label.
SYNTAX_EXAMPLES: dict[str, list[str]] = {
    "an ACF starts with its version header `acf 1`": [
        'unit "a.cu" {}',
        "# nothing\ntarget sm_90 {}",
    ],
    "missing '=' between knob and value": [
        'acf 1\nunit "a.cu" { target sm_90 { ptxas.maxrregcount 40 } }',
        'acf 1\nunit "a.cu" { pin nvcc.ftz true }',
    ],
    "a knob name needs its family: ptxas.NAME, nvcc.NAME or define.NAME": [
        'acf 1\nunit "a.cu" { target sm_90 { maxrregcount = 40 } }',
        'acf 1\nunit "a.cu" { pin ftz = true }',
        'acf 1\nunit "a.cu" { search { TILE in {8, 16} } }',
    ],
    "unit paths are quoted strings: unit \"kernels/*.cu\" { ... }": [
        "acf 1\nunit kernels {}",
        "acf 1\nunit {}",
    ],
    "a search entry reads `knob in {a, b}`, `knob in LOW..HIGH [step N]` or `knob in bool`": [
        'acf 1\nunit "a.cu" { search { ptxas.opt_level = 3 } }',
        'acf 1\nunit "a.cu" { search { ptxas.opt_level in 0 } }',
        'acf 1\nunit "a.cu" { search { define.T in 1, 2 } }',
    ],
    "a unit holds pin, search, tune, bench and target blocks": [
        'acf 1\nunit "a.cu" { foo }',
        'acf 1\nunit "a.cu" { ptxas.opt_level = 3 }',
    ],
    "a bench block holds kernel, let, arg, grid, block, shared, check, command and metric": [
        'acf 1\nunit "a.cu" { bench { foo } }',
        'acf 1\nunit "a.cu" { bench { size N = 4 } }',
    ],
    "an argument reads `arg NAME : DTYPE[COUNT] = INIT` or `arg NAME : DTYPE = VALUE`": [
        'acf 1\nunit "a.cu" { bench { arg A f32[4] = output } }',
        'acf 1\nunit "a.cu" { bench { arg A : f32[4] } }',
    ],
    "a target names a GPU architecture: target sm_90 [\"GPU name\"] { ... }": [
        'acf 1\nunit "a.cu" { target "sm_90" {} }',
        'acf 1\nunit "a.cu" { target {} }',
    ],
    "a tune block holds `minimize`, `require` and `select` lines": [
        'acf 1\nunit "a.cu" { tune { maximize runtime } }',
    ],
    "a provenance line reads `key = value [+- spread]`": [
        'acf 1\nunit "a.cu" { target sm_90 { provenance { date "x" } } }',
    ],
    "a value is a number, true, false, a name or a quoted string": [
        'acf 1\nunit "a.cu" { pin nvcc.ftz = }',
        'acf 1\nunit "a.cu" { target sm_90 { ptxas.opt_level = { } } }',
    ],
}


def _grammar_text() -> str:
    """The grammar from the installed package; a source checkout falls back
    to the repository's grammar/ folder."""
    try:
        return resources.files("nvcc_evo.grammar").joinpath("acf.lark").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parent.parent / "grammar" / "acf.lark").read_text()


def grammar_location() -> str:
    try:
        return str(resources.files("nvcc_evo.grammar").joinpath("acf.lark"))
    except ModuleNotFoundError:
        return str(Path(__file__).resolve().parent.parent / "grammar" / "acf.lark")


@functools.lru_cache(maxsize=None)
def build_parser(strict: bool = False) -> lark.Lark:
    return lark.Lark(_grammar_text(), parser="lalr", propagate_positions=True,
                     maybe_placeholders=True, strict=strict, cache=not strict)


def _span(meta) -> acf.Span:
    return acf.Span(meta.line, meta.column, meta.end_line, meta.end_column,
                    meta.start_pos, meta.end_pos)


def _token_span(tok: Token) -> acf.Span:
    return acf.Span(tok.line, tok.column, tok.end_line, tok.end_column,
                    tok.start_pos, tok.end_pos)


def unquote(token: str) -> str:
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def _binary(op: str):
    return v_args(meta=True)(lambda self, meta, items: acf.Binary(op, items[0], items[1], _span(meta)))


class _Build(Transformer):
    """Lark tree -> acf values; one short method per grammar rule.

    Blocks that may appear once per parent (search, tune, bench, provenance,
    kernel, command, metric) are counted; repeats land in `repeats`."""

    def __init__(self):
        super().__init__()
        self.repeats: list[tuple[acf.Span, str]] = []

    def _once(self, parts, kinds: tuple[str, ...], where: str):
        """Note every repeat of a once-only part, given (kind, value, span)."""
        for kind in kinds:
            for _, _, span in [p for p in parts if p[0] == kind][1:]:
                self.repeats.append((span, f"a {where} block has one '{kind}'; this one repeats it"))

    # values
    def signed_int(self, items):
        return int(items[0])

    def signed_float(self, items):
        return float(items[0])

    def true(self, _):
        return True

    def false(self, _):
        return False

    def symbol(self, items):
        return str(items[0])

    def string(self, items):
        return unquote(items[0])

    # expressions
    @v_args(meta=True)
    def int_literal(self, meta, items):
        return acf.Literal(int(items[0]), _span(meta))

    @v_args(meta=True)
    def float_literal(self, meta, items):
        return acf.Literal(float(items[0]), _span(meta))

    @v_args(meta=True)
    def ref(self, meta, items):
        return acf.Ref(str(items[0]), _span(meta))

    @v_args(meta=True)
    def neg(self, meta, items):
        return acf.Unary("-", items[0], _span(meta))

    @v_args(meta=True)
    def call(self, meta, items):
        return acf.Call(str(items[0]), tuple(items[1:]), _span(meta))

    add, sub, mul, div, mod = (_binary(op) for op in "+-*/%")

    # units
    def header(self, items):
        return (int(items[0]), _token_span(items[0]))

    @v_args(meta=True)
    def pin(self, meta, items):
        return ("pin", acf.Setting(str(items[0]), items[1], _span(meta)), _span(meta))

    @v_args(meta=True)
    def setting(self, meta, items):
        return acf.Setting(str(items[0]), items[1], _span(meta))

    @v_args(meta=True)
    def space(self, meta, items):
        return acf.Space(str(items[0]), items[1], _span(meta))

    def set_domain(self, items):
        return acf.SetDomain(tuple(items))

    def range_domain(self, items):
        return acf.RangeDomain(items[0], items[1], int(items[2]) if items[2] is not None else 1)

    def bool_domain(self, _):
        return acf.BoolDomain()

    @v_args(meta=True)
    def search(self, meta, items):
        return ("search", tuple(items), _span(meta))

    # tune
    @v_args(meta=True)
    def condition(self, meta, items):
        bound, relative = items[2]
        return acf.Condition(str(items[0]), str(items[1]), bound, relative, _span(meta))

    def absolute(self, items):
        return (items[0], False)

    def relative(self, items):
        return (items[0], True)

    def at_baseline(self, _):
        return (1.0, True)

    @v_args(meta=True)
    def minimize(self, meta, items):
        return ("minimize", tuple(str(i) for i in items), _span(meta))

    @v_args(meta=True)
    def require(self, meta, items):
        return ("require", items[0], _span(meta))

    @v_args(meta=True)
    def select(self, meta, items):
        return ("select", (str(items[0]), tuple(i for i in items[1:] if i is not None)), _span(meta))

    @v_args(meta=True)
    def tune(self, meta, items):
        minimize = tuple(m for kind, value, _ in items if kind == "minimize" for m in value)
        require = tuple(value for kind, value, _ in items if kind == "require")
        selects = [value for kind, value, _ in items if kind == "select"]
        select, where = selects[-1] if selects else (None, ())
        spans = tuple((kind, span) for kind, _, span in items)
        return ("tune", acf.Tune(minimize, require, select, where, _span(meta), spans), _span(meta))

    # bench
    @v_args(meta=True)
    def kernel(self, meta, items):
        tok = items[0]
        text = unquote(tok) if tok.type == "STRING" else str(tok)
        return acf.Text("kernel", text, _span(meta))

    @v_args(meta=True)
    def command(self, meta, items):
        return acf.Text("command", unquote(items[0]), _span(meta))

    @v_args(meta=True)
    def metric(self, meta, items):
        return acf.Text("metric", unquote(items[0]), _span(meta))

    @v_args(meta=True)
    def let(self, meta, items):
        return acf.Let(str(items[0]), items[1], _span(meta))

    @v_args(meta=True)
    def array_arg(self, meta, items):
        init, params = items[3]
        return acf.Arg(str(items[0]), str(items[1]), count=items[2], init=init,
                       params=params, span=_span(meta))

    @v_args(meta=True)
    def scalar_arg(self, meta, items):
        return acf.Arg(str(items[0]), str(items[1]), value=items[2], span=_span(meta))

    def output_init(self, _):
        return ("output", ())

    def call_init(self, items):
        return (str(items[0]), tuple(i for i in items[1:] if i is not None))

    def init_param(self, items):
        return acf.InitParam(str(items[0]) if items[0] is not None else None, items[1])

    @v_args(meta=True)
    def grid(self, meta, items):
        return acf.Launch("grid", tuple(items), _span(meta))

    @v_args(meta=True)
    def block(self, meta, items):
        return acf.Launch("block", tuple(items), _span(meta))

    @v_args(meta=True)
    def shared(self, meta, items):
        return acf.Launch("shared", tuple(items), _span(meta))

    @v_args(meta=True)
    def check(self, meta, items):
        tolerances = dict(items[1:])
        return acf.Check(str(items[0]), tolerances.get("rtol"), tolerances.get("atol"),
                         "exact" in tolerances, _span(meta))

    def rtol(self, items):
        return ("rtol", float(items[0]))

    def atol(self, items):
        return ("atol", float(items[0]))

    def exact(self, _):
        return ("exact", True)

    @v_args(meta=True)
    def bench(self, meta, items):
        of = lambda cls: tuple(i for i in items if isinstance(i, cls))
        self._once([(t.what, t, t.span) for t in of(acf.Text)], ("kernel", "command", "metric"), "bench")
        self._once([(x.what, x, x.span) for x in of(acf.Launch)], ("grid", "block", "shared"), "bench")
        texts = {t.what: t for t in of(acf.Text)}
        bench = acf.Bench(texts.get("kernel"), of(acf.Let), of(acf.Arg), of(acf.Launch),
                          of(acf.Check), texts.get("command"), texts.get("metric"), _span(meta))
        return ("bench", bench, _span(meta))

    # targets
    @v_args(meta=True)
    def record(self, meta, items):
        spread = float(items[2]) if items[2] is not None else None
        return acf.Record(str(items[0]), items[1], spread, _span(meta))

    @v_args(meta=True)
    def provenance(self, meta, items):
        return ("provenance", tuple(items), _span(meta))

    @v_args(meta=True)
    def target(self, meta, items):
        arch, gpu, body = str(items[0]), items[1], items[2:]
        settings = tuple(i for i in body if isinstance(i, acf.Setting))
        provs = [i for i in body if isinstance(i, tuple)]
        self._once(provs, ("provenance",), "target")
        records, prov_span = (provs[0][1], provs[0][2]) if provs else (None, acf.NO_SPAN)
        target = acf.Target(arch, unquote(gpu) if gpu is not None else None, settings,
                            records, _span(meta), prov_span)
        return ("target", target, _span(meta))

    @v_args(meta=True)
    def unit(self, meta, items):
        globs = tuple(unquote(i) for i in items if isinstance(i, Token))
        parts = [i for i in items if isinstance(i, tuple)]
        self._once(parts, ("search", "tune", "bench"), "unit")
        pick = lambda kind: [value for k, value, _ in parts if k == kind]
        first = lambda kind: (pick(kind) or [None])[0]
        search_span = next((span for k, _, span in parts if k == "search"), acf.NO_SPAN)
        return acf.Unit(globs, tuple(pick("pin")), first("search") or (), first("tune"),
                        first("bench"), tuple(pick("target")), _span(meta), search_span)


def find_comments(text: str) -> tuple[acf.Comment, ...]:
    """Every `#` comment outside strings (the only other place `#` can be)."""
    comments, line, line_start, i, in_string = [], 1, 0, 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            line, line_start, in_string = line + 1, i + 1, False
        elif in_string and ch == "\\":
            i += 1
        elif ch == '"':
            in_string = not in_string
        elif ch == "#" and not in_string:
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            own_line = text[line_start:i].strip() == ""
            comments.append(acf.Comment(line, i - line_start + 1, text[i:end], own_line, i))
            i = end
            continue
        i += 1
    return tuple(comments)


def _source_line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _end_location(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"'{tok}'"


def _expected_words(parser: lark.Lark, names) -> str:
    patterns = {t.name: t.pattern for t in parser.terminals}
    words = set()
    for name in names:
        pattern = patterns.get(name)
        if name in TERMINAL_WORDS:
            words.add(TERMINAL_WORDS[name])
        elif pattern is not None and pattern.type == "str":
            words.add(f"'{pattern.value}'")
        else:
            words.add(name.lower())
    return ", ".join(sorted(words))


@functools.lru_cache(maxsize=None)
def _example_errors() -> tuple[tuple[str, int, frozenset], ...]:
    """(label, LALR state, accepted terminals) of every example mistake."""
    rows = []
    for label, examples in SYNTAX_EXAMPLES.items():
        for example in examples:
            try:
                build_parser().parse(example)
            except lark.UnexpectedInput as error:
                rows.append((label, error.state.position, frozenset(getattr(error, "accepts", ()) or ())))
    return tuple(rows)


def match_label(error: lark.UnexpectedInput) -> str | None:
    """The label of the example mistake in the same parser state. Unlike
    lark's match_examples, the depth of the stack does not matter, so an
    example written in the first unit also names a mistake in the tenth."""
    if error.state is None:
        return None
    accepts = frozenset(getattr(error, "accepts", ()) or ())
    for label, position, example_accepts in _example_errors():
        if position == error.state.position and (not accepts or not example_accepts
                                                 or accepts == example_accepts):
            return label
    return None


def _syntax_message(parser: lark.Lark, error: lark.UnexpectedInput) -> str:
    label = match_label(error)
    if isinstance(error, lark.UnexpectedCharacters):
        found = f"unexpected character '{error.char}'"
        expected = error.allowed
    else:
        found = f"unexpected {_describe_token(error.token)}"
        expected = error.expected
    if label:
        return f"{label} ({found})"
    return f"{found}; expected {_expected_words(parser, expected)}"


def _code_chars(text: str):
    """(offset, char) of every character outside strings and comments."""
    in_string = in_comment = False
    escaped = False
    for offset, ch in enumerate(text):
        if ch == "\n":
            in_string = in_comment = False
        elif in_comment:
            continue
        elif in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        elif ch == '"':
            in_string = True
            continue
        elif ch == "#":
            in_comment = True
            continue
        yield offset, ch


def _unclosed_brace(text: str) -> int | None:
    """Offset of the innermost '{' that no '}' closes."""
    opened: list[int] = []
    for offset, ch in _code_chars(text):
        if ch == "{":
            opened.append(offset)
        elif ch == "}" and opened:
            opened.pop()
    return opened[-1] if opened else None


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _syntax_error(text: str, parser: lark.Lark, error: lark.UnexpectedInput) -> tuple[int, int, int, str]:
    """(line, column, offset, message) of a syntax error. A file that ends
    too early is reported at the block that was never closed."""
    token = getattr(error, "token", None)
    if token is not None and token.type == "$END":
        brace = _unclosed_brace(text)
        if brace is not None:
            line, column = _line_column(text, brace)
            return line, column, len(text), "this block is never closed: missing '}' before end of file"
        line, column = _end_location(text)
        return line, column, len(text), _syntax_message(parser, error)
    return error.line, error.column, error.pos_in_stream, _syntax_message(parser, error)


def _blank(text: str, start: int, end: int) -> str:
    """Spaces over text[start:end], newlines kept so positions stay valid."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def _statement_extent(text: str, offset: int) -> tuple[int, int]:
    """The region to blank for an error at `offset`: its line, grown to the
    matching '}' when the line opens a block, and back to the previous line
    when the error is the line's first token (an unfinished statement)."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    end = len(text) if end < 0 else end
    if text[start:offset].strip() == "" and start > 0:
        prev_start = text.rfind("\n", 0, start - 1) + 1
        if text[prev_start:start].strip() and "{" not in text[prev_start:start]:
            return prev_start, start
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and i >= end:
                return start, i + 1
        elif ch == "\n" and i >= end and depth <= 0:
            break
        i += 1
    return start, end


def parse_text(text: str, path: str = "<acf>") -> acf.AcfFile:
    """Parse ACF text; raise AcfError listing every syntax error."""
    parser = build_parser()
    diagnostics: list[Diagnostic] = []
    working, seen = text, set()
    tree = None
    while len(diagnostics) < MAX_SYNTAX_ERRORS:
        try:
            tree = parser.parse(working)
            break
        except lark.UnexpectedInput as error:
            line, column, offset, message = _syntax_error(working, parser, error)
            if (line, column) not in seen:
                seen.add((line, column))
                diagnostics.append(Diagnostic(Location(path, line, column), message,
                                              _source_line(text, line)))
            start, end = _statement_extent(working, min(offset, len(working)))
            if offset >= len(working) or not working[start:end].strip():
                break
            working = _blank(working, start, end)
    if diagnostics:
        raise AcfError(diagnostics)
    build = _Build()
    (version, header_span), *units = build.transform(tree).children
    if build.repeats:
        raise AcfError([Diagnostic(Location(path, span.line, span.column), message,
                                   _source_line(text, span.line))
                        for span, message in build.repeats])
    return acf.AcfFile(path, version, tuple(units),
                       find_comments(text), header_span)


def parse_file(path: str | Path) -> acf.AcfFile:
    return parse_text(Path(path).read_text(), str(path))
