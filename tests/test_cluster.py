"""The Ray backend (search.cluster) on a local Ray: a retune on the
cluster's workers makes the choice and records of the plain run for a seed
(the static backend is deterministic), a worker killed mid-run loses only
its candidate, and without Ray `--cluster` is a clear error. Throughput
against the number of workers: benchmarks/parallel.py (timings are not
asserted here)."""
from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from conftest import ROOT, evo_env, run_evo
from nvcc_evo.errors import UsageError
from nvcc_evo.search.cluster import parse
from nvcc_evo.search.store import Store

try:
    import ray  # noqa: F401
    RAY = ""
except ImportError:
    RAY = "needs Ray (pip install 'nvcc-evo[cluster]')"
needs_ray = pytest.mark.skipif(bool(RAY), reason=RAY)

UNIT = "scale.cu"


@pytest.mark.parametrize("spec,expected", [("local", (None, None)), ("local:3", (None, 3)),
                                           ("ray://head:10001", ("ray://head:10001", None))])
def test_cluster_spellings(spec, expected):
    assert parse(spec) == expected


@pytest.mark.parametrize("spec", ["local:0", "local:x", "ray://", "head:10001", ""])
def test_a_cluster_that_is_not_one_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="expected ray://HEAD:PORT|local:N takes a number"):
        parse(spec)


def _project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("scale.cu", "nvcc-evo.acf", "references.py", "block_reduce.cuh"):
        shutil.copy(ROOT / "kernels" / name, folder / name)
    return folder


def _retune(folder: Path, cache: Path, *extra: str, env: dict | None = None):
    return run_evo("--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--seed", "3",
                   "--evaluations", "8", "--progress", "lines", UNIT, *extra, cwd=folder,
                   env=env or evo_env(cache))


def _outcome(folder: Path) -> tuple[list, str]:
    """(records without their timings, the unit's written entry)."""
    records = sorted((repr(r.genome), r.measurement.status, r.sass_hash,
                      tuple((k, v) for k, v in r.measurement.metrics if k != "compile_time"))
                     for r in Store(folder / ".nvcc-evo" / "results.jsonl").read())
    text = (folder / "nvcc-evo.acf").read_text()
    entry = text[text.index(f'unit "{UNIT}"'):]
    entry = entry[:entry.index("provenance")]
    return records, entry


def test_without_ray_the_cluster_is_a_clear_error(tmp_path, evo_cache):
    folder = _project(tmp_path)
    hidden = tmp_path / "no-ray"
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")  # Ray absent
    env = evo_env(evo_cache, PYTHONPATH=str(hidden))
    result = _retune(folder, evo_cache, "--cluster", "local:2", env=env)
    assert result.returncode == 3, result.stderr
    assert "--cluster local:2 needs Ray, which is not installed here: pip install 'nvcc-evo[cluster]'" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_cluster_setting_that_is_not_one_is_located(tmp_path, evo_cache):
    folder = _project(tmp_path)
    (folder / "nvcc-evo.toml").write_text("[retune]\ncluster = 4\n")
    result = _retune(folder, evo_cache)
    assert result.returncode == 1 and "nvcc-evo.toml:2:" in result.stderr and "'retune.cluster' must be a string" \
        in result.stderr, result.stderr


@needs_ray
def test_a_local_ray_retune_makes_the_serial_runs_choice_and_records(tmp_path, evo_cache):
    serial = _project(tmp_path / "serial")
    plain = _retune(serial, evo_cache)
    assert plain.returncode == 0, plain.stderr
    # A Ray cluster that another program named (RAY_ADDRESS; `ray start` leaves a file in /tmp/ray that Ray reads
    # the same way) is not the local one: local:N starts its own (it once tried to join that one, and failed).
    elsewhere = evo_env(evo_cache, RAY_ADDRESS="127.0.0.1:1")
    for workers in ("1", "2"):
        folder = _project(tmp_path / workers)
        (folder / "nvcc-evo.toml").write_text(f'[retune]\ncluster = "local:{workers}"\n')   # the setting
        ran = _retune(folder, evo_cache, env=elsewhere)
        assert ran.returncode == 0, ran.stderr
        assert f"cluster = 'local:{workers}' (nvcc-evo.toml:2)" in ran.stderr
        assert f"compiles on {workers} Ray worker(s)" in ran.stderr
        assert _outcome(folder) == _outcome(serial)


KILLER = """#!/bin/sh
# nvcc for the test: the compile of the marked candidate kills the Ray worker running it, {when}
# (this script's parent is the compile's process-group guard, a shell; the worker is the guard's parent)
case " $* " in
  *" -DBLOCK=512 "*) {guard} kill -9 "$(cut -d' ' -f4 /proc/$PPID/stat)"; sleep 5 ;;
esac
exec {nvcc} "$@"
"""


def _killer(folder: Path, real_nvcc: Path, once: bool) -> Path:
    marker = folder / "killed-once"
    guard = f'[ -e {marker} ] || {{ touch {marker};' if once else "{"
    script = folder / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(KILLER.format(when="once" if once else "every time", guard=guard,
                                    nvcc=real_nvcc).replace("sleep 5 ;;", "sleep 5; } ;;"))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@needs_ray
@pytest.mark.parametrize("once", [True, False], ids=["retried", "lost"])
def test_a_killed_worker_loses_only_its_candidate(tmp_path, evo_cache, real_nvcc, once):
    folder = _project(tmp_path / "project")
    script = _killer(tmp_path, real_nvcc, once)
    ran = _retune(folder, evo_cache, "--cluster", "local:2", "--evaluations", "12",
                  env=evo_env(evo_cache, NVCC_EVO_REAL_NVCC=str(script)))
    assert ran.returncode == 0, ran.stderr
    records = Store(folder / ".nvcc-evo" / "results.jsonl").read()
    marked = [r for r in records if dict(r.genome.items).get("define.BLOCK") == 512]
    assert len(records) == 12 and len({r.genome for r in records}) == 12, "the search went on to its budget"
    assert marked and all(r.measurement.status == ("ok" if once else "lost") for r in marked), \
        [(r.genome, r.measurement.status, r.measurement.detail) for r in marked]
    others = [r for r in records if r not in marked]
    assert all(r.measurement.ok for r in others), [(r.genome, r.measurement.status) for r in others]
    if not once:
        assert "the compile's worker was lost" in marked[0].measurement.detail
        assert "lost " in ran.stdout + ran.stderr          # the failures' tally says so


def test_ray_is_imported_only_when_a_cluster_is_named(tmp_path, evo_cache):
    probe = ("import sys\nfrom nvcc_evo import cli\nfrom nvcc_evo.search import retune, measurers, lanes\n"
             "from nvcc_evo.search.retune import Options, run_retune\n"
             "run_retune(Options(acf=sys.argv[1], globs=('scale.cu',), backend='static', evaluations=2))\n"
             "assert 'ray' not in sys.modules, 'ray imported without --cluster'\n")
    folder = _project(tmp_path)
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", probe, str(folder / "nvcc-evo.acf")], cwd=folder,
                          env=evo_env(evo_cache, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
