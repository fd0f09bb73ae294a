"""Inputs found by probing the tool as an attacker would: each used to
corrupt an ACF, hang, end in a traceback, or drop tuning without a word."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import EVO, evo_env, run_evo

KERNEL = 'extern "C" __global__ void k(float* y, const float* x) { y[threadIdx.x] = 2.0f * x[threadIdx.x]; }\n'
CAPPED = 'acf 1\nunit "k.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 24\n    }\n}\n'


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "k.cu").write_text(KERNEL)
    return tmp_path


def build(project: Path, cache: Path, **env):
    return subprocess.run([str(EVO), "-arch=sm_90", "-c", "k.cu", "-o", "k.o"], cwd=project,
                          env=evo_env(cache, **env), capture_output=True, text=True, timeout=120)


def test_formatting_keeps_non_ascii_words_quoted(project):
    """str.isidentifier() takes 'é', the grammar's names do not: --acf-fmt wrote `driver = é`."""
    acf = project / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "k.cu" {\n    bench {\n        kernel "ék"\n        grid (1)\n        block (32)\n'
                   '    }\n    target sm_90 {\n        ptxas.maxrregcount = 40\n        provenance {\n'
                   '            driver = "é"\n        }\n    }\n}\n')
    assert run_evo("--acf-fmt", str(acf)).returncode == 0
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 0, checked.stderr
    assert 'driver = "é"' in acf.read_text() and 'kernel "ék"' in acf.read_text()


def test_a_compile_database_that_cannot_be_written_keeps_the_tuned_flags(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(CAPPED)
    (project / ".nvcc-evo").mkdir()
    (project / ".nvcc-evo" / "compile-db").write_text("")          # a file where the folder goes
    done = build(project, evo_cache, NVCC_EVO_VERBOSE=1)
    assert done.returncode == 0, done.stderr
    assert "nvcc-evo: added: -Xptxas -maxrregcount=24" in done.stderr   # was: built untuned, without a word
    assert "nvcc-evo: warning: cannot record this compile for --retune" in done.stderr


def test_an_acf_that_is_a_fifo_does_not_hang(project, evo_cache):
    fifo = project / "pipe.acf"
    os.mkfifo(fifo)
    built = build(project, evo_cache, NVCC_EVO_ACF=fifo)           # was: hung forever
    assert built.returncode == 0 and "not a regular file" in built.stderr
    checked = subprocess.run([*map(str, [EVO]), "--acf-check", str(fifo)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1 and "not a regular file" in checked.stderr


def test_an_expression_nested_too_deeply_is_a_located_error(project, evo_cache):
    acf = project / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "k.cu" {\n    bench {\n        kernel k\n        grid (' + "-" * 1000 + '1)\n'
                   '        block (' + "+".join(["1"] * 150) + ')\n    }\n}\n')
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 1 and "Traceback" not in checked.stderr         # was: RecursionError
    assert f"{acf}:5:1: error: an expression is nested too deeply" in checked.stderr
    acf.write_text(acf.read_text().replace("-" * 1000 + "1", "1"))
    checked = run_evo("--acf-check", str(acf))
    assert f"{acf}:6:16: error: an expression is nested too deeply (150 levels; the limit is 100)" in checked.stderr
    built = build(project, evo_cache)
    assert built.returncode == 0 and "the ACF has errors; building without tuned flags" in built.stderr


@pytest.mark.parametrize("field, value", [("time", "notanumber"), ("argv", None), ("env", {"PATH": 5})])
def test_a_compile_database_record_of_the_wrong_shape_is_named(project, evo_cache, field, value):
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n    search {\n        ptxas.opt_level in {1, 3}\n'
                                          '    }\n}\n')
    assert build(project, evo_cache).returncode == 0
    (record,) = (project / ".nvcc-evo" / "compile-db").glob("*.json")
    data = json.loads(record.read_text())
    data[field] = value
    record.write_text(json.dumps(data))
    done = run_evo("--retune", "--backend", "static", "--evaluations", "2", cwd=project, env=evo_env(evo_cache))
    assert "Traceback" not in done.stderr and done.returncode == 1               # was: a TypeError traceback
    assert f"compile database {record}: unreadable (TypeError: field '{field}' holds" in done.stderr


def test_a_lone_carriage_return_is_a_located_error(project):
    """`# note<CR>pin ...` is a comment to the parser but a pin line in an editor."""
    acf = project / "nvcc-evo.acf"
    acf.write_bytes(b'acf 1\nunit "k.cu" {  # note\rpin define.TILE = 99\n}\n')
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 1
    assert f"{acf}:2:22: error: a carriage return (CR) alone" in checked.stderr


# ---------------------------------------------------------------- limits before cost
MEMORY = r"""
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measured(argv: list[str], cwd: Path, env: dict) -> tuple[int, int, str]:
    """(exit status, the largest process's peak memory in KB, stderr) of a command."""
    done = subprocess.run([os.sys.executable, "-c", MEMORY, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    status, peak = done.stdout.split()
    return int(status), int(peak), done.stderr


def test_a_10_mb_string_is_a_located_error_found_before_the_parse(project, evo_cache):
    """It cost 3.4 GB in --acf-check and in every first build, and a 10 MB glob was echoed whole."""
    huge = "x" * 10_000_000
    acf = project / "nvcc-evo.acf"
    acf.write_text(f'acf 1\nunit "k.cu" {{\n    pin ptxas.opt_level = 2\n}}\nunit "{huge}" {{ }}\n')
    said = f"{acf}:5:6: error: a string of 10000002 characters (the limit is 8192)"
    status, peak, stderr = measured([str(EVO), "--acf-check", str(acf)], project, evo_env(evo_cache))
    assert status == 1 and stderr.startswith(said) and len(stderr) < 1000, stderr[:1000]
    status, peak, stderr = measured([str(EVO), "-arch=sm_90", "-c", "k.cu", "-o", "k.o"], project, evo_env(evo_cache))
    assert status == 0 and (project / "k.o").is_file(), stderr[:1000]
    assert "building without tuned flags" in stderr and said.replace(": error", "") in stderr and len(stderr) < 1000
    assert peak < 200 * 1024, f"a first build took {peak // 1024} MB"        # (nvcc's own processes: 190 MB)


@pytest.mark.parametrize("line, said", [
    ("# " + "c" * 9000, "3:1: error: a comment of 9002 characters (the limit is 8192)"),
    ("unit " + "u" * 20000, "3:16385: error: a line of 20005 characters (the limit is 16384)"),
    ('unit "' + 'a\\"' * 4000 + '" { }', "3:6: error: a string of 12002 characters (the limit is 8192)"),
])
def test_a_comment_or_line_over_its_limit_is_a_located_error(project, line, said):
    acf = project / "nvcc-evo.acf"
    acf.write_text(f'acf 1\nunit "k.cu" {{ }}\n{line}\n')
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 1 and checked.stderr.startswith(f"{acf}:{said}\n"), checked.stderr[:500]
    assert len(checked.stderr) < 1000 and "Traceback" not in checked.stderr


# ---------------------------------------------------------------- hidden characters
def test_hidden_characters_are_warnings_in_strings_and_comments_and_every_message_escapes_them(project, evo_cache):
    """Bidi overrides, zero-width spaces and terminal escapes passed --acf-check silently, and its messages
    printed them raw: a unit glob set the terminal's title and hid the text after it."""
    acf = project / "nvcc-evo.acf"
    acf.write_text('acf 1\n# reviewed\u202e \u2066ok\u2069\nunit "k.cu" { }\nunit "gone\x1b]0;owned\x07.cu\u200b" { }\n')
    checked = run_evo("--acf-check", str(acf), cwd=project, env=evo_env(evo_cache))
    assert checked.returncode == 0, checked.stderr
    said = checked.stderr
    assert not set(said) & {"\u202e", "\u2066", "\u2069", "\x1b", "\x07", "\u200b"}, said
    assert (f"{acf}:2:11: warning: a hidden character U+202E (RIGHT-TO-LEFT OVERRIDE) in a comment: a terminal "
            "shows it otherwise than the file reads\n# reviewed\\u202e \\u2066ok\\u2069\n          ^\n") in said
    assert f"{acf}:4:11: warning: a hidden character U+001B (a control character) in a string" in said
    assert 'warning: unit "gone\\u001b]0;owned\\u0007.cu\\u200b" matches no file' in said
    built = build(project, evo_cache)
    assert built.returncode == 0 and built.stderr == "", built.stderr     # a build says nothing of them


def test_a_hidden_character_outside_strings_and_comments_is_an_error_said_escaped(project, evo_cache):
    acf = project / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "k.cu" {\n    pin nvcc.ftz = false\u202e\n}\n')
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 1 and checked.stderr == (
        f"{acf}:3:25: error: a hidden character U+202E (RIGHT-TO-LEFT OVERRIDE) outside strings and comments\n"
        "    pin nvcc.ftz = false\\u202e\n                        ^\n")
    built = build(project, evo_cache)
    assert built.returncode == 0 and "\u202e" not in built.stderr and "U+202E" in built.stderr, built.stderr
