"""`nvcc-evo-ptxas --explain PTXAS-ARGS` (and `nvcc-evo-ptxas-blackwell
--explain`): what the drop-in ptxas would do with this call, in words, on
stdout: the program it stands in for, the real one and why it, the ACF,
the PTX's entries and digest, the kernel unit and target that serve it (or
why none), the knobs added and left out, the command, the `--version`
answer. Runs nothing but the real ptxas's probes; compiles nothing.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from nvcc_evo.driver.common import (ACF_ENV, BLACKWELL_PTXAS as BLACKWELL, PLAIN_PTXAS as PLAIN,
                                    REAL_PTXAS_OF as REAL_ENV, TRITON_BIN,
                                    TRITON_PTXAS_BLACKWELL_ENV, TRITON_PTXAS_ENV)
from nvcc_evo.driver.dropin_ptxas import decide as kernels
from nvcc_evo.errors import AcfError

TRITON_ENV = {PLAIN: TRITON_PTXAS_ENV, BLACKWELL: TRITON_PTXAS_BLACKWELL_ENV}


def _real_line(real: str | None, environ: Mapping[str, str], problem: str, role: str) -> str:
    stands = f"stands in for: {role} (Triton's {TRITON_ENV[role]})"
    if real is None:
        return f"{stands}\nreal {role}: none ({problem})"
    if environ.get(REAL_ENV[role]):
        why = REAL_ENV[role]
    elif TRITON_BIN in real:
        why = "Triton's own"
    else:
        why = "the toolkit's: $CUDA_HOME/bin, $CUDA_PATH/bin or PATH"
    return f"{stands}\nreal {role}: {real} ({why})"


def _served_lines(decision: kernels.PtxasDecision) -> list[str]:
    served = decision.served
    if served is None or not served.ptx:
        return [f"nothing to tune: {served.why if served else 'no PTX'}"]
    lines = [f"PTX {served.ptx}: entries {', '.join(served.entries) or '(none)'}; sha256 "
             f"{served.digest}"]
    match = served.match
    if match is None:
        return lines + [f"not tuned: {served.why}"]
    assert match.unit is not None               # (a kernel unit serves it)
    lines.append(f"served by unit {match.unit} (line {match.unit.line}), target "
                 f"{f'{match.target} (line {match.target.line})' if match.target else '(none)'}"
                 f"{'; ' + match.note if match.note else ''}")
    if match.stale:
        lines.append(f"stale: {'; '.join(map(str, match.stale))}")
    lines += [f"not tuned: {problem}" for problem in decision.problems]   # (compiled as asked)
    lines.append(f"added: {shlex.join(decision.options) or '(nothing)'}")
    if decision.flags is not None:
        lines += [f"left out: {s}" for s in decision.flags.skipped]
    return lines


def explain(argv: list[str], real: str | None, acf: str | None, environ: Mapping[str, str],
            cwd: str, role: str = PLAIN) -> int:
    """The drop-in ptxas's decision for this call, in words on stdout; exit status 0."""
    if acf is None:
        print(f"{_real_line(real, environ, 'none found', role)}\nno ACF ({ACF_ENV} unset, no "
              f"nvcc-evo.acf at or above {cwd}): every call runs the real program as asked")
        return 0
    acf_path = Path(acf)
    environ, real, problem = kernels.with_settings(acf_path, environ, real, role)
    named = f" ({ACF_ENV})" if environ.get(ACF_ENV) else " (found at or above the working folder)"
    lines = [_real_line(real, environ, problem, role), f"ACF: {acf_path}{named}"]
    refused = kernels.refused_acf(acf_path, environ)
    if refused:
        lines.append(f"{refused}: every call runs the real program as asked")
    elif real is not None:
        try:
            decision = kernels.decide(argv, real, acf_path, environ, cwd)
            lines += _served_lines(decision)
            lines.append("runs: " + shlex.join([decision.program, *decision.options, *argv]))
        except AcfError as error:
            lines += ["the ACF has errors; every call runs the real program as asked:", str(error)]
        digest = kernels.version_digest(acf_path, environ)
        lines.append(f"--version answers the real {role}'s lines, then "
                     f"'{kernels.VERSION_LINE.format(digest)}'"
                     if digest else f"--version answers the real {role}'s own (no kernel unit)")
    print("\n".join(lines))
    return 0
