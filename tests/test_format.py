"""Formatter details and the target-update API that retune relies on."""
from __future__ import annotations

import os
import threading

import pytest

from nvcc_evo.acf import model
from nvcc_evo.acf.edit.format import format_text
from nvcc_evo.acf.edit.retarget import update_target
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.edit.write import write_atomic
from nvcc_evo.errors import AcfChanged

HAND_EDITED = '''acf 1
# project notes stay
unit "a.cu" {   # odd  spacing stays too
    pin nvcc.ftz = false # why
    search { ptxas.maxrregcount in 32..128 step 32 }
    target sm_90 {
        # chosen by hand, keep this note
        ptxas.maxrregcount = 64   # 64 is enough
        ptxas.opt_level = 2
        provenance { toolkit = "12.9" }
    }
}
unit "b.cu" { pin nvcc.fmad = true }
'''

NEW = model.Target("sm_90", None,
                 (model.Setting("ptxas.maxrregcount", 96), model.Setting("ptxas.dlcm", "cg")),
                 (model.Record("toolkit", "13.0.88"), model.Record("baseline.runtime", 12.5, 0.25)))


A, B = ("a.cu",), ("b.cu",)


def test_update_replaces_only_the_target_block():
    updated = update_target(HAND_EDITED, A, NEW)
    old_target = parse_text(HAND_EDITED).units[0].targets[0].span
    assert updated[:old_target.start] == HAND_EDITED[:old_target.start]
    tail = HAND_EDITED[old_target.end:]
    assert updated.endswith(tail)
    block = updated[old_target.start:len(updated) - len(tail)]
    assert block == '''target sm_90 {
        # chosen by hand, keep this note
        ptxas.maxrregcount = 96   # 64 is enough
        ptxas.dlcm = cg
        provenance {
            toolkit = "13.0.88"
            baseline.runtime = 12.5 +- 0.25
        }
    }'''
    assert parse_text(updated).units[0].targets[0] == NEW


def test_update_adds_a_new_target_before_the_closing_brace():
    new = model.Target("sm_100", "NVIDIA B200", (model.Setting("ptxas.opt_level", 1),))
    updated = update_target(HAND_EDITED, A, new)
    assert updated.startswith(HAND_EDITED[:HAND_EDITED.index("}\nunit \"b.cu\"")])
    assert '    target sm_100 "NVIDIA B200" {\n        ptxas.opt_level = 1\n    }\n}\nunit "b.cu"' in updated
    file = parse_text(updated)
    assert file.units[0].targets[1] == new and len(file.units[0].targets) == 2


def test_update_in_a_one_line_unit():
    updated = update_target(HAND_EDITED, B, NEW)
    assert parse_text(updated).units[1].targets == (NEW,)
    assert updated.startswith(HAND_EDITED[:HAND_EDITED.index('unit "b.cu"')])


def test_update_finds_the_unit_by_its_globs_not_its_position():
    """A unit inserted above (an editor, a git pull) between the read and the write takes nothing."""
    inserted = HAND_EDITED.replace('unit "a.cu"', 'unit "new.cu" { pin nvcc.fmad = false }\nunit "a.cu"', 1)
    updated = parse_text(update_target(inserted, B, NEW))
    assert [u.globs for u in updated.units] == [("new.cu",), ("a.cu",), ("b.cu",)]
    assert updated.units[0].targets == () and updated.units[2].targets == (NEW,)
    assert updated.units[1].targets == parse_text(HAND_EDITED).units[0].targets
    assert parse_text(update_target('acf 1\nunit "y.cu" "x.cu" { }\n', ("x.cu", "y.cu"), NEW)).units[0].targets == (NEW,)


@pytest.mark.parametrize("text, message", [
    (HAND_EDITED.replace('unit "b.cu"', 'unit "b*.cu"'), 'no unit "b.cu" in <acf> any more (removed, or its globs changed)'),
    (HAND_EDITED + 'unit "b.cu" { }\n', '2 units "b.cu" in <acf> (lines 13, 14): which one is meant is unclear'),
])
def test_a_unit_that_is_gone_or_ambiguous_gets_nothing(text, message):
    with pytest.raises(AcfChanged) as caught:
        update_target(text, B, NEW)
    assert str(caught.value) == message


def test_update_is_idempotent():
    once = update_target(HAND_EDITED, A, NEW)
    assert update_target(once, A, NEW) == once


def test_floats_read_as_written_and_aligned_comments_stay_aligned():
    text = ('acf 1\n# about this file\n\nunit "a" {  # the unit\n    bench {\n        check y rtol 1e-5 atol 0.00001\n'
            '        check z rtol 0.001    # loose\n        check w rtol 2.5e-12  # tight\n        let X = 1e300\n'
            '        let Y = 0.25\n    }\n}\n')
    out = format_text(text)
    assert out.startswith("acf 1\n# about this file\n\nunit")         # the file's comment stays the file's
    assert "check y rtol 1e-5 atol 1e-5\n" in out and "let X = 1e300\n" in out and "let Y = 0.25\n" in out
    assert "        check z rtol 0.001    # loose\n        check w rtol 2.5e-12  # tight\n" in out
    assert format_text(out) == out


def test_expressions_keep_their_meaning_with_fewest_parentheses():
    text = 'acf 1\nunit "a" { bench { let A = (1 + 2) * 3 let B = 1 - (2 - 3) let C = (1 - 2) - 3 let D = -(A + 1) } }'
    out = format_text(text)
    assert "let A = (1 + 2) * 3" in out and "let B = 1 - (2 - 3)" in out
    assert "let C = 1 - 2 - 3" in out and "let D = -(A + 1)" in out
    assert format_text('acf 1\nunit "a" { bench { let E = (8 / 2) * (4 / 2) } }').count("let E = (8 / 2) * (4 / 2)") == 1


def test_strings_that_need_quotes_keep_them():
    out = format_text('acf 1\nunit "a" { pin define.X = "two words" pin define.Y = "unit" pin define.Z = ok }')
    assert 'define.X = "two words"' in out and 'define.Y = "unit"' in out and "define.Z = ok" in out


def test_every_backend_is_written_bare_in_a_provenance():
    """`backend = "command"` was quoted (a keyword elsewhere) where `backend = static` was not."""
    records = tuple(model.Record("backend", b) for b in ("static", "pycuda", "command", "replay"))
    text = update_target('acf 1\nunit "a.cu" {\n}\n', ("a.cu",), model.Target("sm_90", None, (), records))
    assert [line.strip() for line in text.splitlines() if "backend" in line] == \
        ["backend = static", "backend = pycuda", "backend = command", "backend = replay"]
    assert [r.value for r in parse_text(text).units[0].targets[0].provenance] == ["static", "pycuda", "command", "replay"]
    flagged = update_target('acf 1\nunit "a.cu" {\n}\n', ("a.cu",),
                            model.Target("sm_90", None, (), (model.Record("verdict", "true"),)))
    assert 'verdict = "true"' in flagged          # a string, not the boolean


def test_write_atomic_replaces_whole_file_and_keeps_mode(tmp_path):
    path = tmp_path / "p.acf"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert (path.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["p.acf"]


def test_readers_never_see_a_partial_file(tmp_path):
    path = tmp_path / "p.acf"
    texts = [("a" * 99 + "\n") * 2000, ("b" * 99 + "\n") * 3000]        # (lines within the ACF's limit)
    write_atomic(path, texts[0])
    seen, stop = set(), threading.Event()

    def read():
        while not stop.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(40):
        write_atomic(path, texts[i % 2])
    stop.set()
    reader.join()
    assert seen <= set(texts)


def test_failed_write_leaves_old_file(tmp_path, monkeypatch):
    path = tmp_path / "p.acf"
    path.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.acf"]


def test_unordered_is_read_kept_and_written_where_it_was_said():
    text = ('acf 1\nunit "a.cu" {\n    search {\n        define.ALGO in {0, 1, 2}   unordered\n'
            '        define.MODE in 0..6 step 2 unordered\n        define.BM in 1..4\n    }\n}\n')
    (unit,) = parse_text(text, "nvcc-evo.acf").units
    assert [s.unordered for s in unit.space] == [True, True, False]
    formatted = format_text(text)
    assert "define.ALGO in {0, 1, 2} unordered\n" in formatted
    assert "define.MODE in 0..6 step 2 unordered\n" in formatted and "define.BM in 1..4\n" in formatted
    assert [s.unordered for s in parse_text(formatted, "nvcc-evo.acf").units[0].space] == [True, True, False]
