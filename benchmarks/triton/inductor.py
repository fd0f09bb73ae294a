"""A PyTorch program's Triton kernels retuned through its own benchmark, on
a GPU: benchmarks/triton/torch_compile.py (a hand-written kernel and a
torch.compile'd function), one unit each, `--retune --backend command`,
while the user's own TorchInductor cache is warm. Each run of the program
logs the registers of the kernels that ran (the CUDA profiler's); every
candidate run with a register cap must show its unit's kernels at or under
that cap, so the candidate's knobs reached the kernel through TorchInductor
and Triton, not a cubin either had cached.

    python3 benchmarks/triton/inductor.py OUT_FOLDER

from the repository's root (nvcc_evo and lark importable: PYTHONPATH as
`make gpu-setup` leaves it). Writes OUT_FOLDER/inductor.txt (the table and
the retune's words) and OUT_FOLDER/regs.jsonl; exits 1 when a check fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "torch_compile.py"
HAND, INDUCTOR = "rowsoftmax_kernel", "triton_*"
SCRIPTS = {"nvcc-evo": "nvcc_evo.cli:main", "nvcc-evo-ptxas": "nvcc_evo.driver.dropin_ptxas.shim:main",
           "nvcc-evo-ptxas-blackwell": "nvcc_evo.driver.dropin_ptxas.shim:main_blackwell"}
UNITS = """acf 1
unit kernel "{glob}" {{
    pin ptxas.override_directive_values = true
    search {{
        ptxas.maxrregcount in {{{cap}, 255}}
    }}
    bench {{
        command "{python} torch_compile.py"
        metric "time ([0-9.]+) ms"
        confirm rounds 5
        timeout 300
    }}
}}
"""


def scripts(folder: Path) -> Path:
    """nvcc-evo and both stand-ins, running the tree this Python imports."""
    folder.mkdir(parents=True)
    for name, target in SCRIPTS.items():
        module, function = target.split(":")
        (folder / name).write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n"
                                   f"sys.exit({function}())\n")
        (folder / name).chmod(0o755)
    return folder


def run(argv, cwd: Path, env: dict, out: list[str], timeout: float = 540) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as late:
        done = subprocess.CompletedProcess(argv, 124, str(late.stdout or ""), f"{late.stderr or ''}\n(timed out)")
    out.append(f"$ {' '.join(map(str, argv))}  (exit {done.returncode})\n{done.stdout}{done.stderr}")
    return done


def cap_under(registers: int) -> int:
    return max(16, registers * 2 // 3 // 8 * 8)


def main(out_folder: Path) -> int:
    out_folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="inductor-"))
    project, said = work / "project", []
    project.mkdir()
    shutil.copy(PROGRAM, project / PROGRAM.name)
    bin_folder = scripts(work / "bin")
    regs = out_folder / "regs.jsonl"
    regs.unlink(missing_ok=True)
    env = dict(os.environ, PATH=f"{bin_folder}{os.pathsep}{os.environ['PATH']}", XDG_CACHE_HOME=str(work / "cache"),
               TRITON_PTXAS_PATH=str(bin_folder / "nvcc-evo-ptxas"), KERNEL_REGS=str(regs),
               TRITON_PTXAS_BLACKWELL_PATH=str(bin_folder / "nvcc-evo-ptxas-blackwell"),
               TORCHINDUCTOR_CACHE_DIR=str(work / "users-inductor-cache"))    # the user's own, warm from run 1
    (project / "nvcc-evo.acf").write_text(f'acf 1\nunit kernel "{HAND}" {{\n}}\nunit kernel "{INDUCTOR}" {{\n}}\n')
    first = run([sys.executable, PROGRAM.name], project, env, said)
    if first.returncode != 0:
        return report(out_folder, said, ["the program's first run failed"])
    base = json.loads(regs.read_text().splitlines()[-1])["registers"]
    inductor = sorted(n for n in base if n.startswith("triton_"))
    if HAND not in base or not inductor:
        return report(out_folder, said, [f"the kernels that ran are not the two expected: {base}"])
    caps = {HAND: cap_under(base[HAND]), INDUCTOR: cap_under(min(base[n] for n in inductor))}
    if caps[INDUCTOR] == caps[HAND]:
        caps[INDUCTOR] -= 8
    (project / "nvcc-evo.acf").write_text(UNITS.format(glob=HAND, cap=caps[HAND], python=sys.executable)
                                          + UNITS.format(glob=INDUCTOR, cap=caps[INDUCTOR],
                                                         python=sys.executable).removeprefix("acf 1\n"))
    retune = run(["nvcc-evo", "--retune", "--backend", "command", "--evaluations", "2", "--time-limit", "200"],
                 project, env, said, timeout=560)
    problems = [] if retune.returncode == 0 else [f"the retune exited {retune.returncode}"]
    problems += ["a candidate was not rebuilt"] if "not-rebuilt" in retune.stderr else []
    rows, capped = [], {HAND: 0, INDUCTOR: 0}
    for line in map(json.loads, regs.read_text().splitlines()[1:]):
        cap = re.search(r"-maxrregcount=(\d+)", line["flags"])
        kernels = {INDUCTOR: inductor, HAND: [HAND]}
        unit = next((u for u in caps if cap and caps[u] == int(cap[1])), None)
        if unit is not None:
            capped[unit] += 1
            over = [n for n in kernels[unit] if line["registers"].get(n, 0) > caps[unit]]
            problems += [f"{line['phase']} run with cap {caps[unit]}: {n} ran with {line['registers'][n]} registers"
                         for n in over]
        rows.append(f"{line['phase'] or '-':8} {line['flags'] or '(baseline)':60} {line['time']:9.5f} ms  "
                    + "  ".join(f"{n}={r}" for n, r in sorted(line["registers"].items())))
    problems += [f"no candidate run of {u} had its cap" for u, count in capped.items() if count == 0]
    table = [f"baseline registers: {base}", f"caps searched: {caps}", *rows]
    return report(out_folder, said, problems, table)


def report(out_folder: Path, said: list[str], problems: list[str], table=()) -> int:
    text = "\n".join([*table, "", *(f"FAILED: {p}" for p in problems), "OK" if not problems else "", *said])
    (out_folder / "inductor.txt").write_text(text)
    print("\n".join([*table, *(f"FAILED: {p}" for p in problems)]) or "no table", file=sys.stderr)
    print("OK" if not problems else f"{len(problems)} problem(s): see {out_folder / 'inductor.txt'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
