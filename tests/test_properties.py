"""Property tests: text drawn from the grammar itself.

Parsing and checking raise nothing but AcfError, and formatting is a fixed
point on whatever parses.
"""
from __future__ import annotations

import lark
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra.lark import from_lark

from conftest import DATA
from nvcc_evo.errors import AcfError
from nvcc_evo.format import format_text
from nvcc_evo.parse import _grammar_text, parse_text
from nvcc_evo.resolve import check

GRAMMAR = lark.Lark(_grammar_text(), parser="lalr")
SPACED = {"WS": st.sampled_from([" ", "\n", "  "]), "COMMENT": st.just("# c\n")}
SAMPLES = [p.read_text() for p in sorted((DATA / "acf").glob("*/*.acf"))]


def _parse_check_format(text: str) -> None:
    try:
        file = parse_text(text, "gen.acf")
        check(file, text)
    except AcfError:
        return
    once = format_text(text)
    assert format_text(once) == once


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_lark(GRAMMAR, start="start"))
def test_generated_text_parses_or_fails_cleanly(text):
    try:
        parse_text(text, "gen.acf")
    except AcfError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_lark(GRAMMAR, start="start"))
def test_format_is_a_fixed_point_on_generated_text(text):
    try:
        parse_text(text, "gen.acf")
    except AcfError:
        return
    once = format_text(text)
    assert format_text(once) == once


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SAMPLES), st.integers(0, 10**6), st.integers(1, 4),
       st.sampled_from(["", "{", "}", "=", '"', "#", "..", "1", "x.y", "\n"]))
def test_edits_of_real_files_fail_cleanly(sample, where, length, insert):
    at = where % (len(sample) + 1)
    _parse_check_format(sample[:at] + insert + sample[at + length:])
