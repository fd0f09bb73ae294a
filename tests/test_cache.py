"""The cache folder is bounded (nvcc_evo.driver.cache): it only grew, 1209
ACF index files on one machine."""
from __future__ import annotations

import os
import shutil
import time

from conftest import DATA, evo_env, run_evo
from nvcc_evo.driver.cache import KEEP, MAX_AGE_DAYS, prune

DAY = 86400


def _files(folder, kind: str, count: int, age: float = 0.0) -> list:
    now = time.time()
    made = []
    for index in range(count):
        path = folder / f"{kind}-{index:04d}-{age:.0f}.json"
        path.write_text("{}")
        os.utime(path, (now - age - index, now - age - index))      # index 0 is the newest
        made.append(path)
    return made


def test_prune_keeps_the_newest_of_each_kind_and_drops_the_old(tmp_path):
    indexes = _files(tmp_path, "acf", KEEP["acf"] + 40)
    probes = _files(tmp_path, "toolkit", 3)
    (old,) = _files(tmp_path, "option", 1, age=(MAX_AGE_DAYS + 1) * DAY)
    left = tmp_path / "acf-x.json.4242.tmp"
    left.write_text("half")
    os.utime(left, (time.time() - 7200, time.time() - 7200))
    writing = tmp_path / "acf-y.json.4343.tmp"
    writing.write_text("being written")
    (tmp_path / "sub").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_text("not the cache's")
    (tmp_path / "acf-link.json").symlink_to(outside)
    removed = prune(tmp_path)
    assert sorted(removed) == sorted([p.name for p in indexes[KEEP["acf"]:]] + [old.name, left.name])
    assert all(p.exists() for p in indexes[:KEEP["acf"]] + probes) and writing.exists()
    assert (tmp_path / "sub").is_dir() and outside.read_text() == "not the cache's"
    assert prune(tmp_path) == []                       # bounded: a second pass has nothing to do


def test_a_build_that_writes_a_new_index_and_a_retune_prune_the_cache(tmp_path, evo_cache):
    cache = tmp_path / "xdg"
    shutil.copytree(evo_cache, cache, ignore=shutil.ignore_patterns("*.tmp", "tmp-*"))   # the suite's probes
    folder = cache / "nvcc-evo"
    folder.mkdir(parents=True, exist_ok=True)
    stale = _files(folder, "acf", KEEP["acf"] + 10, age=DAY)
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    pin ptxas.register_usage_level = 6\n}\n')
    env = evo_env(evo_cache, XDG_CACHE_HOME=str(cache))
    built = run_evo("-arch=sm_90", "-c", "spill.cu", "-o", "spill.o", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    assert len(list(folder.glob("acf-*"))) == KEEP["acf"] and not stale[-1].exists()
    more = _files(folder, "acf", 5, age=2 * DAY)
    dry = run_evo("--retune", "--dry-run", "--target", "sm_90", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert all(p.exists() for p in more)                 # a dry run writes and removes nothing
    retuned = run_evo("--retune", "--target", "sm_90", "--backend", "static", "--evaluations", "1", cwd=tmp_path,
                      env=env)
    assert retuned.returncode == 0, retuned.stderr
    assert not any(p.exists() for p in more) and len(list(folder.glob("acf-*"))) == KEEP["acf"]
