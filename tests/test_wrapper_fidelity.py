"""With no ACF, nvcc-evo is nvcc: same exit code, same stdout and stderr, same
SASS, on both toolkits, over a corpus of command lines that exercise nvcc's hazards."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EVO, ROOT, evo_env, sass, toolkits

TMP_NAMES = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+|Compile time = [0-9.]+ ms")

# (id, arguments, files to compare afterwards, stdin)
CORPUS = [
    ("version", ["--version"], [], None),
    ("preprocess", ["-E", "scale.cu"], [], None),
    ("deps-M", ["-M", "scale.cu"], [], None),
    ("deps-MD-MF", ["-MD", "-MF", "out.d", "-MT", "out.o", "-c", "scale.cu", "-o", "out.o"], ["out.d", "out.o"], None),
    ("dryrun", ["--dryrun", "-arch=sm_90", "-c", "scale.cu", "-o", "out.o"], [], None),
    ("verbose", ["-v", "-arch=sm_90", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("cubin-ptxas-v", ["-arch=sm_90", "-cubin", "-Xptxas", "-v", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("gencode-list", ["-gencode", "arch=compute_90,code=[sm_90,compute_90]", "-c", "scale.cu", "-o", "out.o"], ["out.o"], None),
    ("xptxas-eq-list", ["-Xptxas=-v,-O2", "-arch=sm_90", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("xptxas-spaces", ["-Xptxas", "-O1 -v", "-arch=sm_90", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("define-comma", ["-DA=1,B=2", "-DBLOCK=128", "-arch=sm_90", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("options-file", ["--options-file", "opts.txt", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("x-cu-cpp", ["-x", "cu", "-arch=sm_90", "-c", "scale_copy.cpp", "-o", "out.o"], ["out.o"], None),
    ("stdin", ["-x", "cu", "-arch=sm_90", "-cubin", "-", "-o", "out.cubin"], ["out.cubin"], "scale.cu"),
    ("device-debug", ["-G", "-arch=sm_90", "-cubin", "scale.cu", "-o", "out.cubin"], ["out.cubin"], None),
    ("rdc-and-dlink", ["-rdc=true", "-arch=sm_90", "-c", "scale.cu", "-o", "out.o"], ["out.o"], None),
    ("ptx", ["-arch=sm_90", "-ptx", "scale.cu", "-o", "out.ptx"], ["out.ptx"], None),
    ("missing-input", ["-c", "missing.cu"], [], None),
    ("unknown-option", ["--no-such-option", "-c", "scale.cu"], [], None),
    ("syntax-error", ["-arch=sm_90", "-c", "broken.cu", "-o", "out.o"], [], None),
    ("ptxas-fatal", ["-arch=sm_90", "-Xptxas", "--no-such-flag", "-c", "scale.cu", "-o", "out.o"], [], None),
]


def _project(folder: Path) -> None:
    shutil.copy(ROOT / "kernels" / "scale.cu", folder / "scale.cu")
    shutil.copy(ROOT / "kernels" / "scale.cu", folder / "scale_copy.cpp")
    (folder / "broken.cu").write_text("__global__ void k() { this is not cuda }\n")
    (folder / "opts.txt").write_text('-arch=sm_90 "-DBLOCK=512" -Xptxas -O3\n')


def _run(argv: list[str], cwd: Path, env: dict, stdin: str | None) -> dict:
    data = (cwd / stdin).read_text() if stdin else None
    result = subprocess.run(argv, cwd=cwd, env=env, input=data, capture_output=True, text=True)
    return {"code": result.returncode, "stdout": TMP_NAMES.sub("tmpxft", result.stdout),
            "stderr": TMP_NAMES.sub("tmpxft", result.stderr)}


def _outputs(folder: Path, names: list[str]) -> dict:
    found = {}
    for name in names:
        path = folder / name
        if not path.exists():
            found[name] = None
        elif path.suffix in (".o", ".cubin"):
            found[name] = sass(path)
        else:
            found[name] = TMP_NAMES.sub("tmpxft", path.read_text())
    return found


@pytest.mark.parametrize("nvcc", toolkits())
@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_passthrough_is_byte_faithful(case, nvcc, tmp_path, evo_cache):
    name, args, files, stdin = case
    env = evo_env(evo_cache, nvcc)
    work = tmp_path / "work"          # the same folder for both: paths appear in -v output
    results = []
    for command in (str(nvcc), str(EVO)):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        _project(work)
        results.append((_run([command, *args], work, env, stdin), _outputs(work, files)))
    (expected, expected_files), (got, got_files) = results
    assert got == expected
    assert got_files == expected_files
    if expected["code"] == 0:
        assert all(v is not None for v in expected_files.values())


def test_corpus_covers_the_exit_codes_that_must_pass_through(tmp_path, evo_cache):
    nvcc = Path(shutil.which("nvcc")).resolve()
    _project(tmp_path)
    failing = [c for c in CORPUS if c[0] in ("missing-input", "syntax-error", "ptxas-fatal")]
    codes = {_run([str(nvcc), *c[1]], tmp_path, evo_env(evo_cache), c[3])["code"] for c in failing}
    assert codes == {1, 2, 255}
