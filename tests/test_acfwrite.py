"""Writes that keep the user's ACF: links, mode, owner, line endings, BOM,
read-only files, the temporary's name, and an editor's save during a rewrite."""
from __future__ import annotations

import os
import re
import threading

import pytest

from conftest import run_evo
from nvcc_evo.acf.edit import write as acfwrite
from nvcc_evo.acf.edit.format import format_text
from nvcc_evo.acf.edit.write import write_atomic
from nvcc_evo.errors import NotWritable

UNFORMATTED = 'acf 1\nunit "a.cu" {   pin nvcc.ftz = false  # why\n}\n'
BOM = b"\xef\xbb\xbf"
NOBODY = 65534


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode()


def test_acf_fmt_writes_through_a_link_and_keeps_mode_owner_line_endings_and_bom(tmp_path):
    shared, project = tmp_path / "shared", tmp_path / "project"
    shared.mkdir(), project.mkdir()
    real = shared / "real.acf"
    real.write_bytes(BOM + crlf(UNFORMATTED))
    os.chmod(real, 0o640)
    if os.geteuid() == 0:
        os.chown(real, NOBODY, NOBODY)
    link = project / "nvcc-evo.acf"
    link.symlink_to(os.path.relpath(real, project))
    before = real.stat()
    result = run_evo("--acf-fmt", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == "../shared/real.acf"
    assert real.read_bytes() == BOM + crlf(format_text(UNFORMATTED))
    after = real.stat()
    assert after.st_mode & 0o7777 == 0o640 and (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert sorted(p.name for p in shared.iterdir()) == [".nvcc-evo", "real.acf"]      # (its lock beside it)
    assert os.listdir(project) == ["nvcc-evo.acf"]


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_acf_or_folder_is_an_error_and_left_alone(tmp_path, what):
    folder = tmp_path / "p"
    folder.mkdir()
    path = folder / "nvcc-evo.acf"
    path.write_text(UNFORMATTED)
    os.chmod(path if what == "file" else folder, 0o444 if what == "file" else 0o555)
    inode = path.stat().st_ino
    try:
        result = run_evo("--acf-fmt", str(path))
    finally:
        os.chmod(folder, 0o755)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    expected = "it is read-only (mode 0444)" if what == "file" else f"its folder {folder} is read-only (mode 0555)"
    assert f"cannot write {path}: {expected}; left as it is" in result.stderr
    assert path.read_text() == UNFORMATTED and path.stat().st_ino == inode and os.listdir(folder) == ["nvcc-evo.acf"]


def test_the_temporary_is_named_after_the_acf_and_the_process(tmp_path, monkeypatch):
    """`.{acf name}.{pid}.{random}.tmp` beside the ACF: a start-up sweep removes those of dead processes."""
    path = tmp_path / "nvcc-evo.acf"
    path.write_text("old\n")
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (renamed.append(src), real_replace(src, dst)))
    write_atomic(path, "new\n")
    (tmp,) = renamed
    assert os.path.dirname(tmp) == str(tmp_path)
    assert re.fullmatch(rf"\.nvcc-evo\.acf\.{os.getpid()}\.[a-z0-9_]+\.tmp", os.path.basename(tmp))
    assert path.read_text() == "new\n"


def test_a_save_by_an_editor_during_a_rewrite_is_kept_and_the_update_redone_on_it(tmp_path):
    path = tmp_path / "nvcc-evo.acf"
    path.write_bytes(crlf("acf 1\n# one\n"))
    seen = []

    def update(text: str) -> str:
        seen.append(text)
        if len(seen) == 1:        # the editor saves while nvcc-evo is busy with the old text
            path.write_bytes(crlf("acf 1\n# one\n# the editor's line\n"))
        return text + "# nvcc-evo's line\n"

    assert acfwrite.rewrite(path, update) is True
    assert seen == ["acf 1\n# one\n", "acf 1\n# one\n# the editor's line\n"]
    assert path.read_bytes() == crlf("acf 1\n# one\n# the editor's line\n# nvcc-evo's line\n")
    assert sorted(os.listdir(tmp_path)) == [".nvcc-evo", "nvcc-evo.acf"]


def test_rewrites_take_turns_under_the_lock(tmp_path):
    """Many threads each add a line by read-modify-write: none is lost."""
    path = tmp_path / "nvcc-evo.acf"
    path.write_text("acf 1\n")

    def add(i: int) -> None:
        for j in range(10):
            acfwrite.rewrite(path, lambda text: text + f"# {i}.{j}\n")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = path.read_text().splitlines()
    assert sorted(lines[1:]) == sorted(f"# {i}.{j}" for i in range(4) for j in range(10))


def test_a_read_only_acf_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "nvcc-evo.acf"
    path.write_text("acf 1\n")
    os.chmod(path, 0o444)
    with pytest.raises(NotWritable):
        acfwrite.rewrite(path, lambda text: text + "# more\n")
    assert path.read_text() == "acf 1\n"


# An editor that saves in place: truncate, write the first part, pause (up to a second), write the rest
# (nano, `cat >`, cp over the file). Its first part ends at a unit boundary, so it parses.
EDITOR = r"""
import random, sys, time
path, saves, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
units = "".join(f'unit "u{i}.cu" {{\n  target sm_90 {{ ptxas.opt_level = 2 }}\n}}\n' for i in range(40))
first, rest = units[:len(units) // 2], units[len(units) // 2:]
first = first[:first.rindex("unit ")]
rest = units[len(first):]
for save in range(saves):
    with open(path, "w") as out:
        out.write(f"acf 1\n# save {save}\n" + first)
        out.flush()
        time.sleep(rng.uniform(0.1, 1.0))
        out.write(rest)
    time.sleep(rng.uniform(0.0, 0.3))
"""


def test_an_in_place_save_during_rewrites_loses_no_unit_and_keeps_the_editors_final_text(tmp_path):
    """A retune's writes of several units while an editor saves in place in two writes again and again:
    no update sees a half-saved text, no rename makes one permanent, the editor's last save is kept."""
    import subprocess
    import sys
    from nvcc_evo.acf import model
    from nvcc_evo.acf.edit.retarget import update_target
    from nvcc_evo.acf.parse import parse_text
    path = tmp_path / "nvcc-evo.acf"
    path.write_text("acf 1\n" + "".join(f'unit "u{i}.cu" {{ }}\n' for i in range(40)))
    saves = 6
    editor = subprocess.Popen([sys.executable, "-c", EDITOR, str(path), str(saves), "7"])
    seen: list[int] = []

    def update(unit: int):
        def change(text: str) -> str:
            seen.append(len(parse_text(text, str(path)).units))
            target = model.Target("sm_90", None, (model.Setting("ptxas.opt_level", 3),), ())
            return update_target(text, (f"u{unit}.cu",), target, str(path))
        return change

    writes = 0
    while editor.poll() is None:
        acfwrite.rewrite(path, update(writes % 40))
        writes += 1
    assert editor.wait() == 0
    acfwrite.rewrite(path, update(39))
    final = parse_text(path.read_text(), str(path))
    assert writes >= 3 and set(seen) == {40}, f"the updates saw {sorted(set(seen))} units"
    assert f"# save {saves - 1}\n" in path.read_text() and len(final.units) == 40
    assert final.units[39].find_target("sm_90").settings == (model.Setting("ptxas.opt_level", 3),)
    assert sorted(os.listdir(tmp_path)) == [".nvcc-evo", "nvcc-evo.acf"]


def test_a_save_begun_before_the_rename_and_ended_after_it_is_kept_with_the_update(tmp_path, monkeypatch):
    """The editor's save opens the file (truncating it) just before nvcc-evo's rename and writes its
    rest after it, into the file the rename replaced: its final text is read there and updated."""
    import subprocess
    path = tmp_path / "nvcc-evo.acf"
    path.write_text("acf 1\n# one\n")
    saving = []
    real_replace = os.replace

    def replace(src, dst):
        if not saving:
            inode = path.stat().st_ino
            saving.append(subprocess.Popen(["sh", "-c", '{ printf "$1"; sleep 0.3; printf "$2"; } > "$0"',
                                            str(path), "acf 1\\n# two\\n", "# the editor's line\\n"]))
            while path.read_text() != "acf 1\n# two\n":     # (the file truncated, the first part written)
                pass
            assert path.stat().st_ino == inode
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert acfwrite.rewrite(path, lambda text: text + "# nvcc-evo's line\n") is True
    assert saving[0].wait() == 0
    assert path.read_text() == "acf 1\n# two\n# the editor's line\n# nvcc-evo's line\n"
