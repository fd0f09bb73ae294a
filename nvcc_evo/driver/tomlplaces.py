"""Where each key of a settings file stands in its text: tomllib gives no
positions for values, so a settings error is located by finding its key's
line here (`places`), and TOML's own errors are given their place
(`decode_error`). Lean: re, and the diagnostics of nvcc_evo.errors.
"""
from __future__ import annotations

import re

from nvcc_evo.errors import Diagnostic, Location

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""      # a bare, quoted or literal key
_KEY = re.compile(rf"^(\s*)({_PART}(?:\s*\.\s*{_PART})*)\s*=")


def _dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def places(lines: list[str], prefix: tuple[str, ...], tables: set[str]) -> dict:
    """Our key names -> (line, column) of their first mention: table headers
    and `key =` lines (multi-line strings and arrays are not followed; a key
    not found is placed at its table, else at 1:1)."""
    found: dict[str, tuple[int, int, int]] = {}
    table: tuple[str, ...] = ()
    depth = 0
    for number, line in enumerate(lines, 1):
        if depth == 0 and (header := _HEADER.match(line)) and not line.lstrip().startswith("[["):
            table = _dotted(header.group(1))
            name = _ours(table, prefix, tables)
            if name:
                found.setdefault(name, (number, line.index("[") + 1, line.index("[") + 1))
            continue
        match = _KEY.match(line) if depth == 0 else None
        if match:
            name = _ours(table + _dotted(match.group(2)), prefix, tables)
            if name:
                value_at = len(line) - len(line[match.end():].lstrip()) + 1
                found.setdefault(name, (number, len(match.group(1)) + 1, value_at))
        depth = max(0, depth + line.count("[") - line.count("]")) if "=" in line or depth else depth
    return found


def _ours(path: tuple[str, ...], prefix: tuple[str, ...], tables: set[str]) -> str:
    if path[:len(prefix)] != prefix or len(path) == len(prefix):
        return ""
    rest = path[len(prefix):]
    if rest[0] in tables and len(rest) > 1:
        return ".".join(rest[:2])
    return ".".join(rest)


def decode_error(error: ValueError, text: str, shown: str) -> Diagnostic:
    """TOML's own error (tomllib's TOMLDecodeError, a ValueError) located where it says."""
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(error))
    line, column = (int(found.group(1)), int(found.group(2))) if found else (1, 1)
    message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(error)) or "not valid TOML"
    lines = text.splitlines()
    source = lines[line - 1] if 0 < line <= len(lines) else ""
    return Diagnostic(Location(shown, line, column), f"{message[0].lower()}{message[1:]} (TOML)",
                      source)
