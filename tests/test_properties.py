"""Property tests: text drawn from the grammar itself.

Parsing and checking raise nothing but AcfError, and formatting is a fixed
point on whatever parses.
"""
from __future__ import annotations

import lark
from hypothesis import HealthCheck, example, given, settings, strategies as st
from hypothesis.extra.lark import from_lark

from conftest import DATA
from nvcc_evo.acf.edit.format import format_text
from nvcc_evo.acf.parse import _grammar_text, parse_text
from nvcc_evo.acf.resolve import check
from nvcc_evo.errors import AcfError

GRAMMAR = lark.Lark(_grammar_text(), parser="lalr")
SPACED = {"WS": st.sampled_from([" ", "\n", "  "]), "COMMENT": st.just("# c\n")}
SAMPLES = [p.read_text() for p in sorted((DATA / "acf").glob("*/*.acf"))]


def _parse_check_format(text: str) -> None:
    """Only AcfError may come out; whatever parses formats to a fixed point."""
    try:
        file = parse_text(text, "gen.acf")
    except AcfError:
        return
    try:
        check(file, text)
    except AcfError:
        pass
    once = format_text(text)
    assert format_text(once) == once


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_lark(GRAMMAR, start="start"))
@example('acf0unit""{pinA.A=-1E400}')          # found by hypothesis: an infinity the formatter wrote as "-inf"
def test_generated_text_fails_cleanly_or_formats_to_a_fixed_point(text):
    _parse_check_format(text)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SAMPLES), st.integers(0, 10**6), st.integers(1, 4),
       st.sampled_from(["", "{", "}", "=", '"', "#", "..", "1", "x.y", "\n"]))
def test_edits_of_real_files_fail_cleanly(sample, where, length, insert):
    at = where % (len(sample) + 1)
    _parse_check_format(sample[:at] + insert + sample[at + length:])
