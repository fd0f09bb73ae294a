"""A unit's target block rewritten in the ACF's text as it is now: the unit
found by its globs (`find_unit`, never by position), its block for the
target's architecture and GPU replaced or added (`replace_target`), every
other byte of the file kept, so that a retune never loses a hand edit;
`update_target` does both on a text. The block itself is written as the
formatter writes it (nvcc_evo.acf.edit.format).
"""
from __future__ import annotations

from dataclasses import replace

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import NO_SPAN
from nvcc_evo.acf.edit.format import INDENT, Writer, attach_comments, write_target
from nvcc_evo.acf.edit.spelling import show_string
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.errors import AcfChanged


def update_target(text: str, globs: tuple[str, ...], target: model.Target,
                  path: str = "<acf>") -> str:
    """Replace (or add) `target` in the unit with these globs, found in
    `text` as it is now (never by position: a unit inserted above must not
    receive another's result); all other bytes stay. AcfChanged when no unit
    or several have those globs."""
    file = parse_text(text, path)
    return replace_target(text, file, find_unit(file, globs), target)


def find_unit(file: model.AcfFile, globs: tuple[str, ...]) -> model.Unit:
    """The one unit with these globs (in any order, as duplicate units are
    told apart); AcfChanged if there is none or there are several."""
    found = [u for u in file.units if frozenset(u.globs) == frozenset(globs)]
    shown = " ".join(show_string(g) for g in globs)
    if not found:
        raise AcfChanged(f"no unit {shown} in {file.path} any more (removed, or its globs changed)")
    if len(found) > 1:
        lines = ", ".join(str(u.span.line) for u in found)
        raise AcfChanged(f"{len(found)} units {shown} in {file.path} (lines {lines}): which one is "
                         "meant is unclear")
    return found[0]


def replace_target(text: str, file: model.AcfFile, unit: model.Unit, target: model.Target) -> str:
    """Replace (or add) `target` in `unit` of `file` (parsed from `text`): the
    block for the same architecture and GPU name. Comments of knobs that
    remain stay with them. A block that serves other architectures too
    keeps serving those, and the architecture gets a block of its own: what
    was measured on one architecture is written for that one only."""
    old = unit.find_target(target.arch, target.gpu)
    rest = tuple(a for a in old.archs if not target.serves(a)) if old is not None else ()
    if old is not None and rest:
        text = _replace_block(text, file, old, replace(old, arch=rest[0], more_archs=rest[1:]))
        file = parse_text(text, file.path)
        return _add_block(text, file, find_unit(file, unit.globs), target)
    if old is not None:
        spans = {s.knob: s.span for s in old.settings}
        target = replace(target, settings=tuple(replace(s, span=spans.get(s.knob, NO_SPAN))
                                                for s in target.settings))
        return _replace_block(text, file, old, target)
    return _add_block(text, file, unit, target)


def _replace_block(text: str, file: model.AcfFile, old: model.Target, target: model.Target) -> str:
    """`old`'s block written anew as `target` (at old's place, with its comments)."""
    target = replace(target, span=old.span, provenance_span=old.provenance_span)
    indent = _indent_of(text, old.span.start)
    return _written(text, file, target, indent, old.span.start, old.span.end, "", "")


def _add_block(text: str, file: model.AcfFile, unit: model.Unit, target: model.Target) -> str:
    """`target` as a new block at the end of `unit`."""
    target = replace(target, span=NO_SPAN, provenance_span=NO_SPAN)
    closing = unit.span.end - 1                     # the unit's '}'
    line_start = text.rfind("\n", 0, closing) + 1
    unit_indent = _indent_of(text, unit.span.start)
    indent = unit_indent + INDENT
    if text[line_start:closing].strip() == "":      # '}' alone on its line
        return _written(text, file, target, indent, line_start, line_start, indent, "\n")
    start = len(text[:closing].rstrip())            # a one-line unit
    return _written(text, file, target, indent, start, start, "\n" + indent, "\n" + unit_indent)


def _written(text: str, file: model.AcfFile, target: model.Target, indent: str, start: int,
             end: int,
             prefix: str, suffix: str) -> str:
    w = Writer(attach_comments(file), margin=len(indent))
    write_target(w, target)
    return text[:start] + prefix + ("\n" + indent).join(w.lines) + suffix + text[end:]


def _indent_of(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    line = text[line_start:offset]
    return line[: len(line) - len(line.lstrip())]
