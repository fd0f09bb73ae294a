"""The nvcc option table against the real nvcc, and the argv reader."""
from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import toolkits
from nvcc_evo.driver.cmdline.nvcc_options import parse_call, split_list, tokenize
from nvcc_evo.driver.cmdline.nvcc_table import OPTIONS, Takes
from test_cli import nvcc_option_names


def test_spellings_are_unique():
    spellings = [s for long, short, _ in OPTIONS for s in {long, short}]
    assert len(spellings) == len(set(spellings))


@pytest.mark.parametrize("nvcc", toolkits())
def test_every_help_option_is_in_the_table(nvcc):
    table = {s for long, short, _ in OPTIONS for s in (long, short)}
    assert nvcc_option_names(nvcc) - table == set()


def test_table_says_which_options_take_a_value(real_nvcc):
    """nvcc answers "argument expected" exactly for options that take one."""
    def expects_value(option: str) -> bool:
        out = subprocess.run([str(real_nvcc), option], capture_output=True, text=True, cwd="/")
        return "argument expected" in out.stdout + out.stderr

    names = sorted(nvcc_option_names(real_nvcc) & {o[0] for o in OPTIONS})
    with ThreadPoolExecutor(4) as pool:
        answers = dict(zip(names, pool.map(expects_value, names)))
    wrong = [long for long, _, takes in OPTIONS if long in answers
             and answers[long] != (takes in (Takes.VALUE, Takes.LIST))]
    assert wrong == []


def test_optional_values_are_taken_only_when_they_fit():
    assert parse_call(["-Ofc", "max", "-c", "k.cu"], environ={}).last("--Ofast-compile") == "max"
    call = parse_call(["-Ofc", "-c", "k.cu"], environ={})
    assert call.has("--compile") and call.inputs == ("k.cu",)


def test_lists_split_on_commas_except_in_quotes_and_brackets():
    assert split_list("a,b") == ["a", "b"]
    assert split_list("arch=compute_90,code=[sm_90,compute_90]") == ["arch=compute_90", "code=[sm_90,compute_90]"]
    assert split_list('"-O1,-v",x') == ['"-O1,-v"', "x"]


def test_options_file_tokenising():
    assert tokenize('-a "b c"  d\\ e \'f g\'\n-x') == ["-a", "b c", "d e", "'f", "g'", "-x"]
    assert tokenize('"" x') == ["", "x"]


def test_reader_knows_every_spelling():
    call = parse_call(["-arch", "sm_90", "--gpu-code=sm_90", "-DX=1,Y", "-I/inc", "-O3", "-MF", "d.d", "-x", "cu",
                       "k.cpp", "-o", "k.o", "-Xptxas=-v,-O1"], environ={})
    assert call.inputs == ("k.cpp",)
    assert call.last("--gpu-architecture") == "sm_90" and call.values("--gpu-code") == ["sm_90"]
    assert call.values("--define-macro") == ["X=1", "Y"] and call.values("--include-path") == ["/inc"]
    assert call.last("--optimize") == "3" and call.last("--dependency-output") == "d.d"
    assert call.values("--ptxas-options") == ["-v", "-O1"] and call.unknown == ()


def test_reader_reads_options_files_and_the_environment(tmp_path):
    (tmp_path / "o.txt").write_text('-Xptxas "-maxrregcount=32" extra.cu\n')
    call = parse_call(["-c", "--options-file", str(tmp_path / "o.txt"), "k.cu"],
                      environ={"NVCC_APPEND_FLAGS": "-DZ=1", "NVCC_PREPEND_FLAGS": "-lineinfo"})
    assert call.values("--ptxas-options") == ["-maxrregcount=32"]
    assert call.values("--define-macro") == ["Z=1"] and call.has("--generate-line-info")
    assert set(call.inputs) == {"k.cu", "extra.cu"}
    assert call.argv == ("-c", "--options-file", str(tmp_path / "o.txt"), "k.cu")


def test_reader_reports_what_it_does_not_understand(tmp_path):
    call = parse_call(["--brand-new-flag", "-c", "k.cu", "--options-file", str(tmp_path / "none")], environ={})
    assert call.unknown == ("--brand-new-flag",)
    assert call.problems and "cannot read options file" in call.problems[0]
