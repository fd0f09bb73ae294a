"""With an ACF, the build gets the tuned knobs: per unit, per architecture,
and never against the user's own flags. Real nvcc and ptxas throughout."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env, run_evo, toolkits

ACF = """acf 1
unit "regs.cu" {
    pin ptxas.register_usage_level = 5
    target sm_80 {
        ptxas.maxrregcount = 32
    }
    target sm_90 {
        ptxas.maxrregcount = 40
        ptxas.opt_level = 2
    }
}
unit "sub/regs_b.cu" {
    target sm_90 {
        define.TERMS = 8
    }
}
"""


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "sub").mkdir()
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "sub" / "regs_b.cu")
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "plain.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    return tmp_path


def registers(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"Used (\d+) registers", stderr)]


def compile_regs(project: Path, env: dict, source: str, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(EVO), "-cubin", "-Xptxas", "-v", *args, source, "-o", "out.cubin"],
                            cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""           # the wrapper never writes to stdout
    return result


def test_knobs_follow_unit_and_architecture(project, evo_cache):
    env = evo_env(evo_cache)
    assert registers(compile_regs(project, env, "regs.cu", "-arch=sm_80").stderr) == [32]
    assert registers(compile_regs(project, env, "regs.cu", "-arch=sm_90").stderr) == [40]
    assert registers(compile_regs(project, env, "sub/regs_b.cu", "-arch=sm_90").stderr) == [32]  # TERMS=8
    assert registers(compile_regs(project, env, "plain.cu", "-arch=sm_90").stderr) == [56]       # no unit
    untouched = subprocess.run(["nvcc", "-cubin", "-Xptxas", "-v", "-arch=sm_75", "regs.cu", "-o", "n.cubin"],
                               cwd=project, capture_output=True, text=True).stderr
    assert registers(compile_regs(project, env, "regs.cu", "-arch=sm_75").stderr) == registers(untouched)


def test_acf_is_found_from_the_input_folder(project, evo_cache):
    inner = project / "sub"
    result = compile_regs(inner, evo_cache and evo_env(evo_cache), "regs_b.cu", "-arch=sm_90")
    assert registers(result.stderr) == [32]


def test_each_architecture_of_one_call_gets_its_own_ptxas_knobs(project, evo_cache, tmp_path_factory):
    temp = tmp_path_factory.mktemp("tmpdir")           # nvcc's steps run in a private folder, removed after
    env = evo_env(evo_cache, TMPDIR=temp, NVCC_EVO_LOG=project / "log.jsonl")
    args = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-Xptxas", "-v",
            "-c", "regs.cu", "-MD", "-MT", "out.o", "-MF"]
    explained = run_evo("--explain", *args, "out.d", cwd=project, env=env)
    assert "    regs.cu [sm_80]: -maxrregcount=32   [ptxas.maxrregcount = 32]" in explained.stdout
    assert ("    regs.cu [sm_90]: -maxrregcount=40 -O2   [ptxas.maxrregcount = 40, ptxas.opt_level = 2]"
            in explained.stdout)
    tuned = subprocess.run([str(EVO), *args, "evo.d", "-o", "out.o"], cwd=project, env=env, capture_output=True,
                           text=True)
    plain = subprocess.run(["nvcc", *args, "nvcc.d", "-o", "nvcc.o"], cwd=project, capture_output=True, text=True)
    assert (tuned.returncode, tuned.stdout, plain.returncode) == (0, "", 0), tuned.stderr
    assert registers(tuned.stderr) == [32, 40] and registers(plain.stderr) == [48, 56]
    assert (project / "evo.d").read_text() == (project / "nvcc.d").read_text()   # the same dependency file
    logged = json.loads((project / "log.jsonl").read_text().splitlines()[-1])
    assert logged["ptxas_per_step"] == [{"input": "regs.cu", "arch": "sm_80", "options": ["-maxrregcount=32"]},
                                        {"input": "regs.cu", "arch": "sm_90", "options": ["-maxrregcount=40", "-O2"]}]
    assert [p.name for p in temp.iterdir() if p.name.startswith(("nvcc-evo-steps", "tmpxft"))] == []


def test_each_input_of_one_call_gets_its_own_ptxas_knobs(project, evo_cache):
    env = evo_env(evo_cache)
    args = ["-arch=sm_90", "-Xptxas", "-v", "-c", "regs.cu", "sub/regs_b.cu", "plain.cu"]
    explained = run_evo("--explain", *args, cwd=project, env=env)
    assert "    regs.cu [sm_90]: -maxrregcount=40 -O2   [" in explained.stdout
    assert "    plain.cu [sm_90]: (nothing)   [(nothing)]" in explained.stdout
    assert "define.TERMS: differs within this call" in explained.stdout     # a define: the host sees it too
    tuned = subprocess.run([str(EVO), *args], cwd=project, env=env, capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr
    assert registers(tuned.stderr) == [40, 56, 56]         # regs.cu capped; regs_b.cu (TERMS dropped), plain.cu
    assert all((project / f"{name}.o").is_file() for name in ("regs", "regs_b", "plain"))


def test_the_user_wins_over_per_architecture_knobs_too(project, evo_cache):
    env = evo_env(evo_cache, NVCC_EVO_LOG=project / "log.jsonl")
    args = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-Xptxas",
            "-v,-maxrregcount=48", "-c", "regs.cu", "-o", "out.o"]
    explained = run_evo("--explain", *args, cwd=project, env=env).stdout
    assert "ptxas.maxrregcount (regs.cu [sm_80]): the user sets it" in explained
    assert "    regs.cu [sm_90]: -O2   [ptxas.opt_level = 2]" in explained        # the rest still per step
    result = subprocess.run([str(EVO), *args], cwd=project, env=env, capture_output=True, text=True)
    assert registers(result.stderr) == [48, 48]
    steps = json.loads((project / "log.jsonl").read_text().splitlines()[-1])["ptxas_per_step"]
    assert [s["options"] for s in steps] == [[], ["-O2"]]
    alone = run_evo("--explain", *args[:5], "-Xptxas", "-O3", *args[5:], cwd=project, env=env).stdout
    assert "run split" not in alone                    # every per-step knob is the user's: nothing runs split


def test_a_call_nvcc_refuses_gets_nvccs_words_only(project, evo_cache):
    args = ["-arch=sm_90", "-c", "regs.cu", "plain.cu", "-o", "both.o"]     # -o with two inputs: nvcc says no
    results = [subprocess.run([tool, *args], cwd=project, env=evo_env(evo_cache), capture_output=True, text=True)
               for tool in (str(EVO), "nvcc")]
    assert (results[0].returncode, results[0].stderr) == (results[1].returncode, results[1].stderr) != (0, "")


def test_calls_that_show_nvccs_steps_get_only_common_knobs(project, evo_cache):
    env = evo_env(evo_cache)
    args = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "regs.cu", "-v"]
    explained = run_evo("--explain", *args, cwd=project, env=env)
    assert ("ptxas.maxrregcount: differs within this call (regs.cu/sm_80=32, regs.cu/sm_90=40); not given per "
            "ptxas step: --verbose asks for nvcc's own steps or keeps them") in explained.stdout
    assert "would add: (nothing)" in explained.stdout
    results = [subprocess.run([tool, "-Xptxas", "-v", "-c", *args, "-o", "out.o"], cwd=project, env=env,
                              capture_output=True, text=True) for tool in (str(EVO), "nvcc")]
    assert [r.returncode for r in results] == [0, 0]
    assert registers(results[0].stderr) == registers(results[1].stderr)


@pytest.mark.parametrize("spelling", [
    ["-Xptxas", "-maxrregcount=48"], ["-Xptxas=-v,--maxrregcount=48"], ["--ptxas-options", "-maxrregcount 48"],
    ["-maxrregcount=48"], ["--maxrregcount", "48"],
])
def test_the_user_wins_in_every_spelling(project, evo_cache, spelling):
    result = compile_regs(project, evo_env(evo_cache), "regs.cu", "-arch=sm_90", *spelling)
    assert registers(result.stderr) == [48]


def test_the_user_wins_through_options_files_and_environment(project, evo_cache):
    (project / "opts").write_text('-Xptxas "-maxrregcount=48"\n')
    result = compile_regs(project, evo_env(evo_cache), "regs.cu", "-arch=sm_90", "--options-file", "opts")
    assert registers(result.stderr) == [48]
    env = evo_env(evo_cache, NVCC_APPEND_FLAGS="-Xptxas -maxrregcount=48")
    assert registers(compile_regs(project, env, "regs.cu", "-arch=sm_90").stderr) == [48]
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env)
    assert "ptxas.maxrregcount: the user sets it (-Xptxas -maxrregcount=48); the user wins" in explained.stdout


def test_an_options_file_that_names_another_is_read_in_place(project, evo_cache):
    """`--options-file outer` whose text is `--options-file inner` (nvcc reads both): the wrapper warned
    "internal error (KeyError('extra'))" and built untuned; a file that names itself (nvcc: "Too many options
    file opened") was a RecursionError."""
    (project / "inner").write_text('-arch=sm_90 -Xptxas "-maxrregcount=48"\n')
    (project / "outer").write_text("--options-file inner -Xptxas -v\n")
    env = evo_env(evo_cache)
    result = compile_regs(project, env, "regs.cu", "--options-file", "outer")
    assert registers(result.stderr) == [48] and "nvcc-evo" not in result.stderr      # the user's cap, said by no one
    (project / "inner").write_text("-arch=sm_90\n")
    assert registers(compile_regs(project, env, "regs.cu", "--options-file", "outer").stderr) == [40]  # the ACF's
    (project / "self").write_text("--options-file self\n")
    for command in ("nvcc", str(EVO)):
        done = subprocess.run([command, "--options-file", "self", "-arch=sm_90", "-c", "regs.cu"], cwd=project,
                              env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (1, "", "nvcc fatal   : Too many options file opened "
                                                               "'self'\n"), done.stderr


def test_a_quote_in_an_input_s_name_is_no_internal_error(project, evo_cache):
    """`nvcc-evo -c regs.cu 'dq"uote.cu'` (the inputs' ptxas knobs differ: a split call): nvcc prints the name
    unquoted in its steps, and shlex.split of them raised ValueError('No closing quotation'), said as an
    "internal error". nvcc fails on such a name itself: its exit status, and the reason the steps are not split."""
    shutil.copy(project / "regs.cu", project / 'dq"uote.cu')
    argv = ["-arch=sm_90", "-c", "regs.cu", 'dq"uote.cu']
    env = evo_env(evo_cache)
    own = subprocess.run(["nvcc", *argv], cwd=project, env=env, capture_output=True, text=True)
    ours = subprocess.run([str(EVO), *argv], cwd=project, env=env, capture_output=True, text=True)
    assert ours.returncode == own.returncode != 0 and ours.stdout == own.stdout == ""
    assert "internal error" not in ours.stderr and own.stderr in ours.stderr, ours.stderr


def test_a_register_cap_for_an_arch_specific_target_never_breaks_a_werror_build(project, evo_cache):
    """`-arch=sm_90a` makes nvcc run ptxas on the compute_90 PTX too, and that run warns "Too big maxrregcount
    value specified 40, will be ignored" of any cap: with -Xptxas -Werror the ACF's cap failed the build (exit
    255) that nvcc alone builds. Under -Werror the cap goes to the sm_90a step alone."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" {\n    pin ptxas.maxrregcount = 40\n}\n')
    env = evo_env(evo_cache)
    argv = ["-arch=sm_90a", "-Xptxas", "-Werror,-v", "-c", "regs.cu", "-o", "regs.o"]
    assert subprocess.run(["nvcc", *argv], cwd=project, env=env, capture_output=True).returncode == 0
    built = subprocess.run([str(EVO), *argv], cwd=project, env=env, capture_output=True, text=True)
    assert built.returncode == 0 and "Too big maxrregcount" not in built.stderr, built.stderr
    assert registers(built.stderr) == [40]


def test_debug_builds_get_no_optimisation_level(project, evo_cache):
    env = evo_env(evo_cache)
    for debug in (["-G"], ["-Xptxas", "-g"]):
        result = compile_regs(project, env, "regs.cu", "-arch=sm_90", *debug)
        assert "Optimized debugging not supported" not in result.stderr
    explained = run_evo("--explain", "-G", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env)
    assert "ptxas.opt_level: debug build" in explained.stdout


def test_no_register_cap_when_spills_are_errors(project, evo_cache):
    result = compile_regs(project, evo_env(evo_cache), "regs.cu", "-arch=sm_90",
                          "-Xptxas", "--warn-on-spills,-Werror")
    assert registers(result.stderr) == [56]


@pytest.mark.parametrize("hint", ["ptxas.minnctapersm = 2", "ptxas.maxntid = 128"])
def test_a_block_size_hint_beside_a_register_cap_never_breaks_a_werror_build(project, evo_cache, hint):
    """`target sm_90 { ptxas.maxrregcount = 40 }` with a pinned --minnctapersm (or --maxntid): ptxas ignores the
    hint beside a cap and warns of conflicting options, so `-Xptxas -Werror` failed a build that nvcc alone
    builds (exit 255). The hint is left out (ptxas ignored it: the same SASS), the user's own hint wins over
    the ACF's cap, and a split call (inputs of other caps) leaves it out of the step of a cap too."""
    (project / "nvcc-evo.acf").write_text(ACF.replace("    pin ptxas.register_usage_level = 5\n",
                                                      f"    pin ptxas.register_usage_level = 5\n    pin {hint}\n"))
    env = evo_env(evo_cache)
    result = compile_regs(project, env, "regs.cu", "-arch=sm_90", "-Xptxas", "-Werror")
    assert registers(result.stderr) == [40] and "Conflicting options" not in result.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    assert f"{hint.split()[0]}: ptxas ignores it beside ptxas.maxrregcount = 40, and warns" in explained
    flag = "--" + hint.split()[0].split(".")[1] + "=" + hint.split()[2]
    user = compile_regs(project, env, "regs.cu", "-arch=sm_90", "-Xptxas", f"-Werror,{flag}")
    assert registers(user.stderr) == [56] and "Conflicting options" not in user.stderr
    split = subprocess.run([str(EVO), "-arch=sm_90", "-Xptxas", "-Werror", "-c", "regs.cu", "sub/regs_b.cu"],
                           cwd=project, env=env, capture_output=True, text=True)
    assert split.returncode == 0 and "Conflicting options" not in split.stderr, split.stderr


def test_the_other_pairs_ptxas_ignores_one_of_never_break_a_werror_build(project, evo_cache):
    """ptxas ignores --def-load-cache beside --force-load-cache (and the store pair) and --register-usage-level
    beside -O0, with a 'Conflicting options' warning: `-Xptxas -Werror` failed these builds (exit 255)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" {\n    pin ptxas.dlcm = cg\n    pin ptxas.flcm = cg\n'
                                          '    pin ptxas.dscm = wt\n    pin ptxas.fscm = wt\n'
                                          '    pin ptxas.register_usage_level = 3\n    pin ptxas.opt_level = 0\n}\n')
    env = evo_env(evo_cache)
    result = compile_regs(project, env, "regs.cu", "-arch=sm_90", "-Xptxas", "-Werror")
    assert "Conflicting options" not in result.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    assert "would add: -Xptxas -flcm=cg -Xptxas -fscm=wt -Xptxas -O0\n" in explained
    for knob, other in (("dlcm", "flcm = cg"), ("dscm", "fscm = wt"), ("register_usage_level", "opt_level = 0")):
        assert f"ptxas.{knob}: ptxas ignores it beside ptxas.{other}, and warns" in explained
    user = compile_regs(project, env, "regs.cu", "-arch=sm_90", "-Xptxas", "-Werror,-dlcm=ca,--register-usage-level=4")
    assert "Conflicting options" not in user.stderr                  # the user's own: the ACF's -flcm and -O0 out


def test_an_optimisation_level_and_a_fast_compile_level_ptxas_refuses_together_never_break_a_build(project,
                                                                                                  evo_cache):
    """`pin ptxas.opt_level = 2` with `pin ptxas.fast_compile = min` passed the check and every build failed
    (ptxas fatal: Conflicting options -opt-level=<0,2,3> and --Ofast-compile=min, exit 255); so did an ACF's
    -Ofc level beside the user's own -O. ptxas takes an -Ofc level beside an explicit -O only as -O0 with max
    and -O1 with min or mid: another pair leaves the ACF's -Ofc out (or, beside the user's -Ofc, its -O)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" {\n    pin ptxas.opt_level = 2\n'
                                          '    pin ptxas.fast_compile = min\n}\nunit "plain.cu" {\n'
                                          '    pin ptxas.fast_compile = mid\n}\n')
    env = evo_env(evo_cache)
    compile_regs(project, env, "regs.cu", "-arch=sm_90")
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    assert "would add: -Xptxas -O2\n" in explained
    assert "ptxas.fast_compile: ptxas refuses -O2 with -Ofc=min (fatal): the optimisation level kept" in explained
    for user in (["-Xptxas", "-O2"], ["-Xptxas", "--opt-level=0"]):
        compile_regs(project, env, "plain.cu", "-arch=sm_90", *user)
    explained = run_evo("--explain", "-arch=sm_90", "-Xptxas", "-O1", "-c", "plain.cu", cwd=project, env=env).stdout
    assert "would add: -Xptxas -Ofc=mid\n" in explained                        # a pair ptxas takes
    compile_regs(project, env, "regs.cu", "-arch=sm_90", "-Xptxas", "-Ofc=max")     # the user's -Ofc: the ACF's -O out


def test_cmake_probes_pass_through(project, evo_cache):
    shutil.copy(project / "regs.cu", project / "CMakeCUDACompilerId.cu")
    (project / "nvcc-evo.acf").write_text(ACF + 'unit "CMakeCUDACompilerId.cu" { pin ptxas.opt_level = 1 }\n')
    explained = run_evo("--explain", "-arch=sm_90", "-c", "CMakeCUDACompilerId.cu", cwd=project, env=evo_env(evo_cache))
    assert "pass-through: a CMake probe" in explained.stdout


def test_unknown_options_pass_through_untouched(project, evo_cache):
    explained = run_evo("--explain", "-arch=sm_90", "--future-option", "-c", "regs.cu", cwd=project,
                        env=evo_env(evo_cache))
    assert "pass-through: nvcc-evo does not understand --future-option" in explained.stdout


def test_an_options_file_that_cannot_be_read_is_said_in_its_own_words(project, evo_cache):
    """CMake's `--options-file CMakeFiles/x.dir/includes_CUDA.rsp`, asked from another folder: said as the
    problem it is (it read "nvcc-evo does not understand cannot read options file ...")."""
    explained = run_evo("--explain", "-arch=sm_90", "--options-file", "missing.rsp", "-c", "regs.cu", cwd=project,
                        env=evo_env(evo_cache))
    assert "pass-through: cannot read options file missing.rsp: No such file or directory: passed through" \
        in explained.stdout, explained.stdout
    assert "does not understand" not in explained.stdout


def test_broken_acf_still_builds_and_says_why(project, evo_cache):
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" { pin ptxas.maxregs = 3 }\n')
    result = compile_regs(project, evo_env(evo_cache), "regs.cu", "-arch=sm_90")
    assert registers(result.stderr) == [56]
    assert "nvcc-evo: warning: the ACF has errors; building without tuned flags: " in result.stderr
    assert "nvcc-evo.acf:2:18: unknown knob 'ptxas.maxregs'" in result.stderr


def test_stale_entry_is_detected_recorded_and_follows_policy(project, evo_cache):
    env = evo_env(evo_cache)
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    current = re.search(r"fingerprint (sha256:\w+)", explained).group(1)
    acf = ACF.replace("ptxas.opt_level = 2\n", f'ptxas.opt_level = 2\n        provenance {{ fingerprint = "{current}" }}\n')
    (project / "nvcc-evo.acf").write_text(acf)
    assert "stale:" not in run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    (project / "regs.cu").write_text((project / "regs.cu").read_text() + "\n// edited\n")
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    assert "stale: source changed since it was tuned" in explained
    assert registers(compile_regs(project, env, "regs.cu", "-arch=sm_90").stderr) == [40]     # keep (default)
    env_default = evo_env(evo_cache, NVCC_EVO_STALE="default")
    assert registers(compile_regs(project, env_default, "regs.cu", "-arch=sm_90").stderr) == [56]
    (entry,) = [json.loads(p.read_text()) for p in (project / ".nvcc-evo" / "compile-db").glob("*.json")]
    assert entry["stale"] == ["source changed since it was tuned"] and entry["arch"] == "sm_90"


def test_header_edits_change_the_fingerprint(project, evo_cache):
    (project / "tile.h").write_text("#define TILE 4\n")
    (project / "regs.cu").write_text('#include "tile.h"\n' + (project / "regs.cu").read_text())
    env = evo_env(evo_cache)
    first = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    (project / "tile.h").write_text("#define TILE 8\n")
    second = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    fingerprints = [re.search(r"fingerprint (sha256:\w+)", text).group(1) for text in (first, second)]
    assert fingerprints[0] != fingerprints[1]


def test_compile_database_under_parallel_builds(project, evo_cache):
    env = evo_env(evo_cache)
    for i in range(6):
        shutil.copy(project / "regs.cu", project / f"u{i}.cu")
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "u*.cu" { pin ptxas.opt_level = 2 }\n')

    def build(i):
        return subprocess.run([str(EVO), "-arch=sm_90", "-c", f"u{i}.cu", "-o", f"u{i}.o"], cwd=project,
                              env=env, capture_output=True, text=True).returncode

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(build, range(6))) == [0] * 6
    entries = [json.loads(p.read_text()) for p in (project / ".nvcc-evo" / "compile-db").glob("*.json")]
    assert sorted(Path(e["input"]).name for e in entries) == [f"u{i}.cu" for i in range(6)]
    assert all(e["flags"] == ["-Xptxas", "-O2"] and e["argv"][0] == "-arch=sm_90" for e in entries)


@pytest.mark.parametrize("nvcc", toolkits())
def test_probing_finds_what_each_toolkit_takes(nvcc, tmp_path):
    from nvcc_evo.driver.toolkit import probe
    toolkit = probe(nvcc)
    assert toolkit.default_arch.startswith("sm_")
    assert {"ptxas.maxrregcount", "ptxas.opt_level", "nvcc.use_fast_math", "ptxas.dlcm"} <= toolkit.accepted
    if toolkit.version_tuple >= (13, 5):
        assert "ptxas.enable_func_clone_sc" in toolkit.accepted
    else:
        assert "ptxas.enable_func_clone_sc" not in toolkit.accepted
        assert "Unknown option" in toolkit.why_rejected("ptxas.enable_func_clone_sc")


def test_relocatable_only_knobs_wait_for_rdc(project, evo_cache):
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" { pin ptxas.device_function_maxrregcount = 64 }\n')
    env = evo_env(evo_cache)
    whole = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env).stdout
    assert "ptxas.device_function_maxrregcount: needs relocatable device code" in whole
    rdc = run_evo("--explain", "-arch=sm_90", "-dc", "regs.cu", cwd=project, env=env).stdout
    assert "would add: -Xptxas --device-function-maxrregcount=64" in rdc
    result = subprocess.run([str(EVO), "-arch=sm_90", "-dc", "regs.cu", "-o", "r.o"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""


def test_lto_device_link_gets_the_ptxas_knobs_of_its_objects(project, evo_cache):
    """With -dlto, ptxas runs at -dlink: the knobs go there, found through the
    compile database. (The LTO link itself needs nvvm/lib64/libnvvm.so, which
    the CPU machines' toolkit lacks, so this checks the decision.)"""
    env = evo_env(evo_cache)
    (project / "nvcc-evo.acf").write_text(ACF.replace("pin ptxas.register_usage_level = 5",
                                                      "pin define.TERMS = 16"))
    compiled = subprocess.run([str(EVO), "-arch=sm_90", "-dc", "-dlto", "regs.cu", "-o", "regs.o"], cwd=project,
                              env=env, capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    link = run_evo("--explain", "-arch=sm_90", "-dlink", "-dlto", "regs.o", "-o", "link.o", cwd=project, env=env)
    assert "would add: -Xptxas -maxrregcount=40 -Xptxas -O2\n" in link.stdout   # no -D at link time
    shutil.copy(project / "regs.o", project / "foreign.o")
    mixed = run_evo("--explain", "-arch=sm_90", "-dlink", "-dlto", "regs.o", "foreign.o", "-o", "l.o",
                    cwd=project, env=env)
    assert "foreign.o [sm_90]: not compiled through nvcc-evo" in mixed.stdout
    assert "would add: (nothing)" in mixed.stdout


def _registers_per_arch(stderr: str) -> dict[str, int]:
    """ptxas -v's registers of each architecture's step (one kernel)."""
    return dict((arch, int(n)) for arch, n in
                re.findall(r"Compiling entry function '\w+' for '(sm_\w+)'\n.*?Used (\d+) registers", stderr, re.S))


@pytest.mark.parametrize("every", ["all", "all-major"])
def test_arch_all_gives_each_architecture_its_own_entry(project, evo_cache, every):
    """`-arch=all` (and all-major) is nvcc's -gencode for each architecture it lists: the build applied no
    entry and said nothing ("SASS targets: none" under --explain alone). Each step now gets its target's
    entry, as with -gencode; the architectures without one build as nvcc alone builds them."""
    args = [f"-arch={every}", "-Xptxas", "-v", "-c", "regs.cu", "-o", "out.o"]
    plain = subprocess.run(["nvcc", *args], cwd=project, capture_output=True, text=True)
    ours = subprocess.run([str(EVO), *args], cwd=project, env=evo_env(evo_cache), capture_output=True, text=True)
    assert ours.returncode == 0 and ours.stdout == "", ours.stderr
    expected = {**_registers_per_arch(plain.stderr), "sm_80": 32, "sm_90": 40}
    assert _registers_per_arch(ours.stderr) == expected and len(expected) > 2
    explained = run_evo("--explain", *args, cwd=project, env=evo_env(evo_cache)).stdout
    assert "    regs.cu [sm_90]: -maxrregcount=40 -O2   [ptxas.maxrregcount = 40, ptxas.opt_level = 2]" in explained


def test_an_sm_90a_compile_is_served_by_the_sm_90_block_and_explain_says_so(tmp_path, evo_cache):
    """A `target sm_90` block served no `sm_90a` compile (CUTLASS's Hopper kernels build for sm_90a only) and
    --explain did not mention the block it skipped: the drop-in ptxas served Triton's sm_90a from it, nvcc
    compiles did not. Where the variant has no block of its own, its architecture's serves it, said. Its
    note for no entry at all said "(recorded for --retune)", though --explain records nothing."""
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text('acf 1\nunit "regs.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 32\n    }\n}\n')
    env = evo_env(evo_cache)
    explained = run_evo("--explain", "-arch=sm_90a", "-c", "regs.cu", cwd=tmp_path, env=env)
    assert explained.returncode == 0, explained.stderr
    assert "regs.cu [sm_90a]: unit \"regs.cu\" (line 2), target sm_90 (line 3)\n" in explained.stdout, \
        explained.stdout
    assert "    no entry for sm_90a: the entry for sm_90 serves it\n" in explained.stdout
    built = run_evo("-arch=sm_90a", "-Xptxas", "-v", "-c", "regs.cu", "-o", "regs.o", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    used = [int(n) for n in re.findall(r"Used (\d+) registers", built.stderr)]
    assert used and max(used) <= 32, built.stderr
    acf.write_text(acf.read_text().replace("sm_90", "sm_80"))
    explained = run_evo("--explain", "-arch=sm_90a", "-c", "regs.cu", cwd=tmp_path, env=env)
    assert "no target" in explained.stdout and "recorded for --retune" not in explained.stdout
    assert "no entry for sm_90a: defaults (a build through nvcc-evo records the compile, for --retune)" \
        in explained.stdout, explained.stdout
