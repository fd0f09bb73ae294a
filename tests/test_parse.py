"""The grammar and the parser: strict LALR, values, friendly syntax errors."""
from __future__ import annotations

import lark
import pytest

from conftest import DATA
from nvcc_evo.acf import model
from nvcc_evo.acf.parse import build_parser, parse_text
from nvcc_evo.acf.syntax import SYNTAX_EXAMPLES
from nvcc_evo.errors import AcfError


def test_grammar_builds_strict_without_collisions():
    parser = build_parser(strict=True)
    assert parser.options.parser == "lalr"


@pytest.mark.parametrize("label,example", [(label, ex) for label, exs in SYNTAX_EXAMPLES.items() for ex in exs])
def test_every_example_mistake_gets_its_label(label, example):
    with pytest.raises(AcfError) as caught:
        parse_text(example, "ex.acf")
    assert caught.value.diagnostics[0].message.startswith(label + " (")


def test_label_applies_in_a_later_unit_too():
    text = 'acf 1\nunit "a.cu" {\n}\nunit "b.cu" {\n    pin nvcc.ftz true\n}\n'
    with pytest.raises(AcfError) as caught:
        parse_text(text, "x.acf")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.location.line, diagnostic.location.column) == (5, 18)
    assert diagnostic.message.startswith("missing '=' between knob and value")


def test_unlabelled_error_lists_what_was_expected():
    with pytest.raises(AcfError) as caught:
        parse_text('acf 1\nunit "a.cu" { bench { let N = 1 << 2 } }', "x.acf")
    message = caught.value.diagnostics[0].message
    assert message.startswith("unexpected '<'; expected ")
    assert "'+'" in message and "'}'" in message


def test_all_syntax_errors_of_a_file_in_one_run():
    text = ('acf 1\nunit "a.cu" {\n    pin nvcc.ftz true\n    pin nvcc.fmad = false\n'
            '    target sm_90 {\n        ptxas.opt_level 2\n    }\n}\n')
    with pytest.raises(AcfError) as caught:
        parse_text(text, "x.acf")
    assert [d.location.line for d in caught.value.diagnostics] == [3, 6]


def test_values_are_typed():
    file = parse_text((DATA / "acf" / "ok" / "full.acf").read_text(), "full.acf")
    unit = file.units[0]
    assert unit.pins == (model.Setting("nvcc.use_fast_math", False),)
    assert unit.space[1] == model.Space("ptxas.maxrregcount", model.RangeDomain(32, 255, 8))
    assert unit.space[3].domain == model.SetDomain(("ca", "cg"))
    assert unit.tune.minimize == ("runtime", "energy")
    assert unit.tune.select_where == (model.Condition("energy", "<=", 1.05, True),)
    target = unit.targets[0]
    assert (target.arch, target.gpu) == ("sm_90", "NVIDIA H200")
    assert target.record("baseline.runtime") == model.Record("baseline.runtime", 812.5, 3.1)
    assert file.units[1].globs == ("apps/*.cu", "apps/extra/solver.cu")
    assert file.units[1].bench.metric.text == "time: ([0-9.]+) ms"


def test_positions_point_at_statements():
    file = parse_text('acf 1\nunit "a.cu" {\n    pin nvcc.ftz = true\n}\n')
    span = file.units[0].pins[0].span
    assert (span.line, span.column) == (3, 5)


def test_strings_keep_escapes_and_hashes():
    file = parse_text('acf 1\nunit "a.cu" { pin define.S = "say \\"hi\\" # no comment" }  # yes\n')
    assert file.units[0].pins[0].value == 'say "hi" # no comment'
    assert [c.text for c in file.comments] == ["# yes"]


def test_missing_brace_points_at_the_open_block():
    with pytest.raises(AcfError) as caught:
        parse_text('acf 1\nunit "a.cu" {\n    target sm_90 {\n    }\n', "x.acf")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.location.line, diagnostic.location.column) == (2, 13)
    assert "never closed" in diagnostic.message


def test_raw_lark_errors_never_escape():
    for text in ["", "acf", "acf 1 unit", "\x00", 'acf 1\nunit "a" { bench { arg x : f32[ } }', "acf 1\n}" * 50]:
        try:
            parse_text(text)
        except AcfError:
            pass
        except lark.LarkError as error:  # pragma: no cover - the failure we test for
            pytest.fail(f"raw lark error for {text!r}: {error}")
