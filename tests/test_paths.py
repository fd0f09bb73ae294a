"""Paths named in an ACF stay inside its folder: one matcher (unitpath) for
the build, the search and the check; globs match path segments (`*` never
crosses `/`, `**` is any folders); `..` and absolute paths are located
errors, for unit globs and bench references alike."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import DATA, ROOT, evo_env, run_evo
from nvcc_evo.acf import unitpath
from nvcc_evo.acf.resolve import load
from nvcc_evo.acf.sources import unit_sources
from nvcc_evo.driver.match.index import index_units
from nvcc_evo.driver.match.units import match_unit


@pytest.fixture
def tree(tmp_path) -> Path:
    """project/ with an ACF, and outside/ beside it."""
    for name in ("project/k.cu", "project/sub/k.cu", "project/src/a.cu", "project/src/x/y/b.cu",
                 "project/other/a.cu", "outside/k.cu", "outside/evil.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / name) if name.endswith(".cu") else \
            (tmp_path / name).write_text("def f(**_):\n    open('PWN', 'w')\n")
    return tmp_path


def test_globs_and_references_out_of_the_folder_are_located_errors(tree, evo_cache):
    (tree / "project" / "nvcc-evo.acf").write_text(
        'acf 1\nunit "k.cu" "../outside/*.cu" {\n}\nunit "../../../../etc/passwd" {\n}\n'
        'unit "/abs/k.cu" {\n}\n'
        'unit "sub/k.cu" {\n    bench {\n        kernel mix\n        grid (1)\n        block (1)\n'
        '        reference "../outside/evil.py:f"\n    }\n}\n')
    env = evo_env(evo_cache)
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=tree / "project", env=env)
    assert checked.returncode == 1
    assert checked.stderr.startswith(
        "nvcc-evo.acf:2:13: error: unit path '../outside/*.cu' leaves the ACF's folder ('..'); paths stay inside "
        "it\nunit \"k.cu\" \"../outside/*.cu\" {\n            ^\n")
    assert "nvcc-evo.acf:4:6: error: unit path '../../../../etc/passwd' leaves the ACF's folder" in checked.stderr
    assert "nvcc-evo.acf:6:6: error: unit path '/abs/k.cu' must be relative to the ACF's folder" in checked.stderr
    assert "nvcc-evo.acf:13:9: error: reference file '../outside/evil.py' leaves the ACF's folder" in checked.stderr
    retune = run_evo("--retune", "--backend", "static", "--dry-run", cwd=tree / "project", env=env)
    assert retune.returncode == 1 and "leaves the ACF's folder" in retune.stderr and retune.stdout == ""
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=tree / "project", env=env)
    assert built.returncode == 0 and "the ACF has errors; building without tuned flags" in built.stderr
    assert not list(tree.rglob("PWN"))


def test_a_reference_linked_out_of_the_folder_is_an_error(tree):
    (tree / "project" / "ref.py").symlink_to(tree / "outside" / "evil.py")
    (tree / "project" / "nvcc-evo.acf").write_text(
        'acf 1\nunit "k.cu" {\n    bench {\n        kernel mix\n        grid (1)\n        block (1)\n'
        '        reference "ref.py:f"\n    }\n}\n')
    with pytest.raises(Exception) as caught:
        load(tree / "project" / "nvcc-evo.acf")
    assert f"reference file 'ref.py' is a link out of the ACF's folder (to {tree / 'outside' / 'evil.py'})" \
        in str(caught.value)


def test_a_file_compiled_from_outside_the_folder_never_matches(tree, evo_cache):
    (tree / "project" / "nvcc-evo.acf").write_text('acf 1\nunit "*.cu" {\n    pin ptxas.opt_level = 1\n}\n')
    env = evo_env(evo_cache, NVCC_EVO_ACF=tree / "project" / "nvcc-evo.acf")
    inside = run_evo("--explain", "-arch=sm_90", "-c", "k.cu", cwd=tree / "project", env=env)
    assert 'k.cu [sm_90]: unit "*.cu"' in inside.stdout
    for cwd, source in ((tree / "outside", "k.cu"), (tree / "project", "../outside/k.cu"),
                        (tree / "project", "sub/k.cu")):
        explained = run_evo("--explain", "-arch=sm_90", "-c", source, cwd=cwd, env=env)
        assert f"{source} [sm_90]: no unit in nvcc-evo.acf covers it" in explained.stdout, explained.stdout


def test_a_link_out_of_the_folder_matches_nothing(tree):
    (tree / "project" / "link.cu").symlink_to(tree / "outside" / "k.cu")
    assert not unitpath.covers(["*.cu"], tree / "project" / "link.cu", tree / "project")
    assert unitpath.files(["*.cu"], tree / "project") == [str(tree / "project" / "k.cu")]


@pytest.mark.parametrize("glob, named", [
    ("*.cu", ["k.cu"]),
    ("*/k.cu", ["sub/k.cu"]),
    ("src/*.cu", ["src/a.cu"]),
    ("src/**/*.cu", ["src/a.cu", "src/x/y/b.cu"]),
    ("**/a.cu", ["other/a.cu", "src/a.cu"]),
    ("**", ["k.cu", "nvcc-evo.acf", "other/a.cu", "src/a.cu", "src/x/y/b.cu", "sub/k.cu"]),
    ("./src/?.cu", ["src/a.cu"]),
    ("s[ru][cb]/k.cu", ["sub/k.cu"]),
    ("src*", []),
])
def test_the_build_and_the_search_see_the_same_files(tree, glob, named):
    project = tree / "project"
    (project / "nvcc-evo.acf").write_text(f'acf 1\nunit "{glob}" {{\n}}\n')
    file = load(project / "nvcc-evo.acf")
    found = [str(Path(p).relative_to(project)) for p in unit_sources(file.units[0], project)]
    assert found == named
    every = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    units = index_units(file)
    assert [name for name in every if match_unit(units, project, project / name) is not None] == named


def test_a_file_whose_name_a_shell_reads_is_not_compiled_by_the_search(tree):
    (tree / "project" / "$(touch PWN).cu").write_text("")
    assert unitpath.files(["*.cu"], tree / "project") == [str(tree / "project" / "k.cu")]


def test_the_projects_own_acf_still_names_its_files(evo_cache):
    kernels = ROOT / "kernels"
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=kernels, env=evo_env(evo_cache)).returncode == 0
    for unit in load(kernels / "nvcc-evo.acf").units:
        assert [p.name for p in unit_sources(unit, kernels)] == [unit.globs[0]], unit
