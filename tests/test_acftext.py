"""Reading an ACF's bytes: UTF-8 with or without a BOM, CRLF remembered,
other bytes a located error (issue: unreadable input gave a traceback)."""
from __future__ import annotations

from conftest import run_evo

from nvcc_evo.acf.text import decode

import pytest
from nvcc_evo.errors import AcfError


def test_bom_and_crlf_are_read_and_remembered():
    read = decode(b'\xef\xbb\xbfacf 1\r\nunit "a.cu" {}\r\n', "x.acf")
    assert read.text == 'acf 1\nunit "a.cu" {}\n'
    assert read.bom and read.newline == "\r\n"
    assert read.encode(read.text) == b'\xef\xbb\xbfacf 1\r\nunit "a.cu" {}\r\n'


def test_bytes_that_are_not_utf8_are_located():
    with pytest.raises(AcfError) as caught:
        decode(b'acf 1\nunit "a.cu" {  # caf\xe9\n}\n', "x.acf")
    assert str(caught.value).startswith("x.acf:2:21: error: the file is not UTF-8 text: byte(s) 0xe9")


@pytest.mark.parametrize("verb", ["--acf-check", "--acf-fmt"])
def test_cli_reports_bad_bytes_without_a_traceback(tmp_path, verb):
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_bytes(b'acf 1\nunit "a.cu" {\n    pin define.X = 1  # \xff\xfe\n}\n')
    done = run_evo(verb, str(acf))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"{acf}:3:25: error: the file is not UTF-8 text" in done.stderr


def test_a_bom_is_accepted_by_the_check(tmp_path):
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_bytes(b'\xef\xbb\xbfacf 1\nunit "a.cu" {\n    pin define.X = 1\n}\n')
    done = run_evo("--acf-check", str(acf))
    assert done.returncode == 0, done.stderr
