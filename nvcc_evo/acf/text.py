"""An ACF's bytes as text, for every reader (check, format, build, retune).

UTF-8, with a byte-order mark accepted (and remembered, so a write keeps
it); bytes that are not UTF-8 are a located AcfError (line, column of the
first bad byte), never a traceback. Line endings are read as "\\n" (the
parser, spans and formatter see one kind) and the file's own kind is
remembered so that a rewrite keeps it. Only os-level imports: this module is
on the compile path.
"""
from __future__ import annotations

from typing import NamedTuple

from nvcc_evo.errors import AcfError, Diagnostic, Location
from nvcc_evo.system.files import read_regular       # (a folder, FIFO or device is no ACF)

BOM = b"\xef\xbb\xbf"


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
        shown = body[line_start:body.find(b"\n", line_start) if b"\n" in body[line_start:] else len(body)]
        raise AcfError([Diagnostic(Location(path, line, column),
                                   f"the file is not UTF-8 text: byte(s) 0x{bad.replace(' ', ' 0x')} here "
                                   f"(save it as UTF-8)", shown.decode("utf-8", errors="replace"))]) from None
    newline = "\r\n" if "\r\n" in text else "\n"
    text = text.replace("\r\n", "\n")
    alone = text.find("\r")
    if alone >= 0:          # editors show a new line there; the parser would not (a comment would swallow it)
        line_start = text.rfind("\n", 0, alone) + 1
        line = text.count("\n", 0, alone) + 1
        raise AcfError([Diagnostic(Location(path, line, alone - line_start + 1),
                                   "a carriage return (CR) alone: end lines with LF or CR LF",
                                   text[line_start:alone])])
    nul = text.find("\0")
    if nul >= 0:            # no ACF holds one: a binary file, or one a crash filled with zeros; in a string
        line_start = text.rfind("\n", 0, nul) + 1      # it named a file no path can name, or a GPU none is
        line_end = text.find("\n", nul)
        raise AcfError([Diagnostic(Location(path, text.count("\n", 0, nul) + 1, nul - line_start + 1),
                                   "a NUL byte: an ACF is text (is this a binary file, or one cut by a crash?)",
                                   text[line_start:line_end if line_end >= 0 else len(text)].replace("\0", " "))])
    return AcfText(text, newline, bom)


def read(path) -> AcfText:
    """The ACF at `path`; OSError if it cannot be read, AcfError if it is not UTF-8."""
    return decode(read_regular(path), str(path))


def read_text(path) -> str:
    return read(path).text
