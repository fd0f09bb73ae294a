"""nvcc driver stage: compile one candidate exactly as the build does.

A CompileJob is the build's own command line (from the compile database, or
`-c SOURCE` for a unit never built through the wrapper) with its outputs, its
dependency files and its architectures replaced: the candidate is built for
one SASS target into a private folder (`--keep`), and the cubin ptxas wrote
there is what gets measured. A failed or hung compile is a result, not an
exception.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from nvcc_evo.driver.nvcc_options import rebuild_argv
from nvcc_evo.system.leftovers import kill_running, private_folder, run_in_group

# Options of the build's command line that a candidate compile replaces.
REPLACED = {"--output-file", "--generate-code", "--gpu-architecture", "--gpu-code",
            "--generate-dependencies", "--generate-nonsystem-dependencies",
            "--generate-dependencies-with-compile", "--generate-nonsystem-dependencies-with-compile",
            "--dependency-output", "--dependency-target-name", "--generate-dependency-targets",
            "--keep", "--keep-dir", "--save-temps", "--dryrun", "--link", "--lib", "--run",
            "--preprocess", "--cuda", "--ptx", "--cubin", "--fatbin", "--device-link"}
TOOL_NOTE = ".note.nv.tkinfo"     # the section where ptxas writes its own command line


@dataclass(frozen=True)
class CompileJob:
    nvcc: str
    argv: tuple[str, ...]         # the build's arguments
    cwd: str
    source: str                   # the unit's input as the build names it
    arch: str                     # sm_XX
    flags: tuple[str, ...] = ()   # the candidate's additions
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = 300.0
    ptxas: str | None = None      # a ptxas other than nvcc's own for the ptxas step (nvcc_evo.driver.ptxas)

    def command(self, work: str) -> list[str]:
        base = rebuild_argv(list(self.argv), REPLACED, self.source)
        if not any(a in ("-c", "--compile", "-dc", "--device-c") for a in base):
            base.append("-c")
        compute = self.arch.replace("sm_", "compute_")
        return [self.nvcc, *base, f"-gencode=arch={compute},code={self.arch}", "-Xptxas", "-v",
                "--keep", "--keep-dir", work, "-o", os.path.join(work, "candidate.o"), *self.flags]


@dataclass(frozen=True)
class CompileResult:
    status: str                   # ok, compile-error, timeout, no-cubin
    seconds: float
    stderr: str
    cubin: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def compile_candidate(job: CompileJob) -> CompileResult:
    """One candidate compiled in a private folder (named for this process,
    removed after; a later retune sweeps it if this one is killed), in a
    process group of its own that is killed at the timeout, on an interrupt
    and with this process."""
    work = private_folder("cand")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}
    env.update(dict(job.env))
    env["TMPDIR"] = work          # nvcc's own temporary files too: a killed compile leaves them
    started = time.monotonic()
    try:
        command = job.command(work)
        if job.ptxas:
            split = _with_program(job, command, work, env)
            if isinstance(split, str):
                return CompileResult("compile-error", time.monotonic() - started, split)
            command, env = split
        done = run_in_group(command, cwd=job.cwd, env=env, timeout=job.timeout)
        seconds = time.monotonic() - started
        if done.returncode is None:
            return CompileResult("timeout", seconds, f"compile exceeded {job.timeout:.0f} s\n{done.stderr}")
        if done.returncode != 0:
            return CompileResult("compile-error", seconds, done.stderr)
        # One architecture: nvcc names it SOURCE.cubin; several: SOURCE.sm_XX.cubin.
        cubins = sorted(Path(work).glob(f"*.{job.arch}.cubin")) or sorted(Path(work).glob("*.cubin"))
        if not cubins:
            return CompileResult("no-cubin", seconds, done.stderr + "\nno cubin for " + job.arch)
        return CompileResult("ok", seconds, done.stderr, cubins[0].read_bytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _with_program(job: CompileJob, command: list[str], work: str, env: dict) -> tuple[list[str], dict] | str:
    """The compile as nvcc's own steps with `job.ptxas` running the ptxas
    step, as a split build runs it (nvcc_evo.driver.split): a script in
    `work`, for /bin/sh; else why not. (nvcc refusing the call leaves it as
    it was: it fails as nvcc would, saying why.)"""
    from nvcc_evo.driver.split import SCRIPT_NAME, SHELL, Steps, read_steps, script, with_options
    asked = run_in_group([*command, "--dryrun"], cwd=job.cwd, env=env, timeout=job.timeout)
    if asked.returncode != 0:
        return command, env
    key = (job.source, job.arch)
    steps = with_options(read_steps(asked.stderr), {key: ()}, work, (job.source,), {key: job.ptxas})
    if not isinstance(steps, Steps):
        return f"{job.ptxas} cannot run this compile's ptxas step: {steps}"
    path = os.path.join(work, SCRIPT_NAME)
    with open(path, "w") as out:
        out.write(script(steps, None))
    return [SHELL, path], {**env, **steps.variables}


def compile_each(jobs: list[CompileJob], workers: int | None = None):
    """Candidates compile in parallel on the CPU cores; yields (index, result)
    as each finishes, so the caller can store it before the next one. An
    interrupt kills the compiles still running (they are in groups of their
    own, which a Ctrl-C at the terminal does not reach)."""
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
    try:
        futures = {pool.submit(compile_candidate, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        kill_running()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- cubin (ELF)
def cubin_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of an ELF64 cubin."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_offset = headers[names_index][4]
    sections = {}
    for name_at, kind, _, _, offset, size, *_ in headers:
        name = data[names_offset + name_at:data.index(b"\0", names_offset + name_at)].decode()
        sections[name] = b"" if kind == 8 else data[offset:offset + size]   # 8: NOBITS
    return sections


def sass_hash(cubin: bytes) -> str:
    """Identity of the machine code, leaving out ptxas's note of its own options."""
    digest = hashlib.sha256()
    for name, content in sorted(cubin_sections(cubin).items()):
        if name != TOOL_NOTE:
            digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:32]


def instruction_count(cubin: bytes) -> int:
    """SASS instructions: every instruction is 16 bytes on sm_70 and later."""
    return sum(len(body) for name, body in cubin_sections(cubin).items() if name.startswith(".text.")) // 16
