"""nvcc-evo-ptxas's cost per call, with the toolkit's ptxas (no Triton
needed): a Triton run makes hundreds of ptxas calls, most for kernels no unit
names, so such a call reads the ACF's cached index and the PTX and execs the
real ptxas, loading neither the decision nor the typed model (issue 28); an
ACF with errors is parsed once, its diagnostics kept as the index is, and
each call still says so in one line."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, evo_env

PTXAS = Path(sys.executable).parent / "nvcc-evo-ptxas"
OTHER = 'acf 1\nunit kernel "not_this_one*" {\n    target sm_90a {\n        ptxas.opt_level = 1\n    }\n}\n'
ARGV = ["--gpu-name=sm_90a", "k.ptx", "-o", "k.cubin"]


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", str(DATA / "cuda" / "regs.cu"), "-o", "k.ptx"], cwd=folder,
                   check=True)
    subprocess.run(["ptxas", *ARGV[:-1], "plain.cubin"], cwd=folder, check=True)
    return folder


def _imports(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def compile_ptx(project: Path, evo_cache: Path, **extra) -> tuple[subprocess.CompletedProcess, set[str]]:
    """One call through nvcc-evo-ptxas: what it did, and the modules it imported
    beyond the interpreter's own start (an editable install's import finder
    loads pathlib there, before any code of ours; a wheel's install has none)."""
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"), PYTHONPROFILEIMPORTTIME="1", **extra)
    done = subprocess.run([str(PTXAS), *ARGV], cwd=project, env=env, capture_output=True, text=True)
    start = subprocess.run([sys.executable, "-c", "pass"], cwd=project, env=env, capture_output=True, text=True)
    said = "".join(line + "\n" for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, said), \
        _imports(done.stderr) - _imports(start.stderr)


def test_an_acf_naming_other_kernels_costs_reading_two_files(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(OTHER)
    first, _ = compile_ptx(project, evo_cache)                   # checks the ACF, caches its index
    assert (first.returncode, first.stderr) == (0, "")
    done, imported = compile_ptx(project, evo_cache)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (project / "k.cubin").read_bytes() == (project / "plain.cubin").read_bytes()
    heavy = {"typing", "pathlib", "lark", "nvcc_evo.driver.dropin_ptxas.decide", "nvcc_evo.acf.knobs",
             "nvcc_evo.driver.toolkit", "nvcc_evo.driver.match.units", "subprocess", "_hashlib"}
    assert not heavy & imported, sorted(heavy & imported)
    tuned, imported = compile_ptx(project, evo_cache, NVCC_EVO_ACF=_write(project, OTHER.replace("not_this_one*",
                                                                                                  "*")))
    assert tuned.returncode == 0 and "nvcc_evo.driver.dropin_ptxas.decide" in imported, tuned.stderr
    not_a_ptxas_calls = {"nvcc_evo.driver.cmdline.nvcc_table", "nvcc_evo.driver.toolkit"}     # nvcc's options, probe
    assert not not_a_ptxas_calls & imported, sorted(not_a_ptxas_calls & imported)


def _write(project: Path, text: str) -> Path:
    path = project / "tuned.acf"
    path.write_text(text)
    return path


BROKEN = 'acf 1\nunit kernel "*" {\n    target sm_90a {\n        ptxas.opt_levle = 1\n    }\n}\n'


def test_an_acf_with_errors_is_parsed_once_and_said_on_every_call(project, evo_cache, tmp_path):
    acf = project / "nvcc-evo.acf"
    acf.write_text(BROKEN)
    said = ("nvcc-evo-ptxas: warning: the ACF has errors; compiling without tuned flags: "
            f"{acf}:4:9: unknown knob 'ptxas.opt_levle'")
    for call in range(2):
        done, imported = compile_ptx(project, evo_cache)
        assert done.returncode == 0 and done.stderr.startswith(said) and done.stderr.count("\n") == 1, done.stderr
        assert (project / "k.cubin").read_bytes() == (project / "plain.cubin").read_bytes()
    assert not {"lark", "nvcc_evo.acf.parse", "nvcc_evo.acf.resolve"} & imported       # the second call: cached
    log = tmp_path / "log.jsonl"
    acf.write_text(BROKEN.replace("levle", "level"))                   # fixed: a new text, checked again
    done, _ = compile_ptx(project, evo_cache, NVCC_EVO_LOG=log)
    assert done.returncode == 0 and done.stderr == "" and '"added": ["-Xptxas", "-O1"]' in log.read_text()


def test_a_cached_verdict_follows_the_files_the_check_looked_at(project, evo_cache, tmp_path):
    """'not found next to the ACF' depends on the folder, not only the text:
    a controls file put there later is seen on the next call."""
    acf = project / "nvcc-evo.acf"
    acf.write_text(BROKEN.replace("ptxas.opt_levle = 1", 'ptxas.controls = "k.ctl"'))
    done, _ = compile_ptx(project, evo_cache)
    assert "ptxas.controls file 'k.ctl' not found next to the ACF" in done.stderr, done.stderr
    (project / "k.ctl").write_text("not a controls file\n")
    log = tmp_path / "log.jsonl"
    done, _ = compile_ptx(project, evo_cache, NVCC_EVO_LOG=log)
    assert done.returncode == 0 and "has errors" not in done.stderr, done.stderr
    assert "ptxas.controls" in log.read_text() and "does not apply it" in log.read_text()


def test_a_cache_name_two_texts_share_is_a_miss(project, evo_cache, tmp_path):
    """The index's file is named by a CRC of the ACF's bytes and path, and
    holds both: another text's entry in its place is never taken for its own."""
    from nvcc_evo.driver.match import indexfile
    acf = project / "nvcc-evo.acf"
    acf.write_text(BROKEN)
    compile_ptx(project, evo_cache)                               # the broken text's entry: its errors
    folder = evo_cache / "nvcc-evo"
    broken = indexfile.cache_path(str(folder), acf.read_bytes(), str(acf))
    fixed = BROKEN.replace("levle", "level")
    acf.write_text(fixed)
    shutil.copy(broken, indexfile.cache_path(str(folder), fixed.encode(), str(acf)))    # as if the names met
    log = tmp_path / "log.jsonl"
    done, _ = compile_ptx(project, evo_cache, NVCC_EVO_LOG=log)
    assert done.returncode == 0 and done.stderr == "" and '"added": ["-Xptxas", "-O1"]' in log.read_text()


CAPPED = ('acf 1\nunit kernel "mix" {\n    pin ptxas.override_directive_values = true\n'
          '    target sm_90a {\n        ptxas.maxrregcount = 32\n    }\n}\n')


@pytest.mark.parametrize("option, registers, skipped", [
    (["-regUsageLevel", "5"], 32, []),
    (["--maxrregcount", "40"], 40, ["ptxas.maxrregcount: the user sets it (--maxrregcount=40); the user wins"]),
])
def test_an_option_s_value_in_the_next_word_is_no_input(project, evo_cache, option, registers, skipped):
    """`nvcc-evo-ptxas --gpu-name=sm_90a --maxrregcount 40 k.ptx -o k.cubin` (ptxas takes a value in the next
    word): the value was read as a second input, so the call went through untouched ("2 inputs, not one PTX"),
    the entry's knobs left out."""
    import json
    from nvcc_evo.cubin.sass import cubin_registers
    log = project / "log.jsonl"
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"), NVCC_EVO_ACF=_write(project, CAPPED),
                  NVCC_EVO_LOG=log)
    done = subprocess.run([str(PTXAS), ARGV[0], *option, *ARGV[1:]], cwd=project, env=env, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    line = json.loads(log.read_text().splitlines()[-1])
    assert (line["passthrough"], line["skipped"]) == ("", skipped), line
    assert cubin_registers((project / "k.cubin").read_bytes()) == registers


def test_a_ptx_with_no_entry_is_said_so(project, evo_cache):
    """A PTX of device functions alone: --explain and the log said "no kernel unit of tuned.acf names " and
    stopped there."""
    (project / "f.ptx").write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .func f()\n{\n\tret;\n}\n")
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"),
                  NVCC_EVO_ACF=_write(project, OTHER.replace("not_this_one*", "*")))
    argv = ["--gpu-name=sm_90a", "-c", "f.ptx", "-o", "f.o"]
    explained = subprocess.run([str(PTXAS), "--explain", *argv], cwd=project, env=env, capture_output=True, text=True)
    assert "not tuned: no kernel unit of tuned.acf names it: it has no .entry (no kernel)\n" in explained.stdout
    done = subprocess.run([str(PTXAS), *argv], cwd=project, env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "") and (project / "f.o").exists()


def test_explain_with_a_bad_stale_policy_says_the_ptx_is_compiled_as_asked(project, evo_cache):
    """A kernel unit serves the PTX but NVCC_EVO_STALE is no policy: the call compiles exactly as
    asked (no flags planned), and --explain says so where it crashed on the flags it did not have."""
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"), NVCC_EVO_STALE="sometimes",
                  NVCC_EVO_ACF=_write(project, OTHER.replace("not_this_one*", "*")))
    explained = subprocess.run([str(PTXAS), "--explain", *ARGV], cwd=project, env=env, capture_output=True,
                               text=True)
    assert explained.returncode == 0 and "Traceback" not in explained.stderr, explained.stderr
    assert "served by unit kernel" in explained.stdout, explained.stdout
    assert "not tuned: NVCC_EVO_STALE=sometimes: expected one of keep, default; compiling exactly as asked\n" \
        in explained.stdout, explained.stdout
    assert "added: (nothing)\n" in explained.stdout
    done = subprocess.run([str(PTXAS), *ARGV], cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and (project / "k.cubin").read_bytes() == (project / "plain.cubin").read_bytes()
    assert done.stderr == ("nvcc-evo-ptxas: warning: NVCC_EVO_STALE=sometimes: expected one of keep, default; "
                           "compiling exactly as asked\n"), done.stderr
