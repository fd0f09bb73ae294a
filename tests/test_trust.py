"""Another user's files in a parent folder are not trusted (issue 25, case 2).

A folder writable by all (mode 1777, like /tmp) where a second uid (12345,
through `setpriv`: the suite runs as root here) puts a `pyproject.toml`
naming its own `nvcc`, or an `nvcc-evo.acf`; the user builds its own project
below it. Neither is used: a warning names the file and how to trust it, the
build goes on as nvcc would. NVCC_EVO_TRUST and the user's own list of
trusted folders make them count again; NVCC_EVO_ACF is trusted as given."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import DATA, EVO, ROOT, evo_env

STRANGER = 12345
EVIL = """#!/bin/sh
echo ran >> {log}
exec {nvcc} "$@"
"""


def as_stranger(*argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups", *argv], check=True)


@pytest.fixture
def shared():
    """A folder of mode 1777 of this test's own (the second uid must reach
    it, and the pytest folder is root's 0700), removed after."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to write files as a second uid")
    top = Path(tempfile.mkdtemp(prefix="nvcc-evo-trust-test-"))
    try:
        top.chmod(0o755)
        folder = top / "shared"
        folder.mkdir()
        folder.chmod(0o1777)
        yield folder
    finally:
        shutil.rmtree(top)


def own_project(shared: Path) -> Path:
    """The user's own project below the shared folder (its own folder, its own ACF)."""
    project = shared / "mine"
    project.mkdir()
    shutil.copy(DATA / "cuda" / "spill.cu", project / "spill.cu")
    return project


def build(project: Path, cache: Path, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"], cwd=project,
                          env=evo_env(cache, **extra), capture_output=True, text=True, timeout=300)


def test_a_strangers_settings_never_name_the_nvcc_a_build_runs(shared, evo_cache, real_nvcc):
    """Before: evil.sh ran 13 times as root (toolkit probes, then the compile), nothing said."""
    log = shared / "ran.log"
    as_stranger("sh", "-c", f"printf '%s' '{EVIL.format(log=log, nvcc=real_nvcc)}' > {shared}/evil.sh && "
                f"chmod 755 {shared}/evil.sh && printf '[tool.nvcc-evo]\\nnvcc = \"evil.sh\"\\n' > "
                f"{shared}/pyproject.toml")
    assert os.stat(shared / "pyproject.toml").st_uid == STRANGER
    project = own_project(shared)
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    pin ptxas.opt_level = 1\n}\n')
    done = build(project, evo_cache)
    assert done.returncode == 0 and (project / "spill.o").is_file(), done.stderr
    assert not log.exists(), "the stranger's nvcc ran"
    said = f"the project settings {shared / 'pyproject.toml'} is not used: it is owned by uid {STRANGER}"
    assert said in done.stderr and f"NVCC_EVO_TRUST={shared}" in done.stderr, done.stderr
    for verb in (("--explain", "-arch=sm_90", "-c", "spill.cu"), ("--retune", "--dry-run")):
        shown = subprocess.run([str(EVO), *verb], cwd=project, env=evo_env(evo_cache), capture_output=True,
                               text=True, timeout=300)
        assert shown.returncode == 0 and said in shown.stderr + shown.stdout, shown.stderr
        assert not log.exists()
    trusting = build(project, evo_cache, NVCC_EVO_TRUST=str(shared))       # trusted on purpose: used
    assert trusting.returncode == 0 and log.exists() and said not in trusting.stderr


def test_a_strangers_acf_is_not_used_unless_trusted(shared, evo_cache, tmp_path):
    """A planted nvcc-evo.acf above the user's folder changed its flags."""
    as_stranger("sh", "-c", f"printf 'acf 1\\nunit \"**\" {{\\n    pin ptxas.opt_level = 0\\n}}\\n' > "
                f"{shared}/nvcc-evo.acf")
    project = own_project(shared)
    log = tmp_path / "wrapper.log"
    done = build(project, evo_cache, NVCC_EVO_LOG=log)
    assert done.returncode == 0, done.stderr
    assert f"{shared / 'nvcc-evo.acf'} is not used: it is owned by uid {STRANGER}" in done.stderr
    assert "-Xptxas" not in log.read_text() and "the ACF is not trusted" in log.read_text()
    retune = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=project, env=evo_env(evo_cache),
                            capture_output=True, text=True, timeout=300)
    assert retune.returncode == 3 and "is not used: it is owned by uid" in retune.stderr
    config = tmp_path / "config"
    (config / "nvcc-evo").mkdir(parents=True)
    (config / "nvcc-evo" / "trusted").write_text(f"# folders I trust\n{shared}\n")
    for extra in ({"XDG_CONFIG_HOME": config}, {"NVCC_EVO_ACF": shared / "nvcc-evo.acf"}):
        log.unlink()
        trusted = build(project, evo_cache, NVCC_EVO_LOG=log, **extra)
        assert trusted.returncode == 0 and "is not used" not in trusted.stderr, trusted.stderr
        assert "-Xptxas" in log.read_text()


def test_the_rule(tmp_path):
    """Owner and folder, as the module says (no second uid needed: chown as root)."""
    from nvcc_evo.system.trust import untrusted
    mine = tmp_path / "mine.acf"
    mine.write_text("")
    assert untrusted(mine, {}) == ""
    if os.geteuid() != 0:
        pytest.skip("the rest changes owners (root only)")
    os.chown(mine, STRANGER, STRANGER)
    assert "owned by uid 12345" in untrusted(mine, {})
    assert untrusted(mine, {"NVCC_EVO_TRUST": str(tmp_path)}) == ""
    assert untrusted(mine, {"NVCC_EVO_TRUST": "*"}) == ""
    os.chown(mine, 0, 0)
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, STRANGER, STRANGER)
    (folder / "x.acf").write_text("")
    assert f"its folder {folder} belongs to uid 12345" in untrusted(folder / "x.acf", {})
    os.chown(folder, 0, 0)
    assert untrusted(folder / "x.acf", {}) == ""


def test_roots_file_in_a_folder_all_may_write_is_not_trusted_by_another_user(shared):
    """/tmp/nvcc-evo.acf is root's, but anyone could have put it there: for uid 12345 it is not used."""
    (shared / "nvcc-evo.acf").write_text("acf 1\n")
    ask = "import sys; from nvcc_evo.system.trust import untrusted; print(untrusted(sys.argv[1], {}))"
    said = subprocess.run(["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups",
                           sys.executable, "-c", ask, str(shared / "nvcc-evo.acf")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "HOME": "/nonexistent"})
    assert said.returncode == 0, said.stderr
    assert f"its folder {shared} may be written by others (mode 1777)" in said.stdout


def test_a_strangers_acf_is_not_used_by_the_drop_in_ptxas(shared, evo_cache, tmp_path):
    """nvcc-evo-ptxas walks up from the working folder as the drop-in nvcc
    does, and keeps its rule: a planted kernel unit tuned every PTX below it."""
    as_stranger("sh", "-c", f"printf 'acf 1\\nunit kernel \"*\" {{\\n    target sm_90a {{\\n"
                f"        ptxas.opt_level = 1\\n    }}\\n}}\\n' > {shared}/nvcc-evo.acf")
    project = own_project(shared)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", "spill.cu", "-o", "k.ptx"], cwd=project, check=True)
    ptxas = Path(sys.executable).parent / "nvcc-evo-ptxas"
    log = tmp_path / "ptxas.log"

    def compile_ptx(name: str, **extra) -> subprocess.CompletedProcess:
        return subprocess.run([str(ptxas), "--gpu-name=sm_90a", "k.ptx", "-o", name], cwd=project,
                              env=evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"), NVCC_EVO_LOG=log,
                                          **extra), capture_output=True, text=True, timeout=300)
    done = compile_ptx("ours.cubin")
    assert done.returncode == 0, done.stderr
    assert f"{shared / 'nvcc-evo.acf'} is not used: it is owned by uid {STRANGER}" in done.stderr
    assert "compiling without tuned flags" in done.stderr and not log.exists()
    subprocess.run(["ptxas", "--gpu-name=sm_90a", "k.ptx", "-o", "plain.cubin"], cwd=project, check=True)
    assert (project / "ours.cubin").read_bytes() == (project / "plain.cubin").read_bytes()
    explained = subprocess.run([str(ptxas), "--explain", "--gpu-name=sm_90a", "k.ptx"], cwd=project,
                               env=evo_env(evo_cache), capture_output=True, text=True, timeout=300)
    assert "is not used: it is owned by uid" in explained.stdout and "added:" not in explained.stdout
    trusted = compile_ptx("trusted.cubin", NVCC_EVO_TRUST=shared)
    assert trusted.returncode == 0 and "is not used" not in trusted.stderr, trusted.stderr
    assert '"added": ["-Xptxas", "-O1"]' in log.read_text()


PLANTED = """import os, pickle, sys
class Payload:
    def __reduce__(self):
        return (os.system, ("echo ran >> " + sys.argv[2],))
with open(sys.argv[1], "wb") as handle:
    handle.write(b"0\\n")
    pickle.dump(Payload(), handle)
"""


def test_a_parser_cache_a_stranger_plants_in_the_shared_temporary_folder_runs_nothing(shared, evo_cache):
    """lark's cache=True loaded (pickle.load) /tmp/.lark_cache_USER_SHA256_3_11.tmp, a name anyone can work
    out, whoever owned it: a file the second uid put there ran its code in the user's --acf-check, and in the
    first build after an ACF edit. The parser's cache is now the user's own cache folder's."""
    import lark
    from nvcc_evo.acf import parse
    scratch = Path(tempfile.mkdtemp(dir=shared.parent))
    old, tempfile.tempdir = tempfile.tempdir, str(scratch)       # the name lark gave the product's parser
    try:
        lark.Lark(parse._grammar_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True,
                  strict=False, cache=True)
    finally:
        tempfile.tempdir = old
    (name,) = [p.name for p in scratch.iterdir()]
    marker = shared.parent / "ran.log"
    program = shared.parent / "plant.py"
    program.write_text(PLANTED)
    program.chmod(0o644)
    shared.parent.chmod(0o777)              # (the second uid writes its marker there when its code runs)
    as_stranger(sys.executable, str(program), str(shared / name), str(marker))
    project = own_project(shared)
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    pin ptxas.opt_level = 2\n}\n')
    env = dict(evo_env(evo_cache), TMPDIR=str(shared))
    checked = subprocess.run([str(EVO), "--acf-check", "nvcc-evo.acf"], cwd=project, env=env, capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stderr
    built = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"], cwd=project,
                           env=dict(env, XDG_CACHE_HOME=str(evo_cache / "fresh")), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert not marker.exists()
