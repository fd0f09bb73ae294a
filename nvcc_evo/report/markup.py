"""The report's one way to HTML: text is escaped unless it is `Markup`.

Everything the page shows comes from files a cloned repository may hold (a
results store's architecture, device and metric names, an ACF's unit globs
and provenance, the kernels' names), so a value is text by default: `text`
escapes it and shows its line breaks and other control characters as
`\\n`, `\\x1b`, ... (one value is one line of a cell). Only what `tag`,
`table` and `join` build from escaped parts is `Markup`, and only Markup
passes into the page as it is (autoescape, as a template engine's).
"""
from __future__ import annotations

import html
import re
from typing import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Markup(str):
    """HTML built here from escaped parts: put into the page as it is."""


def text(value: object) -> Markup:
    """A value read from a file, as HTML text: escaped, quotes too, and its
    control characters written out (`\\n`), never a line of the page."""
    if isinstance(value, Markup):
        return value
    shown = _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(value))
    return Markup(html.escape(shown, quote=True))


def tag(name: str, *children: object, **attributes: object) -> Markup:
    """`<name attributes>children</name>`, each child and attribute value
    escaped unless it is Markup (`class_` for `class`)."""
    said = "".join(f' {key.rstrip("_")}="{text(value)}"' for key, value in attributes.items())
    return Markup(f"<{name}{said}>{join(children)}</{name}>")


def join(parts: Iterable[object], between: str = "") -> Markup:
    """Parts side by side, each escaped unless it is Markup."""
    return Markup(text(between).join(text(part) for part in parts))


def table(head: list, rows: list[list], caption: object = "", **attributes: object) -> Markup:
    """A table: its caption, a header row, then the rows; every cell through
    `text` unless it is Markup."""
    header = tag("tr", *(tag("th", cell) for cell in head)) if head else ""
    body = [tag("tr", *(tag("td", cell) for cell in row)) for row in rows]
    return tag("table", tag("caption", caption) if caption else "", header, *body, **attributes)
