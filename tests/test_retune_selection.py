"""What a retune covers is what the command line says: unit globs always
restrict (`--all` means "regardless of staleness" within them), a name that
matches no unit is a usage error naming the units, `--target` is checked."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import DATA, evo_env, run_evo

ACF = """acf 1
unit "spill.cu" {
    search {
        ptxas.opt_level in 1..3
    }
}

unit "regs.cu" {
    search {
        ptxas.opt_level in 1..3
    }
}
"""


@pytest.fixture
def project(tmp_path) -> Path:
    for name in ("spill.cu", "regs.cu"):
        shutil.copy(DATA / "cuda" / name, tmp_path / name)
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    return tmp_path


def dry_run(project: Path, cache: Path, *args: str, cwd: Path | None = None):
    return run_evo("--retune", "--backend", "static", "--dry-run", *args, cwd=cwd or project, env=evo_env(cache))


def listed(stdout: str) -> list[str]:
    return [line.split(" [")[0] for line in stdout.splitlines()]


def test_a_glob_restricts_even_with_all(project, evo_cache):
    done = dry_run(project, evo_cache, "spill.cu", "--all")
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == ['"spill.cu"']
    assert listed(dry_run(project, evo_cache, "--all").stdout) == ['"spill.cu"', '"regs.cu"']


@pytest.mark.parametrize("name", ["./spill.cu", "spill*", "sp?ll.cu"])
def test_spellings_of_one_unit(project, evo_cache, name):
    done = dry_run(project, evo_cache, name)
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == ['"spill.cu"']


def test_a_file_path_from_another_folder_names_its_unit(project, evo_cache):
    done = dry_run(project, evo_cache, "--acf", str(project / "nvcc-evo.acf"), f"{project.name}/regs.cu",
                   cwd=project.parent)
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == ['"regs.cu"']


@pytest.mark.parametrize("name", ["nomatch.cu", "./vadd.cu", "spill"])
def test_a_name_that_matches_no_unit_is_a_usage_error(project, evo_cache, name):
    done = dry_run(project, evo_cache, name)
    assert done.returncode == 2
    assert f"--retune {name}: no unit of {project / 'nvcc-evo.acf'} matches it" in done.stderr
    assert '(units: "spill.cu", "regs.cu")' in done.stderr
    assert done.stdout == ""
    if name == "spill":
        assert "did you mean spill.cu?" in done.stderr


@pytest.mark.parametrize("target, why", [("90", "must be a SASS architecture such as sm_90"),
                                         ("compute_90", "must be a SASS architecture such as sm_90"),
                                         ("sm_999", "does not build it")])
def test_target_is_checked(project, evo_cache, target, why):
    done = dry_run(project, evo_cache, "--target", target)
    assert done.returncode == 2
    assert why in done.stderr and "Traceback" not in done.stderr


def test_a_file_named_from_a_parent_folder_finds_its_acf(project, evo_cache):
    """As a build does: the ACF above the named file, without --acf."""
    done = dry_run(project, evo_cache, f"{project.name}/regs.cu", cwd=project.parent)
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == ['"regs.cu"']


def test_a_unit_never_built_through_the_wrapper_is_said(project, evo_cache):
    done = dry_run(project, evo_cache, "spill.cu")
    assert '"spill.cu": never built through nvcc-evo for this ACF: compiled as `nvcc -c SOURCE`' in done.stderr


def test_the_built_in_default_target_is_said_where_it_is_used(project, evo_cache):
    """Before any build, `--retune` used sm_90 and said nothing of it."""
    done = run_evo("--retune", "--dry-run", "spill.cu", cwd=project, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    assert ("compiled as `nvcc -c SOURCE` for sm_90 (the built-in default target; --target sm_XX for another)"
            in done.stderr)
    assert '"spill.cu" [sm_90]: asked' in done.stdout
    named = run_evo("--retune", "--dry-run", "--target", "sm_80", "spill.cu", cwd=project, env=evo_env(evo_cache))
    assert "built-in default target" not in named.stderr and '"spill.cu" [sm_80]' in named.stdout


def test_a_glob_that_matches_no_file_is_said_so_first(project, evo_cache):
    """It was first reported as "never built through nvcc-evo", then skipped."""
    (project / "nvcc-evo.acf").write_text(ACF + 'unit "src/*.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                          '    }\n}\n')
    done = dry_run(project, evo_cache, "src/*.cu")
    said = [line for line in done.stderr.splitlines() if "src/*.cu" in line]
    assert said[0] == f'nvcc-evo: unit "src/*.cu": its globs match no file under {project}', said
    assert not any("never built" in line for line in said)


def test_another_units_unusable_record_does_not_silence_it(project, evo_cache):
    """regs.cu's record cannot be used (its input is gone); spill.cu, never
    built, is still said to be compiled without the build's flags (it was
    silent whenever any record of the ACF was unusable)."""
    built = run_evo("-arch=sm_90", "-c", "regs.cu", "-o", "regs.o", cwd=project, env=evo_env(evo_cache))
    assert built.returncode == 0, built.stderr
    (project / "regs.cu").rename(project / "regs.cu.old")
    assert "input" in dry_run(project, evo_cache, "--all").stderr.split("regs.cu\": compile database")[1]
    done = dry_run(project, evo_cache, "spill.cu")
    assert '"spill.cu": never built through nvcc-evo for this ACF' in done.stderr


def test_the_entry_a_retune_judges_is_the_plain_target_even_after_a_named_one(project, evo_cache):
    """A unit with an entry for one GPU model and a plain entry for the same
    architecture: the retune writes the plain one, so it is the one judged.
    (The named H200 entry, measured, was read instead, and the static retune
    kept the unit for a GPU although its own plain entry was stale.)"""
    text = ACF.replace('unit "regs.cu" {', '''unit "regs.cu" {
    target sm_90 "NVIDIA H200" {
        ptxas.opt_level = 2
        provenance {
            fingerprint = "sha256:0000"
            backend = pycuda
            gpu = "NVIDIA H200"
            date = "2026-11-30"
        }
    }
    target sm_90 {
        ptxas.opt_level = 1
        provenance {
            fingerprint = "sha256:0000"
            backend = static
        }
    }''')
    (project / "nvcc-evo.acf").write_text(text)
    done = dry_run(project, evo_cache, "--target", "sm_90")
    assert done.returncode == 0, done.stderr
    assert '"regs.cu"' in listed(done.stdout), done.stderr
    assert "but its entry was measured" not in done.stderr


def test_an_entry_the_static_backend_chose_is_stale_for_a_measuring_backend(project, evo_cache):
    """A static retune's entry is up to date for the static backend, but its
    choice is compiler facts: a retune that measures (the command backend, or
    pycuda) retunes it. (It said "nothing to retune: every unit and target is
    up to date", so a user who tuned statically first never got a measured entry
    without --all.)"""
    # (both units get a bench command: a unit without the bench its backend runs stops a retune, --dry-run too)
    text = ACF.replace('    search {\n        ptxas.opt_level in 1..3\n    }\n',
                       '    search {\n        ptxas.opt_level in 1..3\n    }\n'
                       '    bench {\n        command "echo time 1 ms"\n        metric "time ([0-9]+) ms"\n    }\n')
    (project / "nvcc-evo.acf").write_text(text)
    env = evo_env(evo_cache)
    static = run_evo("--retune", "--backend", "static", "--evaluations", "2", "--target", "sm_90", "regs.cu",
                     cwd=project, env=env)
    assert static.returncode == 0, static.stderr
    assert "backend = static" in (project / "nvcc-evo.acf").read_text()
    again = dry_run(project, evo_cache, "--target", "sm_90")             # (a unit named is always retuned)
    assert again.returncode == 0 and listed(again.stdout) == ['"spill.cu"'], again.stdout    # up to date for static
    measuring = run_evo("--retune", "--backend", "command", "--dry-run", "--target", "sm_90", cwd=project, env=env)
    assert measuring.returncode == 0, measuring.stderr
    assert ('"regs.cu" [sm_90]: its entry holds static objectives only (compiler facts): never measured'
            in measuring.stdout.splitlines()), measuring.stdout + measuring.stderr


def test_architectures_are_taken_in_their_numbers_order(project, evo_cache):
    """sm_100 came before sm_75 (sorted as strings), in the retune's order and so in the ACF's blocks."""
    targets = "".join(f"    target {arch} {{\n        ptxas.opt_level = 2\n    }}\n" for arch in ("sm_100", "sm_90", "sm_75"))
    (project / "nvcc-evo.acf").write_text(ACF.replace("    }\n}\n\nunit \"regs.cu\"", "    }\n" + targets + "}\n\nunit \"regs.cu\"", 1))
    done = dry_run(project, evo_cache, "--all", "spill.cu")
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == \
        ['"spill.cu" [sm_75]', '"spill.cu" [sm_90]', '"spill.cu" [sm_100]']


def test_an_entry_measured_on_another_gpu_model_is_stale_for_a_retune_on_this_one():
    """The mission's "retunes when the GPU changes": an entry the GPU backend measured on an H200 is stale for
    a pycuda retune on an H100 (same sm_90) and says how to keep both; a retune that measures on no GPU
    (static, command) judges it as before, and an entry without a GPU (the command backend's) never is."""
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.driver.match.stale import ReasonKind
    from nvcc_evo.retune.scope.staleness import stale_reasons
    entry = ('acf 1\nunit "a.cu" {\n    target sm_90 {\n        ptxas.opt_level = 2\n        provenance {\n'
             '            fingerprint = "sha256:f"\n            toolkit = "13.0.88"\n            GPU\n'
             '            backend = pycuda\n        }\n    }\n}\n')
    unit = parse_text(entry.replace("GPU", 'gpu = "NVIDIA H200"')).units[0]
    same = (unit, "sm_90", "sha256:f", "13.0.88")
    assert stale_reasons(*same) == () and stale_reasons(*same, gpu="NVIDIA H200") == ()
    (reason,) = stale_reasons(*same, gpu="NVIDIA H100 80GB HBM3")
    assert reason.kind is ReasonKind.GPU
    assert str(reason).startswith("measured on NVIDIA H200; this GPU is NVIDIA H100 80GB HBM3"), reason
    assert 'target sm_90 "NVIDIA H200"' in str(reason)
    unmeasured = parse_text(entry.replace("GPU", 'date = "2026-12-04"')).units[0]
    assert stale_reasons(unmeasured, "sm_90", "sha256:f", "13.0.88", gpu="NVIDIA H100 80GB HBM3") == ()


def test_a_stale_reason_is_a_kind_and_the_files_it_names_said_in_words():
    """The build's staleness and the retune's give each reason its kind (what --explain reads to
    name a changed source's files); the words, and the files (four at most), are for people."""
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.driver.match.index import TargetEntry
    from nvcc_evo.driver.match.stale import Reason, ReasonKind, staleness
    from nvcc_evo.retune.scope.staleness import stale_reasons
    entry = TargetEntry("sm_90", None, 3, (), "sha256:old", "12.8", "d1", tune_digest="t1")
    why = staleness(entry, "sha256:new", "13.0", "d2", "t1")
    assert [r.kind for r in why] == [ReasonKind.SOURCE, ReasonKind.TOOLKIT, ReasonKind.SPACE]
    assert list(map(str, why)) == ["source changed since it was tuned",
                                   "tuned with CUDA 12.8, building with 13.0",
                                   "pins or search space changed"]
    unit = parse_text('acf 1\nunit "a.cu" {\n    target sm_90 {\n        provenance {\n'
                      '            fingerprint = "sha256:old"\n            toolkit = "13.0"\n'
                      '        }\n    }\n}\n').units[0]
    assert [r.kind for r in stale_reasons(unit, "sm_90", "sha256:new", "13.0")] == [ReasonKind.SOURCE]
    assert [r.kind for r in stale_reasons(unit, "sm_80", "sha256:old", "13.0")] == [ReasonKind.NO_ENTRY]
    named = Reason(ReasonKind.SOURCE, "source changed", ("a.h", "b.h", "c.h", "d.h", "e.h"))
    assert str(named) == "source changed (a.h, b.h, c.h, d.h ...)"
    assert str(named._replace(files=("a.h",))) == "source changed (a.h)"


def test_an_entry_an_older_nvcc_evo_tuned_for_a_build_stays_up_to_date_for_it(tmp_path, evo_cache, real_nvcc):
    """Builds are named without their outputs and with their options files read since 2026-12-04: an entry
    whose provenance names the same build as nvcc-evo named it before (its key with `-o` and the options
    file's name) is not stale for it, so an upgrade retunes nothing; another build is."""
    import subprocess
    from conftest import EVO
    from nvcc_evo.driver import compiledb
    from nvcc_evo.driver.match.builds import build_key, compiled
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "opts.rsp").write_text("-Xptxas -O2\n")
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "spill.cu" {\n    search {\n        ptxas.maxrregcount in {32, 255}\n    }\n}\n')
    env = evo_env(evo_cache)
    built = subprocess.run([str(EVO), "-arch=sm_90", "--options-file", "opts.rsp", "-c", "spill.cu", "-o", "s.o"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert run_evo("--retune", "--backend", "static", "--evaluations", "3", cwd=tmp_path, env=env).returncode == 0
    (record,), _ = compiledb.scan(acf)
    job = compiled(record, str(real_nvcc))
    now = build_key(job, tmp_path)
    assert f'build = "recorded compile {now}"' in acf.read_text()
    for key, stale in ((build_key(job, tmp_path, outputs=True), False), ("0123456789abcdef", True)):
        acf.write_text(acf.read_text().replace(now, key))
        listed = run_evo("--retune", "--dry-run", cwd=tmp_path, env=env)
        assert ("tuned for another build" in listed.stdout + listed.stderr) == stale, listed.stdout + listed.stderr
        now = key


def test_a_target_this_nvcc_does_not_build_is_warned_and_skipped_and_an_a_variant_is_built(tmp_path, evo_cache):
    """`target sm_999` passed --acf-check and a retune failed at its baseline (Unsupported gpu architecture
    'compute_999', exit 1); `--target sm_90a` was a usage error ("does not build it"), though nvcc builds the
    `a` variants its --list-gpu-code does not name."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "spill.cu" {\n    target sm_999 {\n        ptxas.maxrregcount = 32\n    }\n'
                   '    target sm_90a {\n        ptxas.maxrregcount = 40\n    }\n}\n')
    env = evo_env(evo_cache)
    checked = run_evo("--acf-check", str(acf), env=env)
    assert checked.returncode == 0, checked.stderr
    assert f"{acf}:3:5: warning: unit \"spill.cu\": target sm_999: CUDA " in checked.stderr, checked.stderr
    assert "sm_90a" not in checked.stderr
    listed = run_evo("--retune", "--backend", "static", "--dry-run", cwd=tmp_path, env=env)
    assert listed.returncode == 1, listed.stderr          # (as for every unit a retune cannot build)
    assert 'unit "spill.cu" [sm_999]: its target block names sm_999: CUDA ' in listed.stderr, listed.stderr
    assert '"spill.cu" [sm_90a]' in listed.stdout and "sm_999" not in listed.stdout, listed.stdout
    aimed = run_evo("--retune", "--backend", "static", "--target", "sm_90a", "--dry-run", cwd=tmp_path, env=env)
    assert aimed.returncode == 0, aimed.stderr


def test_two_compiles_in_one_folder_are_told_apart_and_their_real_difference_is_named(tmp_path, evo_cache,
                                                                                     real_nvcc):
    """A by-hand compile of a unit beside the build's is another way of compiling it: the retune named the same
    folder twice ("recorded in X and X") and blamed "their environment" where the environment's nvcc flags
    and the nvcc that ran differed. Each record is told apart by its output, and the difference named."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n'
                                           '        ptxas.maxrregcount in {32, 255}\n    }\n}\n')
    env = evo_env(evo_cache)
    assert run_evo("-arch=sm_90", "-c", "spill.cu", "-o", "build.o", cwd=tmp_path, env=env).returncode == 0
    link = tmp_path / "cuda" / "bin" / "nvcc"
    link.parent.mkdir(parents=True)
    link.symlink_to(real_nvcc)
    mine = {**env, "NVCC_APPEND_FLAGS": "-lineinfo", "NVCC_EVO_REAL_NVCC": str(link)}
    assert run_evo("-arch=sm_90", "-c", "spill.cu", "-o", "mine.o", cwd=tmp_path, env=mine).returncode == 0
    listed = run_evo("--retune", "--dry-run", cwd=tmp_path, env=env)
    assert (f'"spill.cu" [sm_90]: 2 builds compile it differently (recorded in {tmp_path} (-o mine.o) and '
            f"{tmp_path} (-o build.o); NVCC_APPEND_FLAGS (-lineinfo against unset); the nvcc each ran ({link} "
            f"against ") in listed.stderr, listed.stderr
    assert "their environment" not in listed.stderr


def test_a_register_cap_inert_under_launch_bounds_is_said_once(tmp_path, evo_cache):
    """A register cap leaves a __launch_bounds__ kernel at its bounds' limit unless
    ptxas.override_directive_values is on (ptxas -v: "Overriding global maxrregcount"): a retune searched such
    caps without a word, and read as a search of registers that changed no kernel."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")            # (__launch_bounds__(1024))
    acf = tmp_path / "nvcc-evo.acf"
    env = evo_env(evo_cache)
    said = ('"spill.cu" [sm_90]: ptxas.maxrregcount: every kernel of the unit (mix) has __launch_bounds__, whose '
            "register limit ptxas keeps over a cap unless ptxas.override_directive_values is true: the cap leaves "
            "it as it is (searched anyway; search ptxas.override_directive_values in {false, true} too")
    for override, expected in (("", True), ("        ptxas.override_directive_values in bool\n", False)):
        acf.write_text('acf 1\nunit "spill.cu" {\n    search {\n        ptxas.maxrregcount in {32, 48, 255}\n'
                       f"{override}    }}\n}}\n")
        tuned = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "2", "--all",
                        cwd=tmp_path, env=env)
        assert tuned.returncode == 0, tuned.stderr
        assert (tuned.stderr.count(said) == 1) == expected, tuned.stderr


def test_two_records_differences_are_named_exactly(tmp_path):
    """What two records compile differently, in words naming each (the same folder: by its output): an
    argument only one has, one given more often, the order alone, an environment variable."""
    from nvcc_evo.driver.compiledb import CompileRecord
    from nvcc_evo.driver.match.builds import difference
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")

    def record(argv: list[str], output: str, env: dict | None = None) -> CompileRecord:
        return CompileRecord(tuple(argv), str(tmp_path), env or {}, "/usr/bin/nvcc", "13.0", str(tmp_path / "spill.cu"),
                             output, 0, ("spill.cu",), "sm_90", None, "", (), (), 0.0)

    plain = record(["-c", "spill.cu", "-O3"], "b.o")
    assert difference(record(["-c", "spill.cu", "-O3", "-lineinfo"], "a.o"), plain, tmp_path) == \
        f"-lineinfo only in {tmp_path} (-o a.o)"
    assert difference(record(["-c", "spill.cu", "-O3", "-O3"], "a.o"), plain, tmp_path) == \
        f"-O3 given more often in {tmp_path} (-o a.o)"
    assert difference(record(["-O3", "-c", "spill.cu"], "a.o"), plain, tmp_path) == "the order of their arguments"
    assert difference(record(["-c", "spill.cu", "-O3"], "a.o", {"NVCC_CCBIN": "g++-12"}), plain, tmp_path) == \
        "NVCC_CCBIN (g++-12 against unset)"


def test_a_named_file_selects_the_unit_a_build_gives_it(project, evo_cache):
    """A file is built with the first unit that covers it: naming it selects that unit, not the
    recording unit after it (`unit "**/*.cu" {}` below the one `--hot --write` adds), whose entries
    a build of that file never reads."""
    acf = project / "nvcc-evo.acf"
    acf.write_text(ACF + '\nunit "**/*.cu" {\n}\n')
    for name in ("spill.cu", "./spill.cu"):
        done = dry_run(project, evo_cache, name)
        assert done.returncode == 0, done.stderr
        assert listed(done.stdout) == ['"spill.cu"'], done.stdout
    (project / "other.cu").write_text("__global__ void k() {}\n")
    done = dry_run(project, evo_cache, "other.cu")          # no unit before it covers other.cu
    assert listed(done.stdout) == ['"**/*.cu"'], done.stdout + done.stderr
    assert listed(dry_run(project, evo_cache, "**/*.cu").stdout) == ['"**/*.cu"']
