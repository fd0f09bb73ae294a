"""An ACF is data: no value in it reaches a shell. nvcc runs its own steps
through /bin/sh with each -D value inside double quotes, where `$(...)` and
backticks still run, so a define's value is limited to C tokens and the
check refuses the rest. Through the real wrapper, nvcc and a temporary project."""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import evo_env, run_evo
from nvcc_evo.acf import knobs
from nvcc_evo.driver.cmdline import flags
from nvcc_evo.driver.cmdline.nvcc_options import parse_call

KERNEL = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= TILE; }\n'

# Each creates the file PWN wherever a shell reads it (the ACF's strings hold
# no newline; a lone carriage return is the line break they can hold).
PAYLOADS = {
    "command substitution": "$(touch PWN)",
    "backticks": "`touch PWN`",
    "semicolon": "1;touch PWN",
    "pipe": "1|touch PWN",
    "single quotes": "1';touch PWN;'",
    "carriage return": "1\rtouch PWN",
    "escaped dollar": "1\\\\$(touch PWN)",
    "double quote": '1\\";touch PWN;\\"',
}

# The payload as a pin, a searched value and a target's setting (lines 3, 5, 7).
ACF = """acf 1
unit "k.cu" {{
    pin define.EVIL = "{0}"
    search {{
        define.TILE in {{2, "{0}"}}
    }}
    target sm_80 {{ ptxas.maxrregcount = 32 define.OTHER = "{0}" }}
    target sm_90 {{ ptxas.maxrregcount = 40 }}
}}
"""
SPLIT = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "k.cu").write_text("#define TILE 2\n" + KERNEL)
    (tmp_path / "tmp").mkdir()
    return tmp_path


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_no_acf_value_reaches_a_shell(project, evo_cache, payload):
    (project / "nvcc-evo.acf").write_text(ACF.format(payload))
    env = evo_env(evo_cache, TMPDIR=project / "tmp")
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=project, env=env)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    if "\r" in payload:        # refused before parsing: a lone CR ends no line for the parser
        assert "nvcc-evo.acf:3:" in checked.stderr and "a carriage return (CR) alone" in checked.stderr
    else:
        for line in (3, 5, 7):
            assert f"nvcc-evo.acf:{line}:" in checked.stderr, checked.stderr
        assert "takes C identifiers and number literals" in checked.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "k.cu", cwd=project, env=env)
    assert "problem: the ACF has errors; building without tuned flags: " in explained.stdout
    for argv in (["-arch=sm_90", "-c", "k.cu", "-o", "plain.o"], [*SPLIT, "-c", "k.cu", "-o", "split.o"]):
        built = run_evo(*argv, cwd=project, env=env)
        assert built.returncode == 0, built.stderr
        assert "nvcc-evo: warning: the ACF has errors; building without tuned flags: " in built.stderr
        assert (project / argv[-1]).is_file()
    assert not (project / "PWN").exists() and not list(project.rglob("PWN"))


def test_knob_values_are_checked_against_their_domains(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(
        'acf 1\nunit "k.cu" {\n    pin ptxas.dscm = "$(touch PWN)"\n'
        '    target sm_90 { ptxas.dlcm = "`touch PWN`" nvcc.fast_compile = "1;touch PWN" }\n}\n')
    env = evo_env(evo_cache)
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=project, env=env)
    assert checked.returncode == 1
    assert "nvcc-evo.acf:3:5: error: ptxas.dscm takes one of wb, cg, cs, wt, got '$(touch PWN)'" in checked.stderr
    assert "ptxas.dlcm takes one of ca, cg, cs, lu, cv, got '`touch PWN`'" in checked.stderr
    assert "nvcc.fast_compile takes one of 0, min, mid, max, got '1;touch PWN'" in checked.stderr
    assert run_evo("-arch=sm_90", "-c", "k.cu", cwd=project, env=env).returncode == 0
    assert not (project / "PWN").exists()


C_VALUES = ["16", "-3", "1.5f", "-1.5e-3f", "0x1Fu", "1ULL", "float", "std::size_t", "unsigned int", "fast path", ""]


def test_c_macro_values_pass_the_check_and_reach_the_compile(project, evo_cache):
    pins = "".join(f'    pin define.V{chr(65 + i)} = "{value}"\n' for i, value in enumerate(C_VALUES))
    (project / "nvcc-evo.acf").write_text(f'acf 1\nunit "k.cu" {{\n{pins}}}\n')
    env = evo_env(evo_cache, NVCC_EVO_VERBOSE=1)
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=project, env=env).returncode == 0
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=project, env=env)
    added = [f"-DV{chr(65 + i)}={value}" for i, value in enumerate(C_VALUES)]
    assert built.returncode == 0 and f"nvcc-evo: added: {shlex.join(added)}\n" in built.stderr, built.stderr


def test_explain_shows_a_define_with_spaces_as_a_shell_takes_it(project, evo_cache):
    """`define.X = "unsigned int"` was shown as `would add: -DX=unsigned int`: copied into a shell, that is
    -DX=unsigned and an input file named int. Shown quoted now (here, in the verbose build line and in
    each step's options), so that a shell given the line passes the arguments the build passes."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n    pin define.X = "unsigned int"\n'
                                          '    pin define.Y = ""\n    pin define.Z = 16\n}\n')
    explained = run_evo("--explain", "-arch=sm_90", "-c", "k.cu", cwd=project, env=evo_env(evo_cache)).stdout
    shown = next(line for line in explained.splitlines() if line.startswith("would add: "))
    assert shown == "would add: '-DX=unsigned int' -DY= -DZ=16", explained
    echoed = subprocess.run(f"for a in {shown[len('would add: '):]}; do echo \"[$a]\"; done", shell=True,
                            capture_output=True, text=True)
    assert echoed.stdout.splitlines() == ["[-DX=unsigned int]", "[-DY=]", "[-DZ=16]"]


def test_the_flag_mapping_refuses_what_the_check_refuses():
    """A second guard: a define value that got past the check some other way
    is skipped, with the reason, rather than passed to nvcc."""
    facts = flags.read_facts(parse_call(["-c", "k.cu"], {}))
    plan = flags.plan_flags({"define.EVIL": "$(touch PWN)", "define.OK": 16}, facts)
    assert plan.flags == ("-DOK=16",)
    assert plan.skipped == (flags.Skipped("define.EVIL", knobs.define_value_problem("$(touch PWN)")),)
