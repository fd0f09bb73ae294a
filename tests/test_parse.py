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
    assert file.units[1].bench.metric.regex == "time: ([0-9.]+) ms"


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


@pytest.mark.parametrize("written, read", [
    (r'"a \| b"', r"a \| b"),                 # a backslash before anything else stays (regexes read as written)
    (r'"\d+\.\d+"', r"\d+\.\d+"),
    (r'"say \"hi\""', 'say "hi"'),            # \" is a quote
    (r'"C:\\dir"', "C:\\dir"),                # \\ is one backslash
    (r'"\\|"', r"\|"),                        # the old spelling of an escaped bar still means it
    (r'"end\\"', "end\\"),
])
def test_string_escapes_are_only_quote_and_backslash(written, read):
    file = parse_text(f'acf 1\nunit "a.cu" {{ bench {{ command "x" metric {written} }} }}\n')
    assert file.units[0].bench.metric.regex == read


@pytest.mark.parametrize("text", [r"a \| b", "\\", 'q"', '\\"', "\\\\d", "x\\", r"\\\"", "plain"])
def test_formatted_strings_read_back_the_same(text):
    from nvcc_evo.acf.edit.spelling import show_string
    file = parse_text(f'acf 1\nunit "a.cu" {{ bench {{ command {show_string(text)} metric "x" }} }}\n')
    assert file.units[0].bench.command.text == text


def test_a_metric_regex_reads_output_as_written():
    from nvcc_evo.acf.bench.command import read_metric
    output = "block_size   32 | time 2.2920 ms\nblock_size  512 | time 3.1315 ms\nblock_size 1024 | time 1.4047 ms\n"
    file = parse_text('acf 1\nunit "a.cu" { bench { command "x"\n'
                      '    metric "block_size +512 \\| time ([0-9.]+) ms"\n'
                      '    metric fastest "time ([0-9.]+) ms" take min\n'
                      '    metric slowest "time (?P<ms>[0-9.]+) ms" take max group ms\n'
                      '    metric last "time ([0-9.]+)" take last\n'
                      '    metric mean "time ([0-9.]+)" take mean\n'
                      '    metric size "block_size +([0-9]+) \\| time 1\\.40" } }\n')
    found = {m.name: read_metric(m, output) for m in file.units[0].bench.metrics}
    assert found == {"metric": 3.1315, "fastest": 1.4047, "slowest": 3.1315, "last": 1.4047,
                     "mean": (2.2920 + 3.1315 + 1.4047) / 3, "size": 1024.0}
    assert "not in the output" in read_metric(file.units[0].bench.metrics[0], "nothing here")
