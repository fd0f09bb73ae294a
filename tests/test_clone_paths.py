"""A cloned repository is not the user (issue 38, case 1): a project's
settings file naming a file outside the project for nvcc-evo to write
(`[report] out`, `log`) or to read as its own data (`[report] stores`,
`[retune] replay`). The victim's `--report` in the clone once replaced
`~/.ssh/authorized_keys` with the page; now each such path is a located
error naming the key, and the victim's file is left as it was. A path
outside comes from the command line or the environment only. Real git,
nvcc and the installed `nvcc-evo`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EVO, ROOT, evo_env
try:
    from nvcc_evo.system.files import leaves
except ImportError:
    pass

KERNELS = ROOT / "kernels"
H200 = ROOT / "benchmarks" / "data" / "h200-search.jsonl"
KEYS = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOwner owner@laptop\n"


def clone_of(home: Path, files: dict[str, str], links: dict[str, str] | None = None) -> Path:
    """A repository (the kernels' ACF and sources, a committed results store,
    `files`, `links`) cloned to HOME/src/clone, beside the victim's
    HOME/.ssh/authorized_keys (mode 600)."""
    origin = home.parent / "origin"
    shutil.copytree(KERNELS, origin, ignore=shutil.ignore_patterns(".nvcc-evo", "__pycache__"))
    (origin / ".nvcc-evo").mkdir()
    shutil.copy(H200, origin / ".nvcc-evo" / "results.jsonl")
    for name, text in files.items():
        (origin / name).write_text(text)
    for name, target in (links or {}).items():
        (origin / name).symlink_to(target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "-C", str(origin), "add", "-A", "-f"], check=True)
    subprocess.run([*git, "-C", str(origin), "commit", "-qm", "project"], check=True)
    (home / ".ssh").mkdir(parents=True)
    keys = home / ".ssh" / "authorized_keys"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    subprocess.run(["git", "clone", "-q", str(origin), str(home / "src" / "clone")], check=True)
    return home / "src" / "clone"


def evo(clone: Path, cache: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), *args], cwd=clone, env=evo_env(cache, HOME=str(clone.parent.parent), **extra),
                          capture_output=True, text=True, timeout=300)


def victim_untouched(home: Path) -> bool:
    keys = home / ".ssh" / "authorized_keys"
    return keys.read_text() == KEYS and keys.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("file, text, where", [
    ("nvcc-evo.toml", '[report]\nout = "../../.ssh/authorized_keys"\n', "nvcc-evo.toml:2:7"),
    ("pyproject.toml", '[project]\nname = "k"\n\n[tool.nvcc-evo.report]\nout = "../../.ssh/authorized_keys"\n',
     "pyproject.toml:5:7"),
    ("nvcc-evo.toml", '[report]\nout = "{home}/.ssh/authorized_keys"\n', "nvcc-evo.toml:2:7"),
    ("nvcc-evo.toml", '[report]\nout = "~/.ssh/authorized_keys"\n', "nvcc-evo.toml:2:7"),
    ("nvcc-evo.toml", '[report]\nout = "keys/authorized_keys"\n', "nvcc-evo.toml:2:7"),      # keys -> ~/.ssh
    ("nvcc-evo.toml", '[report]\nstores = [".nvcc-evo/results.jsonl", "../../.ssh/authorized_keys"]\n',
     "nvcc-evo.toml:2:10"),
])
def test_the_report_writes_nowhere_outside_the_clone(tmp_path, evo_cache, file, text, where):
    home = tmp_path / "home"
    clone = clone_of(home, {file: text.replace("{home}", str(home))}, {"keys": "../../.ssh"})
    done = evo(clone, evo_cache, "--report")
    assert done.returncode == 1, done.stderr
    key = "report.stores" if "stores" in text else "report.out"
    assert f"{where}: error: '{key}' must name a file inside the project folder {clone}" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert victim_untouched(home)
    assert not (clone / ".nvcc-evo" / "report.html").exists()


def test_a_page_outside_comes_from_the_command_line(tmp_path, evo_cache):
    home = tmp_path / "home"
    clone = clone_of(home, {"nvcc-evo.toml": '[report]\nout = "pages/report.html"\n'})
    inside = evo(clone, evo_cache, "--report", "scale*")                     # the settings' own page, inside
    assert inside.returncode == 0 and (clone / "pages" / "report.html").is_file(), inside.stderr
    outside = evo(clone, evo_cache, "--report", "scale*", "--out", str(tmp_path / "page.html"))
    assert outside.returncode == 0 and (tmp_path / "page.html").is_file(), outside.stderr
    assert victim_untouched(home)


def test_a_build_appends_to_no_log_outside_the_clone(tmp_path, evo_cache):
    """The settings' `log` names a file two folders up: the build goes on
    (untuned, as with any settings error, said at its line) and nothing is
    written there; NVCC_EVO_LOG may name it."""
    home = tmp_path / "home"
    clone = clone_of(home, {"nvcc-evo.toml": 'log = "../../.ssh/authorized_keys"\n'})
    args = ("-arch=sm_90", "-c", "scale.cu", "-o", "scale.o")
    built = evo(clone, evo_cache, *args)
    assert built.returncode == 0 and (clone / "scale.o").is_file(), built.stderr
    assert "nvcc-evo.toml:1:7: error: 'log' must name a file inside the project folder" in built.stderr
    assert "name a file elsewhere in NVCC_EVO_LOG" in built.stderr
    assert victim_untouched(home)
    (clone / "nvcc-evo.toml").unlink()
    logged = evo(clone, evo_cache, *args, NVCC_EVO_LOG=str(tmp_path / "build.log"))
    assert logged.returncode == 0 and '"argv"' in (tmp_path / "build.log").read_text(), logged.stderr


def test_a_retune_replays_no_store_outside_the_clone(tmp_path, evo_cache):
    home = tmp_path / "home"
    clone = clone_of(home, {"nvcc-evo.toml": '[retune]\nbackend = "replay"\nreplay = "/etc/passwd"\n'})
    done = evo(clone, evo_cache, "--retune", "--dry-run")
    assert done.returncode == 1
    assert "nvcc-evo.toml:3:10: error: 'retune.replay' must name a file inside the project folder" in done.stderr
    assert "name a file elsewhere with --replay or NVCC_EVO_REPLAY" in done.stderr


def test_leaves_names_each_way_out(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "sub").mkdir()
    (tmp_path / "in" / "out").symlink_to(tmp_path)
    (tmp_path / "in" / "here").symlink_to("sub")
    folder = str(tmp_path / "in")
    assert leaves("a/b.html", folder) == "" and leaves("sub/../x", folder) == "" and leaves("here/x", folder) == ""
    assert leaves("/etc/x", folder) == leaves("~/x", folder) == "an absolute path"
    assert leaves("../x", folder) == leaves("sub/../../x", folder) == "'..' leads out of it"
    assert leaves("out/x", folder) == leaves("out/in/../x", folder) == "a link leads out of it"
    assert leaves("here/../out/x", folder) == "a link leads out of it"
    assert os.path.realpath(tmp_path / "in" / "here") == str(tmp_path / "in" / "sub")


def test_a_committed_compile_record_re_dates_no_file_outside_the_clone(tmp_path, evo_cache,
                                                                        monkeypatch):
    """The compile database names the outputs a candidate's build must compile again, and a
    retune re-dates them to 1970 (as `--hot --write` does): a cloned repository may carry records
    whose output is the victim's file (a path up and out, an absolute one, through a committed
    link). Those are left as they were; the clone's own object is re-dated, and so is an object of
    a build folder outside the clone (cmake -B elsewhere), which begins as a compile's output."""
    from nvcc_evo.measure.command.rebuilt import LONG_AGO, leave_stale
    home = tmp_path / "home"
    clone = clone_of(home, {}, links={"keys": "../../.ssh"})
    built = evo(clone, evo_cache, "-arch=sm_90", "-c", "scale.cu", "-o", "scale.o")
    assert built.returncode == 0, built.stderr
    db = clone / ".nvcc-evo" / "compile-db"
    (genuine,) = db.glob("*.json")
    record = json.loads(genuine.read_text())
    outside = tmp_path / "build"                        # an out-of-tree build folder's object
    outside.mkdir()
    shutil.copy(clone / "scale.o", outside / "scale.o")
    keys = home / ".ssh" / "authorized_keys"
    for n, (cwd, output) in enumerate([(".", "../../.ssh/authorized_keys"), (".", str(keys)),
                                       (".", "keys/authorized_keys"), (str(home), ".ssh/authorized_keys"),
                                       (str(outside), "scale.o")]):
        (db / f"committed{n}.json").write_text(json.dumps({**record, "cwd": cwd, "output": output}))
    before = keys.stat().st_mtime
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    leave_stale(clone / "nvcc-evo.acf", ("scale.cu",), "sm_90")
    assert victim_untouched(home) and keys.stat().st_mtime == before
    assert (clone / "scale.o").stat().st_mtime == LONG_AGO
    assert (outside / "scale.o").stat().st_mtime == LONG_AGO
