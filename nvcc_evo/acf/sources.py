"""The `-D` source parameters of a unit: the values its source gives them
itself (`#define NAME value`, through quoted includes) and the values an
entry's `define.NAME` knobs give them. Reads files, imports nothing heavy:
resolve's check and the driver use it as well as the search.

Imports: nvcc_evo.acf only.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from nvcc_evo.acf import knobs, model, unitpath


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_text(source: Path, _seen: frozenset = frozenset()) -> str:
    """The source with its quoted includes inlined where they stand (found
    beside the including file), as far as they can be read: where a kernel
    lives in a header, a thin unit that sets a parameter and includes it
    still shows every parameter."""
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return ""
    seen = _seen | {source.resolve()}

    def inline(match: re.Match) -> str:
        included = source.parent / match.group(1)
        return source_text(included, seen) if included.resolve() not in seen else ""
    return INCLUDE.sub(inline, text)


def source_default(source: Path, name: str) -> int | float | str | None:
    """The value a source gives a parameter itself (`#define NAME value`);
    the first definition wins, as behind an #ifndef guard."""
    match = re.search(rf"^\s*#\s*define\s+{re.escape(name)}\s+(\S+)", source_text(source), re.M)
    if not match:
        return None
    token = match.group(1)
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    return token


def source_defines(source: Path) -> dict:
    """Every numeric `#define NAME value` of a source and its quoted includes
    (the first definition of a name wins): the parameters it gives itself."""
    found = re.finditer(r"^\s*#\s*define\s+(\w+)\s+(-?[0-9.]+)\b", source_text(source), re.M)
    values: dict = {}
    for m in found:
        values.setdefault(m.group(1), float(m.group(2)) if "." in m.group(2) else int(m.group(2)))
    return values


def unit_sources(unit: model.Unit, folder: Path) -> list[Path]:
    """The files a unit's globs name inside `folder` (the ACF's), as the
    build matches them (nvcc_evo.acf.unitpath), sorted; a kernel unit names none."""
    if unit.is_kernel:
        return []
    return [Path(path) for path in unitpath.files(unit.globs, folder)]


def define_values(settings: Mapping[str, object]) -> dict:
    """{NAME: value} of the `define.NAME` knobs among `settings`: what a
    bench expression sees of them."""
    return {k[len(knobs.DEFINE_PREFIX):]: v for k, v in settings.items() if knobs.is_define(k)}


def unit_defines(unit: model.Unit, source: Path) -> dict:
    """Source parameters at the unit's defaults: the source's own #defines
    (through quoted includes), then the unit's pins."""
    return {**source_defines(source), **define_values({p.knob: p.value for p in unit.pins})}


CONDITIONAL = re.compile(r"^\s*#\s*(ifndef|ifdef|if|elif|else|endif|define)\b\s*(.*)$")
NOT_DEFINED = re.compile(r"!\s*defined\s*\(?\s*(\w+)\s*\)?\s*$")


def unguarded_define(source: Path, name: str,
                     _seen: frozenset = frozenset()) -> tuple[Path, int, int] | None:
    """Where a source (or a header it includes with quotes) defines `name`
    outside an `#ifndef NAME` (or `#if !defined(NAME)`) guard: (file, line,
    column). Such a #define fixes the value whatever `-DNAME=` says (the
    front end warns "redefined" and keeps the source's)."""
    try:
        lines = source.read_text(errors="replace").splitlines()
    except OSError:
        return None
    seen, guards = _seen | {source.resolve()}, []
    for number, line in enumerate(lines, 1):
        included = INCLUDE.match(line)
        if included and (source.parent / included.group(1)).resolve() not in seen:
            found = unguarded_define(source.parent / included.group(1), name, seen)
            if found:
                return found
        directive = CONDITIONAL.match(line)
        if directive is None:
            continue
        word, rest = directive.groups()
        if word in ("ifndef", "if"):
            guard = rest.split()[0] if word == "ifndef" and rest.split() else None
            guarded = NOT_DEFINED.fullmatch(rest.strip()) if word == "if" else None
            guards.append(guarded.group(1) if guarded else guard)
        elif word == "ifdef":
            guards.append(None)
        elif word in ("elif", "else") and guards:
            guards[-1] = None
        elif word == "endif" and guards:
            guards.pop()
        elif word == "define" and re.match(rf"{re.escape(name)}\b(?!\()",
                                           rest) and name not in guards:
            return source, number, line.index("#") + 1
    return None


COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
NAMING = re.compile(r"^\s*#\s*(define|undef|ifdef|ifndef)\b")


def compared_only(source: Path, name: str) -> int:
    """How often a source (and its quoted includes) uses the parameter `name`, where every use
    compares it for equality (`#if ALGO == 2`, `if (ALGO != 0)`, `switch (ALGO)`): a parameter
    whose values name choices, not amounts. 0 where some use is anything else (a size, a bound, a
    template argument) or there is none; lines that define, undefine or test it for being defined
    aside."""
    uses = 0
    word = re.compile(rf"\b{re.escape(name)}\b")
    for line in COMMENTS.sub(" ", source_text(source)).splitlines():
        if NAMING.match(line):
            continue
        line = re.sub(rf"defined\s*\(?\s*{re.escape(name)}\b", " ", line)
        for found in word.finditer(line):
            before, after = line[:found.start()].rstrip(), line[found.end():].lstrip()
            switched = re.search(r"\bswitch\s*\($", before) and after.startswith(")")
            if not (after.startswith(("==", "!=")) or before.endswith(("==", "!=")) or switched):
                return 0
            uses += 1
    return uses
