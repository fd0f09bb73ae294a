"""Which ptxas runs a ptxas step, and what it makes of a controls file.

The one place that knows how a ptxas other than the toolkit's is chosen and
invoked: the build's split steps (nvcc_evo.driver.cmdline.split), a retune's
candidates (nvcc_evo.cubin.compile) and the probes here all use it.

A build never runs a program an ACF names. The ACF chooses a ptxas release
(`ptxas.version = "13.3"`); the programs it chooses from are the toolkit's
own ptxas and those the user lists in NVCC_EVO_PTXAS (paths to ptxas
binaries, separated like PATH). Each is asked its release once (`ptxas
--version`), cached by real path, size and modification time, as the
toolkit's probe is. A controls file (`ptxas.controls`, CUDA 13.3+'s
`--apply-controls`) is tried on a probe PTX once per (ptxas, architecture,
file content): a build skips a file its ptxas rejects, with ptxas's message.
Whether the driver loads what a ptxas makes is asked of the driver itself
(a probe cubin loaded through libcuda), where there is one.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf import knobs
from nvcc_evo.driver.common import BROKEN_FILE, replace_file

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.toolkit import Toolkit

PTXAS_ENV = "NVCC_EVO_PTXAS"
CACHE_VERSION = 1
# The smallest kernel: any ptxas of CUDA 13 compiles it for any of its targets.
PROBE_PTX = (".version 8.0\n.target sm_75\n.address_size 64\n"
             ".visible .entry nvcc_evo_probe()\n{\n\tret;\n}\n")
RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")
STEP = re.compile(r"ptxas(?=\s)")
# A controls verdict is cached with this where ptxas named the file, so that it names the file asked
# about; CONTROLS_FORMAT 2: the verdicts cached before held the path of the project that asked
# first.
CONTROLS_FILE = "\0controls file\0"
CONTROLS_FORMAT = 2


class Ptxas(NamedTuple):
    path: str
    version: str          # "13.3.73"

    @property
    def release(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def matches(self, wanted: str) -> bool:
        return wanted in (self.version, self.release)

    def __str__(self) -> str:
        return f"ptxas {self.version} ({self.path})"


class NoPtxas(Exception):
    """The ptxas asked for is not among those the user lists."""


def toolkit_ptxas(toolkit: Toolkit | Program) -> Ptxas:
    return Ptxas(toolkit.ptxas, toolkit.version)


def _first_line(code: int, out: str) -> str:
    """What a probe's ptxas said: "" for a clean run, else its first line or its exit code."""
    if code == 0 and not out:
        return ""
    return out.splitlines()[0] if out else f"ptxas exit {code}"


def _cache(kind: str, key: str) -> Path:
    from nvcc_evo.system.files import cache_folder      # (the toolkit's, without its module:
                                                        # a ptxas call's)
    digest = hashlib.sha256(f"{CACHE_VERSION}:{key}".encode()).hexdigest()[:20]
    return Path(cache_folder()) / f"{kind}-{digest}.json"


def _identity(path: str) -> str:
    real = os.path.realpath(path)
    stat = os.stat(real)
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}"


def _cached(kind: str, key: str, compute: Callable[[], str]) -> str:
    """compute() once per key, its JSON answer kept in the user's cache folder; a file of another
    shape (another key, an answer that is no string) is a miss."""
    try:
        kept = json.loads(_cache(kind, key).read_text())
    except BROKEN_FILE:
        kept = None
    if isinstance(kept, dict) and kept.get("key") == key and isinstance(kept.get("answer"), str):
        return kept["answer"]
    answer = compute()
    try:
        replace_file(_cache(kind, key), json.dumps({"key": key, "answer": answer}))
    except OSError:
        pass
    return answer


def run(argv: list[str], cwd: str, timeout: float = 120) -> tuple[int, str]:
    """One ptxas run (or any tool's), its exit status and what it printed."""
    import subprocess
    from nvcc_evo.system.programs import note
    note(argv[0], "ptxas probe")
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL,
                              timeout=timeout)
    except (OSError, subprocess.SubprocessError) as error:
        return 127, str(error)
    return done.returncode, (done.stdout + done.stderr).strip()


def probe(path: str) -> Ptxas:
    """The release of the ptxas at `path` (cached); OSError when it is none."""
    def ask() -> str:
        code, out = run([path, "--version"], ".")
        found = RELEASE.search(out)
        return found.group(2) if code == 0 and found else ""
    version = _cached("ptxas", _identity(path), ask)
    if not version:
        raise OSError(f"{path} is not a ptxas that tells its release (`ptxas --version`)")
    return Ptxas(os.path.realpath(path), version)


def listed(environ: Mapping[str, str]) -> list[str]:
    """The ptxas binaries NVCC_EVO_PTXAS lists."""
    return [p for p in environ.get(PTXAS_ENV, "").split(os.pathsep) if p]


def choose(wanted: str, toolkit: Toolkit | Program, environ: Mapping[str, str]) -> Ptxas:
    """The ptxas of release `wanted` ("13.3" or "13.3.73"; `toolkit`: the
    toolkit's own): the toolkit's when it is that release, else the first of
    NVCC_EVO_PTXAS that is. NoPtxas says what there is."""
    own = toolkit_ptxas(toolkit)
    if wanted == knobs.TOOLKIT_TOOL or own.matches(wanted):
        return own
    seen = []
    for path in listed(environ):
        try:
            found = probe(path)
        except OSError as error:
            seen.append(f"{path}: {error}")
            continue
        if found.matches(wanted):
            return found
        seen.append(str(found))
    there = "; ".join(seen) if seen else f"{PTXAS_ENV} lists none"
    raise NoPtxas(f"no ptxas {wanted}: the toolkit's is {own.version}, and {there} (list ptxas "
                  f"binaries in {PTXAS_ENV}, separated by '{os.pathsep}', or in the project "
                  "setting `ptxas`)")


def file_digest(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as data:
        return hashlib.sha256(data.read()).hexdigest()


def _try_probe(argv_tail: list[str], ptxas: Ptxas, arch: str) -> tuple[int, str, bytes]:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="nvcc-evo-ptxas-") as work:
        Path(work, "probe.ptx").write_text(PROBE_PTX)
        code, out = run([ptxas.path, f"-arch={arch}", *argv_tail, "probe.ptx", "-o", "probe.cubin"],
                        work)
        cubin = Path(work, "probe.cubin")
        return code, out, cubin.read_bytes() if code == 0 and cubin.is_file() else b""


def controls_problem(ptxas: Ptxas, arch: str, path: str) -> str:
    """Why `ptxas` does not apply the controls file at `path` for `arch`
    (its first line of complaint); "" when it does. Cached by the file's
    content, so an edited file is tried again; the cached words hold no path
    (another project's file of the same content may have asked first): the
    complaint names `path`."""
    try:
        digest = file_digest(path)
    except OSError as error:
        return f"cannot read it ({error.strerror or error})"

    def ask() -> str:
        code, out, _ = _try_probe([f"--apply-controls={path}"], ptxas, arch)
        said = _first_line(code, out)
        for spelling in sorted({path, os.path.abspath(path), os.path.realpath(path)}, key=len,
                               reverse=True):
            said = said.replace(spelling, CONTROLS_FILE)
        return said
    answer = _cached("controls", f"{CONTROLS_FORMAT}:{_identity(ptxas.path)}:{arch}:{digest}", ask)
    return answer.replace(CONTROLS_FILE, path)


def driver_problem(ptxas: Ptxas, arch: str) -> str | None:
    """Why the driver here cannot load a cubin this ptxas makes for `arch`
    ("" when it loads it; None when there is no driver or GPU to ask)."""
    code, out, cubin = _try_probe([], ptxas, arch)
    if code != 0:
        said = out.splitlines()[0] if out else f"exit {code}"
        return f"{ptxas} cannot compile for {arch}: {said}"
    from nvcc_evo.driver.cmdline.cuda_driver import load_problem
    problem = load_problem(cubin)
    if problem:
        return f"the driver here cannot load what {ptxas} makes for {arch}: {problem}"
    return problem


def step_command(command: str, program: str | None, options: tuple[str, ...]) -> str:
    """A ptxas step of nvcc's (`ptxas -arch=sm_90 ... in.ptx -o out.cubin`),
    run by `program` (None: nvcc's own ptxas) with `options` first."""
    body = command[len("ptxas"):]
    added = "".join(" " + shlex.quote(token) for token in options)
    return (shlex.quote(program) if program else "ptxas") + added + body


def settle(plan: FlagPlan, toolkit: Toolkit | Program, environ: Mapping[str, str], arch: str,
           acf_dir: str | None) -> tuple[str | None, FlagPlan]:
    """One ptxas step's knobs (a FlagPlan) made sure: the ptxas release it
    asks for (else the toolkit's, and why), its controls file tried on that
    ptxas (else left out, with ptxas's message). Returns (the program, None
    for nvcc's own; the FlagPlan with what was left out among `skipped`)."""
    from nvcc_evo.driver.cmdline.flags import FlagPlan, Skipped, flag_text
    applied, skipped, flags = dict(plan.applied), list(plan.skipped), list(plan.flags)
    chosen, program = toolkit_ptxas(toolkit), None
    wanted = applied.get("ptxas.version")
    if wanted is not None:
        try:
            chosen = choose(str(wanted), toolkit, environ)
            program = None if chosen.path == os.path.realpath(toolkit.ptxas) else chosen.path
        except NoPtxas as missing:
            del applied["ptxas.version"]
            skipped.append(Skipped("ptxas.version", f"{missing}; nvcc's own ptxas runs the step"))
    controls = applied.get("ptxas.controls")
    if controls is not None:
        problem = controls_problem(chosen, arch, os.path.join(acf_dir or "", str(controls)))
        if problem:
            text = flag_text("ptxas.controls", controls, acf_dir)
            at = next(i for i in range(len(flags)) if flags[i:i + len(text)] == text)
            del flags[at:at + len(text)], applied["ptxas.controls"]
            skipped.append(Skipped("ptxas.controls", f"{chosen} does not apply it: {problem}"))
    kept = tuple((name, value) for name, value in plan.applied if name in applied)
    return program, FlagPlan(tuple(flags), kept, tuple(skipped))


class Program(NamedTuple):
    """A ptxas standing in for a toolkit's (what `settle` and `choose` read):
    the real ptxas nvcc-evo-ptxas runs for a program such as Triton."""

    ptxas: str
    version: str


def option_problem(ptxas: Ptxas, arch: str, option: str) -> str:
    """Why `ptxas` does not take `option` silently for `arch` (its first line
    of complaint); "" when it does. Tried on the probe PTX once per binary."""
    def ask() -> str:
        code, out, _ = _try_probe([option], ptxas, arch)
        return _first_line(code, out)
    return _cached("option", f"{_identity(ptxas.path)}:{arch}:{option}", ask)


def accepted(plan: FlagPlan, real: str, arch: str, environ: Mapping[str, str],
             acf_dir: str) -> tuple[str, FlagPlan]:
    """A kernel unit's knobs (a FlagPlan) for the ptxas step of a program
    that runs ptxas itself: the program (`ptxas.version` chosen among `real`
    and NVCC_EVO_PTXAS's, a controls file tried), and only the options that
    ptxas takes silently (each other one skipped, with its complaint)."""
    from nvcc_evo.driver.cmdline.flags import FlagPlan, Skipped, flag_text, ptxas_values
    own = probe(real)
    program = real
    if knobs.STEP_ONLY & {name for name, _ in plan.applied}:
        chosen, plan = settle(plan, Program(real, own.version), environ, arch, acf_dir)
        program = chosen or real
    ptxas = own if program == real else probe(program)
    flags, applied, skipped = [], [], list(plan.skipped)
    for name, value in plan.applied:
        text = flag_text(name, value, acf_dir)
        options = [o for o in ptxas_values(tuple(text)) if not o.startswith("--apply-controls")]
        problem = next((p for p in (option_problem(ptxas, arch, o) for o in options) if p), "")
        if problem:
            said = f"{ptxas} does not take {' '.join(options)} silently: {problem}"
            skipped.append(Skipped(name, said))
            continue
        flags += text
        applied.append((name, value))
    return program, FlagPlan(tuple(flags), tuple(applied), tuple(skipped))
