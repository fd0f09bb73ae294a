"""Golden files: tests/data/acf/ok/*.acf format to *.fmt; err/*.acf give *.err.

A new case is a new pair of files.
"""
from __future__ import annotations

import pytest

from conftest import DATA
from nvcc_evo.acf.edit.format import format_text
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.resolve import check
from nvcc_evo.errors import AcfError
from nvcc_evo.system.say import visible

OK = sorted((DATA / "acf" / "ok").glob("*.acf"))
ERR = sorted((DATA / "acf" / "err").glob("*.acf"))


@pytest.mark.parametrize("path", OK, ids=lambda p: p.name)
def test_good_file_checks_and_formats_to_golden(path):
    text = path.read_text()
    check(parse_text(text, path.name), text)
    formatted = format_text(text, path.name)
    assert formatted == path.with_suffix(".fmt").read_text()
    assert format_text(formatted) == formatted


@pytest.mark.parametrize("path", ERR, ids=lambda p: p.name)
def test_bad_file_gives_exact_diagnostics(path):
    text = path.read_text()
    with pytest.raises(AcfError) as caught:
        check(parse_text(text, path.name), text)
    assert str(caught.value) + "\n" == path.with_suffix(".err").read_text()


def test_golden_folders_are_not_empty():
    assert len(OK) >= 3 and len(ERR) >= 10


@pytest.mark.parametrize("path", ERR, ids=lambda p: p.name)
def test_every_diagnostic_is_located_with_a_caret(path):
    text = path.read_text()
    with pytest.raises(AcfError) as caught:
        check(parse_text(text, path.name), text)
    for diagnostic in caught.value.diagnostics:
        head, source, caret = str(diagnostic).split("\n")
        assert head.startswith(f"{path.name}:{diagnostic.location.line}:{diagnostic.location.column}: error: ")
        line = text.splitlines()[diagnostic.location.line - 1]
        assert source == visible(line)                        # hidden characters shown escaped (\u202e)
        before = visible(line[:diagnostic.location.column - 1])   # a tab stays a tab: the caret lines up as shown
        assert caret == "".join("\t" if c == "\t" else " " for c in before).ljust(len(before)) + "^"
