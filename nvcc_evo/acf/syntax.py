"""Syntax errors of the parse stage: located, named in words a user knows,
and all of a file's reported in one run.

A table of example mistakes (tested row by row) maps a parser state to a
label. To find the next error, the statement at each error is blanked out
(positions kept) and the text parsed again.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Collection, Iterator

import lark
from lark import Token

from nvcc_evo.acf.text import char_places
from nvcc_evo.errors import Diagnostic, Location

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
HEADER_LABEL = "an ACF starts with its version header `acf 1`"
HEADER = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*acf[ \t]+[0-9]+")
SYNTAX_EXAMPLES: dict[str, list[str]] = {
    HEADER_LABEL: [
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
    "a search block's `require` compares expressions of defines named without `define.`: "
    "require (BM / TM) * (BN / TN) <= 1024": [
        'acf 1\nunit "a.cu" { search { require B } }',
        'acf 1\nunit "a.cu" { search { require B <= } }',
    ],
    "a unit holds pin, search, tune, bench and target blocks": [
        'acf 1\nunit "a.cu" { foo }',
        'acf 1\nunit "a.cu" { ptxas.opt_level = 3 }',
    ],
    ("a bench block holds kernel, let, arg, grid, block, shared, check, reference, command and "
     "metric"): [
        'acf 1\nunit "a.cu" { bench { foo } }',
        'acf 1\nunit "a.cu" { bench { size N = 4 } }',
    ],
    "an argument reads `arg NAME : DTYPE[COUNT] = INIT` or `arg NAME : DTYPE = VALUE`": [
        'acf 1\nunit "a.cu" { bench { arg A f32[4] = output } }',
        'acf 1\nunit "a.cu" { bench { arg A : f32[4] } }',
    ],
    ("a target names GPU architectures: target sm_90 [\"GPU name\"] { ... } or "
     "target sm_80, sm_90 { ... }"): [
        'acf 1\nunit "a.cu" { target "sm_90" {} }',
        'acf 1\nunit "a.cu" { target {} }',
        'acf 1\nunit "a.cu" { target sm_80 sm_90 {} }',
        'acf 1\nunit "a.cu" { target sm_80, {} }',
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



def source_line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _end_location(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"'{tok}'"


def _expected_words(parser: lark.Lark, names: Collection[str]) -> str:
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
def _example_errors(parser: lark.Lark) -> tuple[tuple[str, int, frozenset], ...]:
    """(label, LALR state, accepted terminals) of every example mistake."""
    rows = []
    for label, examples in SYNTAX_EXAMPLES.items():
        for example in examples:
            try:
                parser.parse(example)
            except lark.UnexpectedInput as error:
                rows.append((label, error.state.position,
                             frozenset(getattr(error, "accepts", ()) or ())))
    return tuple(rows)


def match_label(parser: lark.Lark, error: lark.UnexpectedInput) -> str | None:
    """The label of the example mistake in the same parser state. Unlike
    lark's match_examples, the depth of the stack does not matter, so an
    example written in the first unit also names a mistake in the tenth."""
    if error.state is None:
        return None
    accepts = frozenset(getattr(error, "accepts", ()) or ())
    for label, position, example_accepts in _example_errors(parser):
        if position == error.state.position and (not accepts or not example_accepts
                                                 or accepts == example_accepts):
            return label
    return None


def _syntax_message(parser: lark.Lark, error: lark.UnexpectedInput) -> str:
    label = match_label(parser, error)
    expected: Collection[str]                  # terminal names (EOF's: tokens, which are strings)
    if isinstance(error, lark.UnexpectedCharacters):
        found = f"unexpected character '{error.char}'"
        expected = error.allowed
    else:
        assert isinstance(error, (lark.UnexpectedToken, lark.UnexpectedEOF))    # lark's other two
        found = f"unexpected {_describe_token(error.token)}"
        expected = error.expected
    if label:
        return f"{label} ({found})"
    return f"{found}; expected {_expected_words(parser, expected)}"


def _code_chars(text: str) -> Iterator[tuple[int, str]]:
    """(offset, char) of every character outside strings and comments."""
    return ((offset, ch) for offset, ch, place in char_places(text) if place == "code")


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


def _syntax_error(text: str, parser: lark.Lark,
                  error: lark.UnexpectedInput) -> tuple[int, int, int, str]:
    """(line, column, offset, message) of a syntax error. A file that ends
    too early is reported at the block that was never closed."""
    token = getattr(error, "token", None)
    if token is not None and token.type == "$END":
        brace = _unclosed_brace(text)
        if brace is not None:
            line, column = _line_column(text, brace)
            return (line, column, len(text),
                    "this block is never closed: missing '}' before end of file")
        line, column = _end_location(text)
        return line, column, len(text), _syntax_message(parser, error)
    offset = error.pos_in_stream
    assert offset is not None                  # (lexed input: the error has its place)
    quote = isinstance(error, lark.UnexpectedCharacters) and error.char == '"'
    if quote and _unclosed_string(text, offset):
        return (error.line, error.column, offset, "this string is never closed: missing '\"' "
                "before the end of the line (a string holds no line break)")
    foreign = _non_ascii_name(text, offset)
    if foreign is not None:
        return (*_line_column(text, foreign[0]), offset, foreign[1])
    return error.line, error.column, offset, _syntax_message(parser, error)


def _non_ascii_name(text: str, offset: int) -> tuple[int, str] | None:
    """(offset of the letter, message) where the word at `offset` is a name
    or knob with a letter outside ASCII (`define.ÄX`): the lexer reads it as
    something else, and the parser's complaint would be about that."""
    start, end = offset, offset
    while start > 0 and re.match(r"[\w.]", text[start - 1]):
        start -= 1
    while end < len(text) and re.match(r"[\w.]", text[end]):
        end += 1
    word = text[start:end]
    letter = next((i for i, ch in enumerate(word) if not ch.isascii()), None)
    if letter is None:
        return None
    ch = word[letter]
    if word.startswith("define."):
        what = "a define's name is a C identifier of"
    else:
        what = "a name or knob is made of"
    return start + letter, (f"{what} ASCII letters, digits and '_': '{ch}' (U+{ord(ch):04X}) in "
                            f"'{word}' is not ASCII")


def _unclosed_string(text: str, start: int) -> bool:
    """Does the string opened at `start` run to the end of its line?"""
    end = text.find("\n", start)
    rest = text[start + 1:end if end >= 0 else len(text)]
    return re.fullmatch(r'(?:[^"\\]|\\.)*\\?', rest) is not None


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
    depth = 0
    for i, ch in _code_chars(text[start:]):         # braces in strings and comments do not count
        i += start
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and i >= end:
                return start, i + 1
        elif ch == "\n" and i >= end and depth <= 0:
            break
    return start, end



def parse_reporting_all(parser: lark.Lark, text: str,
                        path: str) -> tuple[Any, list[Diagnostic]]:
    """(tree, []) for good text; (None, diagnostics) listing every syntax error."""
    diagnostics: list[Diagnostic] = []
    working, seen = text, set()
    while len(diagnostics) < MAX_SYNTAX_ERRORS:
        try:
            return parser.parse(working), diagnostics
        except lark.UnexpectedInput as error:
            line, column, offset, message = _syntax_error(working, parser, error)
            if diagnostics and message.startswith(HEADER_LABEL):
                break  # the recovery blanked the header: what follows would all read as "no header"
            if (line, column) not in seen:
                seen.add((line, column))
                diagnostics.append(Diagnostic(Location(path, line, column), message,
                                              source_line(text, line)))
            start, end = _statement_extent(working, min(offset, len(working)))
            header = HEADER.match(working)
            if header and start < header.end() <= min(offset, end):
                start = header.end()               # `acf 1;`: the header stays, the rest of its
                                                   # line goes
            if offset >= len(working) or not working[start:end].strip():
                break
            working = _blank(working, start, end)
    return None, diagnostics
