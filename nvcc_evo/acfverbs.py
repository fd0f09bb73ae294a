"""`--acf-check` and `--acf-fmt`, the ACF's own verbs: each file checked
(its errors, then warnings: hidden characters, units whose globs name no
file, targets this nvcc does not build, entries edited since a retune
measured them) or written in the formatter's canonical form (`--check`:
nothing written, exit 1 where a file is not canonical). The command line
(nvcc_evo.cli) parses the arguments and calls them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import cast

from nvcc_evo.acf.edit.format import format_file
from nvcc_evo.acf.edit.write import rewrite
from nvcc_evo.acf.model import AcfFile, domain_values
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.resolve import check, load
from nvcc_evo.acf.sources import compared_only, unit_sources
from nvcc_evo.acf.text import hidden_characters, read_text
from nvcc_evo.driver import settings
from nvcc_evo.driver.common import NvccNotFound, find_real_nvcc
from nvcc_evo.driver.targets import not_built
from nvcc_evo.driver.toolkit import toolkit_version
from nvcc_evo.errors import AcfError, ExitCode, NotWritable
from nvcc_evo.system.locks import Wait
from nvcc_evo.system.say import log, visible


def acf_check(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        try:
            file = load(path)
        except AcfError as error:
            print(error, file=sys.stderr)
            failed += 1
        except OSError as error:
            print(visible(f"{path}: error: {error.strerror}"), file=sys.stderr)
            failed += 1
        else:
            _say_hidden(path)
            _say_unmatched(path, file)
            _say_unbuilt(path, file)
            _say_choices(path, file)
            _say_edited(path, file)
            print(visible(f"{path}: ok ({len(file.units)} unit(s))"))
    return ExitCode.INVALID_INPUT if failed else ExitCode.OK


def _say_hidden(path: str) -> None:
    """A warning for each hidden character in a string or comment (those
    elsewhere are errors of the check): bidi controls, zero-width characters,
    controls, as compilers' -Wbidi-chars."""
    for diagnostic in hidden_characters(read_text(path), path):
        print(diagnostic, file=sys.stderr)


def _say_unmatched(path: str, file: AcfFile) -> None:
    """A warning for each unit whose globs name no file beside the ACF: a
    build would never match it (a mistyped path, or sources yet to be made)."""
    folder = Path(os.path.abspath(path)).parent      # (a linked ACF's own folder, as a build and
                                                     # --retune read it)
    for unit in file.units:
        if not unit.is_kernel and not unit_sources(unit, folder):
            print(visible(f"{path}:{unit.span.line}:{unit.span.column}: warning: unit {unit} "
                          f"matches no file under {folder}: a build applies nothing of it"),
                  file=sys.stderr)


def _say_choices(path: str, file: AcfFile) -> None:
    """A note for each searched define of more than two numbers that its sources only compare for
    equality (`#if ALGO == 2`) and the ACF does not call `unordered`: its values may name choices,
    which the search then treats as such (docs/acf.md)."""
    folder = Path(os.path.abspath(path)).parent
    for unit in file.units:
        sources = unit_sources(unit, folder)
        for space in unit.space:
            values = domain_values(space.domain)
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if space.unordered and (len(values) < 3 or not numbers):
                print(visible(f"{path}:{space.span.line}:{space.span.column}: note: `unordered` "
                              f"changes nothing for {space.knob}: "
                              + ("two values are apart either way" if len(values) < 3 else
                                 "values that are not all numbers are choices already")),
                      file=sys.stderr)
            if space.unordered or not space.knob.startswith("define.") or len(values) < 3 \
                    or not numbers:
                continue
            name = space.knob.removeprefix("define.")
            uses = {s: compared_only(s, name) for s in sources}
            if uses and all(uses.values()):
                where = ", ".join(os.path.relpath(s, folder) for s in uses)
                print(visible(f"{path}:{space.span.line}:{space.span.column}: note: {space.knob} "
                              f"is only compared for equality in {where} "
                              f"({sum(uses.values())} use(s)): if its numbers name choices, not "
                              f"amounts, say `unordered` after its values (the search then steps "
                              f"to any value and learns each apart)"), file=sys.stderr)


def _say_edited(path: str, file: AcfFile) -> None:
    """A warning for each target whose knobs were edited since a retune wrote and measured them: its
    provenance (tuned values, verdict) describes other knobs."""
    for unit in file.units:
        for target in unit.targets:
            if target.edited():
                print(visible(f"{path}:{target.span.line}:{target.span.column}: warning: unit "
                              f"{unit}: target {', '.join(target.archs)}: its knobs are not those "
                              "its provenance measured (edited since the retune wrote them), so "
                              "its tuned values and verdict describe other knobs; retune it to "
                              f"measure these (name the unit: --retune {unit.globs[0]})"),
                      file=sys.stderr)


def _say_unbuilt(path: str, file: AcfFile) -> None:
    """A warning for each target block naming an architecture this nvcc does
    not build (`target sm_999`): a retune skips it, a build never uses it."""
    named = [(u, t, a) for u in file.units for t in u.targets for a in (t.arch, *t.more_archs)]
    if not named:
        return
    try:
        nvcc = find_real_nvcc(os.environ)
    except NvccNotFound:
        return
    version = toolkit_version(Path(nvcc))
    for unit, target, arch in named:
        why = not_built(arch, nvcc, version)
        if why:
            print(visible(f"{path}:{target.span.line}:{target.span.column}: warning: unit {unit}: "
                          f"target {arch}: {why}: a build never uses it, a retune skips it"),
                  file=sys.stderr)


def acf_fmt(paths: list[str], check_only: bool) -> int:
    status = ExitCode.OK
    for path in paths:
        try:
            if check_only:
                text = read_text(path)
                if _formatted(text, path) != text:
                    print(visible(f"{path}: would reformat"))
                    status = max(status, ExitCode.INVALID_INPUT)
                continue
            wait = Wait(cast(float, settings.load(path, os.environ).value("lock.wait").value), log)
            # locked, the file's spelling kept
            if rewrite(path, lambda text: _formatted(text, path), wait):
                print(visible(f"{path}: formatted"))
        except AcfError as error:
            print(error, file=sys.stderr)
            status = max(status, ExitCode.INVALID_INPUT)
        except (NotWritable, TimeoutError) as error:         # (TimeoutError: another's lock held on
                                                             # and on)
            print(visible(f"nvcc-evo: error: {error}"), file=sys.stderr)
            status = max(status, ExitCode.ENVIRONMENT)
        except OSError as error:
            print(visible(f"{path}: error: {error.strerror}"), file=sys.stderr)
            status = max(status, ExitCode.INVALID_INPUT)
    return status


def _formatted(text: str, path: str) -> str:
    """`text` in canonical form, if it parses and checks (AcfError if not)."""
    file = parse_text(text, path)
    check(file, text, with_sources=True)
    return format_file(file)
