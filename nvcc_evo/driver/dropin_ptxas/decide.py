"""The drop-in ptxas's decision (nvcc_evo.driver.dropin_ptxas.shim runs first): for
a PTX whose `.entry` names a kernel unit of the ACF names
(nvcc_evo.acf.kernelname), that unit's entry for the `--gpu-name` target
adds its ptxas knobs to the real ptxas's command line.

- the target: `target sm_90a` serves `--gpu-name=sm_90a`; where the unit
  has none, `target sm_90` does (the same registers and optimiser; `a`
  only adds instructions). The user's own options win (Triton's
  `--fmad=false`, `-g`, `--opt-level 0`), as in nvcc-evo builds;
- an option the real ptxas does not take silently is left out, with the
  reason (each option tried once on a probe PTX, cached per ptxas binary);
- Triton keys its cubin cache on `ptxas --version`: where the ACF has kernel
  units the answer is the real ptxas's followed by one line, a digest of
  what can change a kernel's code (the kernel units, the files they name, the
  settings a build reads), so that a changed entry is never answered by a
  cubin of the old one;
- each tuned compile is recorded (a copy of its PTX under the ACF's
  `.nvcc-evo/kernels/`, a compile-database record for --retune) and logged
  (NVCC_EVO_LOG, the line --retune's command backend reads);
- anything else, and anything that goes wrong here, runs the real ptxas
  exactly as asked: its stdout, stderr, exit code and files are its own.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf import kernelname
from nvcc_evo.system.say import visible
from nvcc_evo.driver.common import (BLACKWELL_PTXAS as BLACKWELL, GPU_ENV, LOG_ENV, PHASE_ENV,
                                    PLAIN_PTXAS as PLAIN,
                                     REAL_PTXAS_BLACKWELL_ENV, REAL_PTXAS_ENV,
                                    REAL_PTXAS_OF as REAL_ENV, STALE_ENV,
                                     append_log, find_settings_file, replace_file, stale_problem)
from nvcc_evo.driver.dropin_ptxas.untouched import entries as ptx_entries, split_argv

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.match.index import UnitEntry
    from nvcc_evo.driver.match.units import Match

KERNELS_FOLDER = "kernels"
VERSION_LINE = "nvcc-evo-ptxas: kernel entries {}"
DIGEST_ENV = ("NVCC_EVO_GPU", "NVCC_EVO_STALE", "NVCC_EVO_PTXAS", REAL_PTXAS_ENV,
              REAL_PTXAS_BLACKWELL_ENV)
SETTING = {PLAIN: "real-ptxas", BLACKWELL: "real-ptxas-blackwell"}     # the project setting naming
                                                                       # each real program


class PtxasCall(NamedTuple):
    """What a ptxas command line says, as far as kernel units care."""

    argv: tuple[str, ...]
    arch: str | None
    inputs: tuple[str, ...]
    tokens: tuple[str, ...]           # the options, `--opt-level N` read as `-ON`
    kept: tuple[str, ...]             # the options a candidate's compile passes on (-Xptxas each)


def read_call(argv: list[str]) -> PtxasCall:
    arch, inputs, tokens, kept = split_argv(argv)
    return PtxasCall(tuple(argv), arch, tuple(inputs), tuple(tokens), tuple(kept))


class Served(NamedTuple):
    """One PTX and the kernel unit entry that serves it."""

    ptx: str
    entries: tuple[str, ...]
    digest: str                       # sha256 hex of the PTX
    match: Match | None               # None: no kernel unit names it
    why: str = ""                     # why nothing applies, when so


def kernel_units(acf_path: Path) -> tuple[UnitEntry, ...]:
    """The ACF's kernel units, from its cached index where there is one."""
    from nvcc_evo.driver.match.index import load_units
    from nvcc_evo.system.files import cache_folder
    try:
        folder: Path | None = Path(cache_folder())
    except OSError:                     # (a link in its place, a read-only home: no cache)
        folder = None
    return tuple(u for u in load_units(acf_path, folder) if u.kind == "kernel")


def serve(call: PtxasCall, units: tuple[UnitEntry, ...], acf_path: Path,
          environ: Mapping[str, str], cwd: str) -> Served:
    """The PTX of the call and the kernel unit's entry that serves it (or why none does)."""
    if len(call.inputs) != 1 or not call.inputs[0].endswith(".ptx"):
        return Served("", (), "", None, f"{len(call.inputs)} inputs, not one PTX: passed through "
                                        "untouched")
    name = call.inputs[0]
    try:
        data = Path(cwd, name).read_bytes()
    except OSError as error:
        return Served(name, (), "", None, f"cannot read {name} ({error.strerror}): ptxas says why")
    import hashlib
    entries = ptx_entries(data)
    digest = hashlib.sha256(data).hexdigest()
    unit = next((u for u in units if any(kernelname.matches(g, entries, digest) for g in u.globs)),
                None)
    if unit is None:
        named = ", ".join(entries) or "it: it has no .entry (no kernel)"
        return Served(name, entries, digest, None, f"no kernel unit of {acf_path.name} names "
                                                   f"{named}")
    if call.arch is None:
        return Served(name, entries, digest, None, "no --gpu-name: ptxas's default target is tuned "
                                                   "by no entry")
    from nvcc_evo.driver.match.stale import fingerprint, staleness
    from nvcc_evo.driver.match.units import Match, choose_target
    copy = keep_ptx(acf_path, entries, digest, data)
    unit_fingerprint = fingerprint(copy, None, "", unit.files, acf_path.parent)
    target, note = choose_target(unit, call.arch, environ.get(GPU_ENV))
    # (the toolkit that tuned it is not compared: the ptxas that runs is the program's own)
    stale = staleness(target, unit_fingerprint, (target.toolkit or "") if target else "",
                      unit.space_digest,
                      unit.tune_digest)
    return Served(name, entries, digest,
                  Match(str(copy), call.arch, unit, target, unit_fingerprint, stale, note))


def keep_ptx(acf_path: Path, entries: tuple[str, ...], digest: str, data: bytes) -> Path:
    """The PTX kept under the ACF's folder (the compile database's input for
    --retune), named for its first entry and digest: the same PTX, the same file."""
    folder = acf_path.parent / ".nvcc-evo" / KERNELS_FOLDER
    path = folder / f"{entries[0] if entries else 'ptx'}-{digest[:16]}.ptx"
    if not path.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            replace_file(path, data)
        except OSError:
            pass
    return path


class PtxasDecision(NamedTuple):
    program: str                      # the ptxas that runs
    options: tuple[str, ...]          # added before the call's own
    served: Served | None
    flags: FlagPlan | None = None     # nvcc spelling: -Xptxas OPTION
    problems: tuple[str, ...] = ()
    real_note: str = ""


def decide(argv: list[str], real: str, acf_path: Path, environ: Mapping[str, str],
           cwd: str) -> PtxasDecision:
    """What this ptxas call runs: the real program, with a kernel unit's knobs where one serves
    it."""
    call = read_call(argv)
    units = kernel_units(acf_path)
    served = serve(call, units, acf_path, environ, cwd)
    if served.match is None:
        return PtxasDecision(real, (), served)
    from nvcc_evo.driver.cmdline.compileplan import ptx_step
    from nvcc_evo.driver.cmdline.flags import ptxas_values
    wrong = stale_problem(environ)        # (the verbs refuse it: the same words)
    if wrong:
        return PtxasDecision(real, (), served, problems=(f"{wrong}; compiling exactly as asked",))
    settings = served.match.settings(environ.get(STALE_ENV) or "keep")
    flag_plan, program = ptx_step(settings, call.tokens, real, served.match.arch, environ,
                                  str(acf_path.parent))
    return PtxasDecision(program, ptxas_values(flag_plan.flags), served, flag_plan)


def version_digest(acf_path: Path, environ: Mapping[str, str]) -> str:
    """What can change a kernel's code through this ACF, as one digest."""
    import hashlib
    import json
    from nvcc_evo.errors import AcfError
    digest = hashlib.sha256(b"kernel-entries-1\0")
    try:
        units = kernel_units(acf_path)
    except (AcfError, OSError) as error:          # built untuned, and said so: its own answer
        digest.update(b"unusable\0" + str(error).encode())
        return digest.hexdigest()[:16]
    for unit in units:
        digest.update(json.dumps([unit.globs, unit.pins,
                                  [(t.arch, t.gpu, t.settings) for t in unit.targets]],
                                 default=str).encode())
        for name in unit.files:
            try:
                digest.update(name.encode() + b"\0" + (acf_path.parent / name).read_bytes())
            except OSError:
                digest.update(name.encode() + b"\0(unreadable)")
    for name in DIGEST_ENV:
        digest.update(f"{name}={environ.get(name, '')}\0".encode())
    return digest.hexdigest()[:16] if units else ""


def answer_version(real: str, acf_path: Path, environ: Mapping[str, str]) -> int:
    """`ptxas --version`: the real answer, and the digest line where kernel units may apply."""
    import subprocess
    done = subprocess.run([real, *sys.argv[1:]], capture_output=True)
    sys.stderr.buffer.write(done.stderr)
    sys.stdout.buffer.write(done.stdout)
    line = version_digest(acf_path, environ) if done.returncode == 0 else ""
    if line:
        sys.stdout.write(VERSION_LINE.format(line) + "\n")
    sys.stdout.flush()
    return done.returncode


def record(decision: PtxasDecision, call: PtxasCall, acf_path: Path,
           environ: Mapping[str, str]) -> None:
    """The compile database's record of a tuned compile (for --retune: which
    kernels a run compiled, and how), and the log line."""
    import time
    from nvcc_evo.driver import compiledb
    match = decision.served.match if decision.served is not None else None
    # (a tuned compile)
    assert match is not None and match.unit is not None and decision.flags is not None
    argv = tuple(a for token in call.kept for a in ("-Xptxas", token)) + (match.input,)
    compiledb.record(acf_path, compiledb.CompileRecord(
        argv, str(acf_path.parent), compiledb.relevant_env(environ), decision.program,
        _version(decision.program), match.input, "", match.unit.position, match.unit.globs,
        match.arch,
        str(match.target) if match.target else None, match.fingerprint,
        tuple(map(str, match.stale)), decision.flags.flags, time.time()),
        keep_existing=PHASE_ENV in environ)


def _version(program: str) -> str:
    from nvcc_evo.driver.cmdline.ptxas import probe
    try:
        return probe(program).version
    except OSError:
        return ""


def log(decision: PtxasDecision, argv: list[str], acf_path: Path, environ: Mapping[str, str],
        cwd: str, role: str = PLAIN) -> None:
    """The log line: the call as the program it stands in for (`role`) was
    asked, the program that ran, what was added and why not more."""
    path = environ.get(LOG_ENV)
    if not path:
        return
    served, flags = decision.served, decision.flags
    units = [(served.entries[0] if served.entries else served.ptx, served.match.arch,
              served.match.unit.globs)] \
        if served is not None and served.match is not None and served.match.unit is not None else []
    append_log(path, cwd, [role, *argv], str(acf_path), flags.flags if flags else (),
               served.why if served else "",
               [str(s) for s in (flags.skipped if flags else ())],
               decision.problems, units=units, program=decision.program)


def launch(argv: list[str], real: str | None, acf: str, environ: Mapping[str, str], cwd: str,
           role: str = PLAIN) -> int:
    """Run the real program (`role`: ptxas or ptxas-blackwell) for this call,
    with a kernel unit's knobs where one applies; our own trouble never fails
    a compile ptxas would pass."""
    acf_path = Path(acf)
    environ, real, problem = with_settings(acf_path, environ, real, role)
    if real is None:
        print(visible(f"nvcc-evo-{role}: error: {problem}"), file=sys.stderr)
        return 3
    refused = refused_acf(acf_path, environ)
    if refused:
        print(visible(f"nvcc-evo-{role}: warning: {refused}; compiling without tuned flags"),
              file=sys.stderr)
        os.execv(real, [real, *argv])
    if "--version" in argv:
        return answer_version(real, acf_path, environ)
    decision = _decided(argv, real, acf_path, environ, cwd, role)
    os.execv(decision.program, [decision.program, *decision.options, *argv])


def refused_acf(acf_path: Path, environ: Mapping[str, str]) -> str:
    """Why the ACF is not used ("" when it is): found by walking up and not
    trusted (nvcc_evo.system.trust, as the drop-in nvcc's rule), or unreadable."""
    from nvcc_evo.driver.match.find import acf_problem, untrusted_acf
    return untrusted_acf(acf_path, environ) or acf_problem(acf_path, environ)


def _decided(argv: list[str], real: str, acf_path: Path, environ: Mapping[str, str], cwd: str,
             role: str) -> PtxasDecision:
    from nvcc_evo.errors import AcfError
    try:
        decision = decide(argv, real, acf_path, environ, cwd)
        if decision.flags is not None:          # a tuned compile (served, and planned)
            try:
                record(decision, read_call(argv), acf_path, environ)
            except OSError as error:
                decision = decision._replace(problems=("cannot record this compile for --retune "
                                                       f"({error})",))
    except AcfError as error:
        first = error.diagnostics[0]
        decision = PtxasDecision(real, (), None, problems=("the ACF has errors; compiling without "
                                                      f"tuned flags: {first.location}: "
                                                      f"{first.message}",))
    except OSError as error:           # a program or file not what it should be (a ptxas that tells
                                       # no release)
        decision = PtxasDecision(real, (), None, problems=(f"{error}; compiling exactly as asked",))
    except Exception as error:         # never fail a compile that ptxas would pass
        decision = PtxasDecision(real, (), None, problems=(f"internal error ({error!r}); compiling "
                                                           "exactly as asked",))
    for problem in decision.problems:
        print(visible(f"nvcc-evo-{role}: warning: {problem}"), file=sys.stderr)
    log(decision, argv, acf_path, environ, cwd, role)
    return decision


def with_settings(acf_path: Path, environ: Mapping[str, str], real: str | None,
                  role: str = PLAIN) -> tuple[Mapping[str, str], str | None, str]:
    """The project settings beside the ACF fill the environment (their
    `real-ptxas` where NVCC_EVO_REAL_PTXAS is unset; `real-ptxas-blackwell`
    for ptxas-blackwell); (environ, the real program, why none)."""
    problem = "" if real else f"no real {role} found: set {REAL_ENV[role]}, CUDA_HOME or PATH"
    if find_settings_file(acf_path) is None:
        return environ, real, problem
    from nvcc_evo.driver import settings as project
    try:
        found = project.load(acf_path, environ)
    except (project.SettingsError, OSError) as error:
        print(visible(f"nvcc-evo-{role}: warning: the project settings cannot be used: "
                      f"{str(error).splitlines()[0]}"),
              file=sys.stderr)
        return environ, real, problem
    chosen = found.value(SETTING[role])
    if chosen.value is not None and not environ.get(REAL_ENV[role]):
        real, problem = str(chosen.value), ""
    return found.for_build(), real, problem
