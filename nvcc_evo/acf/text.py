"""An ACF's bytes as text, for every reader (check, format, build, retune).

UTF-8, with a byte-order mark accepted (and remembered, so a write keeps
it); bytes that are not UTF-8 are a located AcfError (line, column of the
first bad byte), never a traceback. Line endings are read as "\\n" (the
parser, spans and formatter see one kind) and the file's own kind is
remembered so that a rewrite keeps it. A line, string or comment longer
than its limit (LINE_LIMIT, STRING_LIMIT, COMMENT_LIMIT: docs/acf.md) is a
located AcfError found here, before the parse: lark and the checks cost a
few hundred bytes a character (a 10 MB string took 3.4 GB), and a message
never quotes such a value whole. `char_places` is the one lexer of strings
and comments. Only os-level imports: this module is on the compile path.
"""
from __future__ import annotations

import os
import re
import unicodedata
from typing import Iterator, NamedTuple

from nvcc_evo.errors import AcfError, Diagnostic, Location
from nvcc_evo.system.files import read_regular       # (a folder, FIFO or device is no ACF)
from nvcc_evo.system.say import HIDDEN

BOM = b"\xef\xbb\xbf"
LINE_LIMIT = 16384       # characters in a line
STRING_LIMIT = 8192      # characters in a quoted string (a glob, a kernel name, a command, a
                         # pattern), quotes too
COMMENT_LIMIT = 8192     # characters in a comment, from its '#'
# The rest of a string after its opening quote: as char_places reads it (a backslash escapes the
# next character), measured where a line is too long to be read character by character.
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"?')
_HIDDEN = re.compile("[" + "".join(re.escape(chr(code)) for code in sorted(HIDDEN)) + "]")
HIDDEN_SAID = 20         # hidden characters said at most (a file full of them: the first ones)
SHOWN_AFTER = 100        # characters of a too long line kept after the place its message points at


class AcfText(NamedTuple):
    """The text of an ACF as the parser reads it, and how the file spells it."""

    text: str              # "\n" line endings, no BOM
    newline: str = "\n"    # "\r\n" when the file's lines end so
    bom: bool = False

    def encode(self, text: str) -> bytes:
        """`text` ("\\n" endings) spelled the way this file is."""
        if self.newline != "\n":
            text = text.replace("\n", self.newline)
        return (BOM if self.bom else b"") + text.encode("utf-8")


def decode(data: bytes, path: str) -> AcfText:
    bom = data.startswith(BOM)
    body = data[len(BOM):] if bom else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as problem:
        before = body[:problem.start]
        line = before.count(b"\n") + 1
        line_start = before.rfind(b"\n") + 1
        column = len(before[line_start:].decode("utf-8", errors="replace")) + 1
        bad = body[problem.start:problem.end].hex(" ")
        line_end = body.find(b"\n", line_start)
        raw = body[line_start:line_end if line_end >= 0 else len(body)]
        raise AcfError([Diagnostic(Location(path, line, column),
                                   "the file is not UTF-8 text: byte(s) "
                                   f"0x{bad.replace(' ', ' 0x')} here (save it as UTF-8)",
                                   raw.decode("utf-8", errors="replace"))]) from None
    newline = "\r\n" if "\r\n" in text else "\n"
    text = text.replace("\r\n", "\n")
    alone = text.find("\r")
    if alone >= 0:          # editors show a new line there; the parser would not (a comment would
                            # swallow it)
        line_start = text.rfind("\n", 0, alone) + 1
        line = text.count("\n", 0, alone) + 1
        raise AcfError([Diagnostic(Location(path, line, alone - line_start + 1),
                                   "a carriage return (CR) alone: end lines with LF or CR LF",
                                   text[line_start:alone])])
    nul = text.find("\0")
    # No ACF holds a NUL byte: a binary file, or one a crash filled with zeros; in a string it
    # named a file no path can name, or a GPU none is.
    if nul >= 0:
        line_start = text.rfind("\n", 0, nul) + 1
        line_end = text.find("\n", nul)
        shown = text[line_start:line_end if line_end >= 0 else len(text)].replace("\0", " ")
        raise AcfError([Diagnostic(Location(path, text.count("\n", 0, nul) + 1,
                                            nul - line_start + 1),
                                   "a NUL byte: an ACF is text (is this a binary file, or one cut "
                                   "by a crash?)", shown)])
    check_limits(text, path)
    return AcfText(text, newline, bom)


def check_limits(text: str, path: str) -> None:
    """AcfError, located, for each line, string or comment of `text` over its
    limit (the scan of strings only where a line is long enough to hold one),
    else for each hidden character outside strings and comments."""
    diagnostics = []
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > min(STRING_LIMIT, COMMENT_LIMIT, LINE_LIMIT):
            diagnostics += _over_limits(line, number, path)
    if not diagnostics:
        diagnostics = [d for d in hidden_characters(text, path) if d.severity == "error"]
    if diagnostics:
        raise AcfError(diagnostics)


def hidden_characters(text: str, path: str) -> list[Diagnostic]:
    """A diagnostic for each character of `text` that hides or reorders what
    a terminal shows (system.say.HIDDEN: bidi controls, zero-width characters,
    controls): a warning in a string or comment (as compilers' -Wbidi-chars),
    an error elsewhere; the first HIDDEN_SAID of them."""
    found: list[Diagnostic] = []
    lines: dict[int, dict[int, str]] = {}              # line start -> the places of its characters,
                                                       # read once
    for match in _HIDDEN.finditer(text):
        if len(found) == HIDDEN_SAID:
            break
        offset = match.start()
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        line = text[start:end if end >= 0 else len(text)]
        if start not in lines:
            lines[start] = {o: place for o, _, place in char_places(line)}
        place = lines[start][offset - start]
        found.append(Diagnostic(Location(path, text.count("\n", 0, offset) + 1, offset - start + 1),
                                _hidden_said(match.group(), place), line,
                                "warning" if place in ("string", "comment") else "error"))
    return found


def _hidden_said(char: str, place: str) -> str:
    name = unicodedata.name(char, "") or "a control character"
    said = f"a hidden character U+{ord(char):04X} ({name})"
    if place in ("string", "comment"):
        return f"{said} in a {place}: a terminal shows it otherwise than the file reads"
    return f"{said} outside strings and comments"


def _over_limits(line: str, number: int, path: str) -> list[Diagnostic]:
    """The strings and comments of one long line over their limits, else the
    line itself. Read char by char only up to the line's limit: a string or
    comment still open there is measured to its end by a search."""
    window = line[:LINE_LIMIT + 1]
    found, begun, place = [], 0, "code"
    for offset, _, now in char_places(window + "\n"):
        if now != place:
            cut = offset == len(window) < len(line)
            end = _run_end(line, place, begun) if cut else offset
            found += _too_long(line, number, path, place, begun, end)
            begun, place = offset, now
    if not found and len(line) > LINE_LIMIT:
        found.append(_said(line, number, path, LINE_LIMIT + 1,
                           f"a line of {len(line)} characters (the limit is {LINE_LIMIT})"))
    return found


def _run_end(line: str, place: str, begun: int) -> int:
    """Where a string or comment begun at `begun` of `line` ends."""
    if place == "comment":
        return len(line)
    rest = _STRING_REST.match(line, begun + 1)           # (it matches anything, at worst nothing)
    return rest.end() if rest else len(line)


def _too_long(line: str, number: int, path: str, place: str, begun: int,
              end: int) -> list[Diagnostic]:
    limit = {"string": STRING_LIMIT, "comment": COMMENT_LIMIT}.get(place)
    if limit is None or end - begun <= limit:
        return []
    return [_said(line, number, path, begun + 1, f"a {place} of {end - begun} characters (the "
                                                 f"limit is {limit})")]


def _said(line: str, number: int, path: str, column: int, message: str) -> Diagnostic:
    """A diagnostic whose source line is cut after its column (never the whole of a huge line)."""
    shown = line[:column - 1 + SHOWN_AFTER]
    return Diagnostic(Location(path, number, column), message,
                      shown + ("..." if len(shown) < len(line) else ""))


def char_places(text: str) -> Iterator[tuple[int, str, str]]:
    """(offset, char, place) for every character, place being "code",
    "string" (quotes included) or "comment" (from '#' to the line's end):
    the one reading of strings and comments, for comments, braces and
    error recovery alike. Neither a string nor a comment crosses a line."""
    place, escaped = "code", False
    for offset, ch in enumerate(text):
        if ch == "\n":
            place, escaped = "code", False
            yield offset, ch, place
            continue
        if place == "string":
            yield offset, ch, place
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                place = "code"
            continue
        if place == "code" and ch in '"#':
            place = "string" if ch == '"' else "comment"
        yield offset, ch, place


def read(path: str | os.PathLike[str]) -> AcfText:
    """The ACF at `path`; OSError if it cannot be read, AcfError if it is not UTF-8."""
    return decode(read_regular(path), str(path))


def read_text(path: str | os.PathLike[str]) -> str:
    return read(path).text
