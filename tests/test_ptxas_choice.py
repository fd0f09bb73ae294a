"""ptxas.version and ptxas.controls with real tools: CUDA 13.0's nvcc, ptxas
13.3.73 (the ptxas133 extra, which `make setup` installs into .venv/ptxas133)
and the CompileIQ control files of the shared test data (never copied into
the repository: read from ../shared/fixtures/compileiq at test time)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EVO_COMMAND, ROOT, _pip_toolkit, evo_env, run_evo, sass
from nvcc_evo.driver.cmdline import ptxas
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.driver.toolkit import load_toolkit


def _ptxas133() -> Path | None:
    named = os.environ.get("NVCC_EVO_TEST_PTXAS133")
    path = Path(named) if named else ROOT / ".venv" / "ptxas133" / "nvidia" / "cu13" / "bin" / "ptxas"
    return path if path.is_file() else None


def _fixtures() -> Path | None:
    named = os.environ.get("NVCC_EVO_TEST_CONTROLS")
    common = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                            capture_output=True, text=True).stdout.strip()
    places = [Path(named)] if named else []
    places += [ROOT.parent / "shared" / "fixtures" / "compileiq"]
    places += [Path(common).parent.parent / "shared" / "fixtures" / "compileiq"] if common else []
    return next((p for p in places if (p / "controls-a.acf").is_file()), None)


PTXAS133, FIXTURES = _ptxas133(), _fixtures()
needs_133 = pytest.mark.skipif(PTXAS133 is None, reason="ptxas 13.3.73 not installed (make setup puts the "
                               "ptxas133 extra in .venv/ptxas133; or name it in NVCC_EVO_TEST_PTXAS133)")
needs_fixtures = pytest.mark.skipif(FIXTURES is None, reason="the CompileIQ control files "
                                    "(../shared/fixtures/compileiq) are not on this machine")
KERNELS = ROOT / "kernels"


@pytest.fixture
def project(tmp_path) -> Path:
    """softmax.cu beside an ACF, with the three control files copied in (test data, in a temporary folder)."""
    for name in ("softmax.cu", "block_reduce.cuh", "references.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    for name in ("controls-a.acf", "controls-b.acf", "controls-c.acf"):
        if FIXTURES is not None:
            shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def _env(evo_cache, **extra) -> dict:
    return evo_env(evo_cache, **({"NVCC_EVO_PTXAS": PTXAS133} if PTXAS133 else {}), **extra)


def _write_acf(folder: Path, body: str) -> Path:
    (folder / "nvcc-evo.acf").write_text(f'acf 1\nunit "softmax.cu" {{\n{body}\n}}\n')
    return folder / "nvcc-evo.acf"


def _code(binary: Path) -> list[str]:
    """The SASS instructions of a .o or a .cubin (cuobjdump frames the two differently)."""
    return [line.split("*/", 1)[1].strip() for line in sass(binary).splitlines()
            if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


def _direct(folder: Path, tool: Path, *options: str) -> Path:
    """softmax.cu's PTX (nvcc 13.0) through `tool` with `options`: the reference build."""
    ptx = folder / "direct.ptx"
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "softmax.cu", "-o", ptx], cwd=folder, check=True)
    out = folder / f"direct-{tool.parent.parent.name}-{len(options)}.cubin"
    subprocess.run([tool, "-arch=sm_90", *options, ptx, "-o", out], cwd=folder, check=True)
    return out


# ------------------------------------------------------------ the probes
@needs_133
def test_probe_reads_each_ptxas_release(evo_cache, real_nvcc, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    toolkit = load_toolkit(real_nvcc)
    found = ptxas.probe(str(PTXAS133))
    assert (found.version, found.release) == ("13.3.73", "13.3")
    assert ptxas.choose("13.3", toolkit, {ptxas.PTXAS_ENV: str(PTXAS133)}) == found
    assert ptxas.choose("13.3.73", toolkit, {ptxas.PTXAS_ENV: f"/nowhere/ptxas{os.pathsep}{PTXAS133}"}) == found
    assert ptxas.choose("toolkit", toolkit, {}).version == toolkit.version
    assert ptxas.choose(toolkit.version[:4], toolkit, {}).path == toolkit.ptxas
    with pytest.raises(ptxas.NoPtxas, match=r"no ptxas 13\.4: the toolkit's is 13\.0\.88, and ptxas 13\.3\.73"):
        ptxas.choose("13.4", toolkit, {ptxas.PTXAS_ENV: str(PTXAS133)})
    with pytest.raises(ptxas.NoPtxas, match="NVCC_EVO_PTXAS lists none"):
        ptxas.choose("13.3", toolkit, {})


@needs_133
@needs_fixtures
def test_only_ptxas_133_applies_the_control_files(tmp_path, evo_cache, real_nvcc, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    toolkit = load_toolkit(real_nvcc)
    new = ptxas.probe(str(PTXAS133))
    for name in ("controls-a.acf", "controls-b.acf", "controls-c.acf"):
        assert ptxas.controls_problem(new, "sm_90", str(FIXTURES / name)) == ""
        assert "not in expected format" in ptxas.controls_problem(ptxas.toolkit_ptxas(toolkit), "sm_90",
                                                                  str(FIXTURES / name))
    pip = _pip_toolkit()
    if pip is not None:          # CUDA 13.5 (the cuda135 extra): locked out by the minor version
        newer = ptxas.probe(str(pip.parent / "ptxas"))
        assert "Invalid compiler controls file" in ptxas.controls_problem(newer, "sm_90",
                                                                           str(FIXTURES / "controls-a.acf"))
    garbage = tmp_path / "edited.acf"
    garbage.write_bytes((FIXTURES / "controls-a.acf").read_bytes()[:-7] + b"changed")
    assert ptxas.controls_problem(new, "sm_90", str(garbage)) != ""       # cached by content: tried again


def test_a_cached_controls_verdict_names_the_file_asked_about(tmp_path, evo_cache, real_nvcc, monkeypatch):
    """The verdict is cached by the file's content; its words name this
    project's file, never that of the project whose probe ran first (seen in
    a retune of one project naming another's controls-c.acf)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    own = ptxas.toolkit_ptxas(load_toolkit(real_nvcc))      # 13.0: "Input file '...' not in expected format"
    first, second = tmp_path / "matmul", tmp_path / "layernorm"
    for folder in (first, second):
        folder.mkdir()
        (folder / "controls-c.acf").write_text("the same content, not a controls file\n")
    said = [ptxas.controls_problem(own, "sm_90", str(folder / "controls-c.acf")) for folder in (first, second)]
    assert f"'{first}/controls-c.acf' not in expected format" in said[0], said[0]
    assert f"'{second}/controls-c.acf' not in expected format" in said[1], said[1]
    assert str(first) not in said[1]


def test_step_command_runs_the_program_asked_for():
    step = 'ptxas -arch=sm_90 -m64 "/k/a.ptx" -o "/k/a.cubin"'
    assert ptxas.step_command(step, None, ()) == step
    assert ptxas.step_command(step, "/opt/my ptxas", ("-O1", "--apply-controls=/x y.acf")) == \
        "'/opt/my ptxas' -O1 '--apply-controls=/x y.acf' -arch=sm_90 -m64 \"/k/a.ptx\" -o \"/k/a.cubin\""


# ------------------------------------------------------------ a build
@needs_133
@needs_fixtures
def test_a_build_applies_the_control_file_through_ptxas_133(project, evo_cache):
    _write_acf(project, '    pin ptxas.version = "13.3"\n    pin ptxas.controls = "controls-a.acf"')
    log = project / "log.jsonl"
    built = run_evo("-arch=sm_90", "-c", "softmax.cu", "-o", "tuned.o", cwd=project,
                    env=_env(evo_cache, NVCC_EVO_LOG=log))
    assert built.returncode == 0 and built.stdout == "", built.stderr
    assert _code(project / "tuned.o") == _code(_direct(project, PTXAS133, "--apply-controls=controls-a.acf"))
    assert _code(project / "tuned.o") != _code(_direct(project, PTXAS133))
    explained = run_evo("--explain", "-arch=sm_90", "-c", "softmax.cu", "-o", "tuned.o", cwd=project,
                        env=_env(evo_cache)).stdout
    assert f"--apply-controls={project}/controls-a.acf" in explained
    assert f"(run by {PTXAS133.resolve()})" in explained


@needs_fixtures
def test_a_control_file_the_ptxas_rejects_never_breaks_the_build(project, evo_cache, real_nvcc):
    _write_acf(project, '    pin ptxas.controls = "controls-b.acf"\n    pin ptxas.opt_level = 1')
    built = run_evo("-arch=sm_90", "-c", "softmax.cu", "-o", "k.o", cwd=project, env=_env(evo_cache))
    assert built.returncode == 0, built.stderr
    subprocess.run(["nvcc", "-arch=sm_90", "-Xptxas", "-O1", "-c", "softmax.cu", "-o", "plain.o"], cwd=project,
                   check=True)
    assert _code(project / "k.o") == _code(project / "plain.o")          # the other knob still applies
    explained = run_evo("--explain", "-arch=sm_90", "-c", "softmax.cu", cwd=project, env=_env(evo_cache)).stdout
    assert "ptxas.controls (softmax.cu [sm_90]): ptxas 13.0.88" in explained
    assert "does not apply it: ptxas fatal" in explained and "not in expected format" in explained


def test_a_release_nobody_listed_builds_with_the_toolkits_ptxas(project, evo_cache):
    _write_acf(project, '    pin ptxas.version = "13.4"')
    built = run_evo("-arch=sm_90", "-c", "softmax.cu", "-o", "k.o", cwd=project, env=_env(evo_cache))
    assert built.returncode == 0, built.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "softmax.cu", cwd=project, env=_env(evo_cache)).stdout
    assert "ptxas.version (softmax.cu [sm_90]): no ptxas 13.4" in explained
    assert "nvcc's own ptxas runs the step" in explained


@needs_fixtures
def test_the_fingerprint_covers_the_control_file(project, evo_cache):
    from nvcc_evo.driver.match.stale import fingerprint
    plain = fingerprint(project / "softmax.cu")
    _write_acf(project, '    search {\n        ptxas.controls in {none, "controls-a.acf"}\n    }')
    prints = []
    for content in (b"one", b"two"):
        (project / "controls-a.acf").write_bytes(content)
        out = run_evo("--explain", "-arch=sm_90", "-c", "softmax.cu", cwd=project, env=_env(evo_cache)).stdout
        prints.append(next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("fingerprint")))
    assert prints[0] != prints[1] and plain not in prints
    _write_acf(project, "    pin ptxas.opt_level = 2")          # a unit that names no file keeps its digest
    out = run_evo("--explain", "-arch=sm_90", "-c", "softmax.cu", cwd=project, env=_env(evo_cache)).stdout
    assert f"fingerprint {plain}" in out


def test_control_files_stay_in_the_acfs_folder(project, evo_cache):
    acf = _write_acf(project, '    pin ptxas.controls = "../controls.acf"\n'
                              '    search {\n        ptxas.controls in {none, "missing.acf"}\n    }')
    checked = run_evo("--acf-check", str(acf), env=_env(evo_cache))
    assert checked.returncode == 1
    assert "nvcc-evo.acf:3:5: error: ptxas.controls file '../controls.acf' leaves the ACF's folder" in checked.stderr
    assert "nvcc-evo.acf:5:9: error: ptxas.controls file 'missing.acf' not found next to the ACF" in checked.stderr


def test_a_control_file_that_is_no_regular_file_is_named_for_what_it_is(project, evo_cache):
    """A FIFO (or a folder) named as ptxas.controls was "not found next to the ACF", which it is not: the
    user looks for a missing file. Now the check says what it is, at the value's place."""
    os.mkfifo(project / "controls.fifo")
    (project / "controls.d").mkdir()
    acf = _write_acf(project, '    search {\n        ptxas.controls in {none, "controls.fifo", "controls.d", '
                              '"gone.acf"}\n    }')
    checked = subprocess.run([*EVO_COMMAND, "--acf-check", str(acf)], env=_env(evo_cache), capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 1
    assert "nvcc-evo.acf:4:9: error: ptxas.controls file 'controls.fifo' is not a regular file (a FIFO)" \
        in checked.stderr
    assert "nvcc-evo.acf:4:9: error: ptxas.controls file 'controls.d' is not a regular file (a folder)" \
        in checked.stderr
    assert "nvcc-evo.acf:4:9: error: ptxas.controls file 'gone.acf' not found next to the ACF" in checked.stderr


# ------------------------------------------------------------ a retune
@needs_133
@needs_fixtures
def test_a_joint_search_sets_aside_only_the_candidates_ptxas_rejects(project, evo_cache):
    _write_acf(project, "    pin nvcc.use_fast_math = false\n    search {\n        ptxas.opt_level in {1, 3}\n"
                        '        ptxas.version in {toolkit, "13.3"}\n'
                        '        ptxas.controls in {none, "controls-a.acf", "controls-b.acf"}\n    }\n'
                        "    tune {\n        minimize instructions\n    }")
    done = run_evo("--retune", "--backend", "static", "--evaluations", "40", "--all", cwd=project,
                   env=_env(evo_cache))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (project / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    by_genome = {tuple(map(tuple, r["genome"])): r for r in records}
    # The compile plan knows the toolkit's ptxas refuses a controls file: the build would not pass it,
    # so such a genome is never proposed (issue 24: no evaluation spent on it) and the end says why.
    assert len(by_genome) == 8, sorted(by_genome)        # the whole space the build takes: 12 - 4
    for genome, record in by_genome.items():
        knobs = dict(genome)
        assert not (knobs["ptxas.controls"] != "none" and knobs["ptxas.version"] == "toolkit"), genome
        assert record["status"] == "ok", (genome, record["status"])
    avoided = re.search(r"avoided: (\d+) proposal\(s\) the build would not take whole, never built \(e\.g\. "
                        r"ptxas\.controls = controls-\w\.acf: .*does not apply it.*not in expected format", done.stdout)
    assert avoided and int(avoided.group(1)) >= 1, done.stderr + done.stdout
    hashes = {dict(g)["ptxas.controls"]: r["sass_hash"] for g, r in by_genome.items()
              if dict(g)["ptxas.version"] == "13.3" and dict(g)["ptxas.opt_level"] == 3}
    assert len(set(hashes.values())) == 3                # each file makes its own code


@needs_133
@needs_fixtures
def test_a_candidate_compiles_as_the_build_does_with_another_ptxas(project, evo_cache, real_nvcc, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    job = CompileJob(str(real_nvcc), ("-c", "softmax.cu"), str(project), "softmax.cu", "sm_90",
                     ("-Xptxas", f"--apply-controls={project}/controls-c.acf"), ptxas=str(PTXAS133))
    result = compile_candidate(job)
    assert result.ok, result.stderr
    direct = _direct(project, PTXAS133, "--apply-controls=controls-c.acf").read_bytes()
    assert sass_hash(result.cubin) == sass_hash(direct)
    assert "Used" in result.stderr                        # ptxas -v: the static backend's resource report
    rejected = compile_candidate(CompileJob(str(real_nvcc), ("-c", "softmax.cu"), str(project), "softmax.cu",
                                            "sm_90", job.flags))
    assert rejected.status == "compile-error" and "not in expected format" in rejected.stderr


# ------------------------------------------------------------ a Make project
@needs_133
@needs_fixtures
def test_make_applies_a_control_file_to_the_one_unit_that_names_it(tmp_path, evo_cache):
    project = tmp_path / "make"
    shutil.copytree(ROOT / "tests" / "data" / "projects" / "make", project)
    shutil.copy(FIXTURES / "controls-a.acf", project / "kernel-controls.acf")
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n    pin ptxas.version = "13.3"\n'
                                          '    pin ptxas.controls = "kernel-controls.acf"\n}\n')
    evo = shutil.which("nvcc-evo", path=str(Path(os.sys.executable).parent)) or "nvcc-evo"
    log = tmp_path / "log.jsonl"
    built = subprocess.run(["make", f"NVCC={evo}"], cwd=project, capture_output=True, text=True,
                           env=_env(evo_cache, NVCC_EVO_LOG=log))
    assert built.returncode == 0, built.stderr
    assert subprocess.run(["./app"], cwd=project, capture_output=True, text=True).stdout == "built\n"
    for name in ("kernel", "main"):
        subprocess.run(["nvcc", "-arch=sm_90", "-ptx", f"{name}.cu", "-o", f"{name}.ptx"], cwd=project, check=True)
    subprocess.run([PTXAS133, "-arch=sm_90", "--apply-controls=kernel-controls.acf", "kernel.ptx", "-o",
                    "kernel-direct.cubin"], cwd=project, check=True)
    subprocess.run(["nvcc", "-arch=sm_90", "-c", "main.cu", "-o", "main-plain.o"], cwd=project, check=True)
    assert _code(project / "kernel.o") == _code(project / "kernel-direct.cubin")
    assert _code(project / "main.o") == _code(project / "main-plain.o")
    compiles = [json.loads(line) for line in log.read_text().splitlines() if "kernel.cu" in line]
    assert compiles and all("--apply-controls" in line for line in log.read_text().splitlines()
                            if '"kernel.cu"' in line and "-c" in line)


@needs_133
def test_a_retune_chooses_among_the_ptxas_the_project_settings_list(project, evo_cache):
    """The settings file's `ptxas` list reaches the retune's candidate builds
    as it reaches a build (no NVCC_EVO_PTXAS here); the environment wins
    over the file, as everywhere."""
    _write_acf(project, '    search {\n        ptxas.version in {toolkit, "13.3"}\n    }\n'
                        "    tune {\n        minimize instructions\n    }")
    (project / "tools").mkdir()
    shutil.copy(PTXAS133, project / "tools" / "ptxas")
    (project / "nvcc-evo.toml").write_text('ptxas = ["tools/ptxas"]      # relative to this file\n')
    env = evo_env(evo_cache)
    assert "NVCC_EVO_PTXAS" not in env
    done = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--all", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert f"ptxas = ['{project}/tools/ptxas'] (nvcc-evo.toml:1)" in done.stderr
    records = [json.loads(line) for line in (project / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    by_version = {dict(map(tuple, r["genome"]))["ptxas.version"]: r for r in records}
    assert set(by_version) == {"toolkit", "13.3"} and all(r["status"] == "ok" for r in records)
    direct = {version: sass_hash(_direct(project, tool).read_bytes())
              for version, tool in (("13.3", project / "tools" / "ptxas"), ("toolkit", Path(shutil.which("ptxas"))))}
    assert direct["13.3"] != direct["toolkit"]                   # (so the check below tells them apart)
    assert {v: r["sass_hash"] for v, r in by_version.items()} == direct
    overridden = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--all", cwd=project,
                         env=evo_env(evo_cache, NVCC_EVO_PTXAS="/nowhere/ptxas"))
    # (issue 24: a value the build cannot take is left out of the search and said, naming the list it came from)
    assert overridden.returncode == 0, overridden.stderr
    assert "ptxas.version: all its values left out of the search: the build would not pass it (no ptxas 13.3" \
        in overridden.stderr and "/nowhere/ptxas" in overridden.stderr
    assert "NVCC_EVO_PTXAS" in overridden.stderr.split("left out of the search", 1)[1]
    # a ptxas.version the unit's entry sets outside its search space holds for every candidate too
    _write_acf(project, '    search {\n        ptxas.opt_level in {1, 3}\n    }\n'
                        '    target sm_90 {\n        ptxas.version = "13.3"\n    }')
    (project / ".nvcc-evo" / "results.jsonl").unlink()
    kept = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--all", cwd=project, env=env)
    assert kept.returncode == 0, kept.stderr
    records = [json.loads(line) for line in (project / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    baseline = records[0]
    assert baseline["genome"] == [["ptxas.opt_level", 3]] and baseline["sass_hash"] == direct["13.3"]
