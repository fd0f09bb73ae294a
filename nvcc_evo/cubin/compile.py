"""nvcc driver stage: compile one candidate exactly as the build does.

A CompileJob is the build's own command line (from the compile database, or
`-c SOURCE` for a unit never built through the wrapper) with its outputs, its
dependency files and its architectures replaced: the candidate is built for
one SASS target into a private folder (`--keep`), and the cubin ptxas wrote
there is what gets measured. A failed or hung compile is a result, not an
exception.
"""
from __future__ import annotations

import os
import re
import shlex
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, NamedTuple, Protocol

from nvcc_evo.acf import model
from nvcc_evo.driver.cmdline.nvcc_options import rebuild_argv
from nvcc_evo.driver.cmdline.split import (PTXAS_STEP, SCRIPT_NAME, SHELL, Steps, read_steps,
                                           script, with_options)
from nvcc_evo.system.leftovers import (OWNER, Finished, kill_running, private_folder,
                                       remove_private, run_in_group)
from nvcc_evo.status import Status

# Options of the build's command line that a candidate compile replaces, or leaves out: what the
# build writes besides its output (a record's `--time ../../.bashrc` would append there) and what it
# runs after it.
REPLACED = {"--output-file", "--generate-code", "--gpu-architecture", "--gpu-code",
            "--generate-dependencies", "--generate-nonsystem-dependencies",
            "--generate-dependencies-with-compile",
            "--generate-nonsystem-dependencies-with-compile",
            "--dependency-output", "--dependency-target-name", "--generate-dependency-targets",
            "--keep", "--keep-dir", "--save-temps", "--dryrun", "--link", "--lib", "--run",
            "--run-args", "--preprocess", "--cuda", "--ptx", "--cubin", "--fatbin", "--device-link",
            "--output-directory", "--time", "--fdevice-time-trace"}


# ptxas's words for a kernel whose static shared memory is over the architecture's limit (bytes in
# decimal or hex): read here, where its message arrives, into a SharedOverflow.
TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+|\d+) bytes, "
                             r"(0x[0-9a-fA-F]+|\d+) max\)")


class SharedOverflow(NamedTuple):
    """ptxas refused the candidate for its static shared memory, as a fact: `used` bytes, `most`
    allowed; str() says it for people."""

    used: int
    most: int

    def __str__(self) -> str:
        return f"{self.used} bytes of static shared memory, ptxas's limit {self.most}"


def overflow_of(stderr: str) -> SharedOverflow | None:
    """ptxas's message of static shared memory over its limit as a SharedOverflow (None: not
    that)."""
    found = TOO_MUCH_SHARED.search(stderr)
    return SharedOverflow(int(found.group(1), 0), int(found.group(2), 0)) if found else None


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
    ptxas: str | None = None      # a ptxas other than nvcc's own for the ptxas step
                                  # (nvcc_evo.driver.cmdline.ptxas)

    def command(self, work: str) -> list[str]:
        base = rebuild_argv(list(self.argv), REPLACED, self.source, self.cwd)
        if self.source.endswith(".ptx"):
            # A kernel unit's PTX (nvcc_evo.driver.dropin_ptxas.decide): ptxas alone, as Triton
            # runs it.
            return [self.nvcc, *base, "-cubin", f"-arch={self.arch}", "-Xptxas", "-v",
                    "--keep", "--keep-dir", work, "-o", os.path.join(work, "candidate.cubin"),
                    *self.flags]
        if not any(a in ("-c", "--compile", "-dc", "--device-c") for a in base):
            base.append("-c")
        compute = self.arch.replace("sm_", "compute_")
        return [self.nvcc, *base, f"-gencode=arch={compute},code={self.arch}", "-Xptxas", "-v",
                "--keep", "--keep-dir", work, "-o", os.path.join(work, "candidate.o"), *self.flags]


class SearchTask(Protocol):
    """What the layers below the retune read of a search's task (retune.scope.tasks.Task): its
    unit, the architecture and the recorded compile its candidates are built from; its `str`
    names it. A backend's factory (execute.measurers) and a search's comparison
    (kerneldiff.compare) both take it."""

    @property
    def unit(self) -> model.Unit: ...
    @property
    def arch(self) -> str: ...
    @property
    def job(self) -> CompileJob: ...


@dataclass(frozen=True)
class CompileResult:
    status: Status
    seconds: float
    stderr: str
    cubin: bytes = b""
    ptx: bytes = field(default=b"", repr=False)     # the PTX ptxas compiled (PtxCache keeps it)
    module_id: str = ""           # nvcc's module id of that PTX (sass_hash)
    overflow: SharedOverflow | None = None   # compile-error: ptxas refused its static shared memory

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


def _environment(job: CompileJob, work: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}
    env.update(dict(job.env))
    env["TMPDIR"] = work          # nvcc's own temporary files too: a killed compile leaves them
    return env


def _finished(job: CompileJob, done: Finished, seconds: float, work: str,
              what: str = "compile") -> CompileResult:
    if done.returncode is None:
        return CompileResult(Status.TIMEOUT, seconds, f"{what} exceeded {job.timeout:.0f} "
                                                      f"s\n{done.stderr}")
    if done.returncode != 0:
        kept = _front_end_ptx(work, done.stderr)
        return CompileResult(Status.COMPILE_ERROR, seconds, done.stderr, ptx=kept,
                             module_id=_module_id(work) if kept else "",
                             overflow=overflow_of(done.stderr))
    # One architecture: nvcc names it SOURCE.cubin; several: SOURCE.sm_XX.cubin.
    cubins = sorted(Path(work).glob(f"*.{job.arch}.cubin")) or sorted(Path(work).glob("*.cubin"))
    if not cubins:
        return CompileResult(Status.NO_CUBIN, seconds, done.stderr + "\nno cubin for " + job.arch)
    ptx = sorted(Path(work).glob("*.ptx"))
    return CompileResult(Status.OK, seconds, done.stderr, cubins[0].read_bytes(),
                         ptx[0].read_bytes() if ptx else b"", _module_id(work))


def _module_id(work: str) -> str:
    """The module id nvcc's front end wrote (SOURCE.module_id, kept): "" for a PTX input, which has
    none."""
    found = sorted(Path(work).glob("*.module_id"))
    return found[0].read_text(errors="replace").strip() if found else ""


def _front_end_ptx(work: str, stderr: str) -> bytes:
    """The PTX of a compile that failed in its ptxas step (the front end had
    finished: ptxas said the error), for PtxCache; b"" otherwise."""
    ptx = sorted(Path(work).glob("*.ptx"))
    said_by_ptxas = any(line.lower().startswith("ptxas") for line in stderr.splitlines())
    return ptx[0].read_bytes() if ptx and said_by_ptxas else b""


def compile_candidate(job: CompileJob, ptx: "PtxCache | None" = None) -> CompileResult:
    """One candidate compiled in a private folder (locked by this process,
    removed after; a later retune sweeps it if this one is killed), in a
    process group of its own that is killed at the timeout, on an interrupt
    and with this process. With a PtxCache, a candidate whose front end
    (everything but its ptxas options) was compiled before runs ptxas only."""
    if ptx is not None:
        return ptx.compile(job)
    work = private_folder("cand")
    started = time.monotonic()
    env = _environment(job, work)
    try:
        command = job.command(work)
        if job.ptxas:
            split = _with_program(job, job.ptxas, command, work, env)
            if isinstance(split, str):
                return CompileResult(Status.COMPILE_ERROR, time.monotonic() - started, split)
            command, env = split
        done = run_in_group(command, cwd=job.cwd, env=env, timeout=job.timeout)
        return _finished(job, done, time.monotonic() - started, work)
    finally:
        remove_private(work)


def _with_program(job: CompileJob, program: str, command: list[str], work: str,
                  env: dict) -> tuple[list[str], dict] | str:
    """The compile as nvcc's own steps with `program` (job.ptxas) running the ptxas
    step, as a split build runs it (nvcc_evo.driver.cmdline.split): a script in
    `work`, for /bin/sh; else why not. (nvcc refusing the call leaves it as
    it was: it fails as nvcc would, saying why.)"""
    asked = run_in_group([*command, "--dryrun"], cwd=job.cwd, env=env, timeout=job.timeout)
    if asked.returncode != 0:
        return command, env
    key = (job.source, job.arch)
    steps = with_options(read_steps(asked.stderr), {key: ()}, work, (job.source,), {key: program})
    if not isinstance(steps, Steps):
        return f"{program} cannot run this compile's ptxas step: {steps}"
    path = os.path.join(work, SCRIPT_NAME)
    with open(path, "w") as out:
        out.write(script(steps, None))
    return [SHELL, path], {**env, **steps.variables}


# ---------------------------------------------------------------- PTX reuse
def front_end(job: CompileJob) -> tuple:
    """What the PTX of a candidate depends on: the build, the architecture and
    every flag but the ptxas options (-Xptxas VALUE)."""
    flags, kept = job.flags, []
    skip = False
    for i, flag in enumerate(flags):
        if skip:
            skip = False
        elif flag == "-Xptxas" and i + 1 < len(flags):
            skip = True
        else:
            kept.append(flag)
    return (job.nvcc, job.argv, job.cwd, job.source, job.arch, tuple(kept), job.env)


class MadePtx(NamedTuple):
    """A front end's PTX and the module id its compile gave it."""
    ptx: bytes
    module_id: str


class PtxCache:
    """One PTX per front end: the first candidate of a front end compiles in
    full and leaves its PTX here; the others run only the ptxas step nvcc
    would run for them (`nvcc --dryrun` of their own command says which),
    on that PTX. Same ptxas command, same PTX: the same SASS as the full
    pipeline. Thread-safe: candidates of one front end wait for its first."""

    def __init__(self) -> None:
        self.ptx: dict[tuple, MadePtx] = {}
        self.locks: dict[tuple, threading.Lock] = {}
        self.guard = threading.Lock()
        self.reused = 0

    def compile(self, job: CompileJob) -> CompileResult:
        key = front_end(job)
        with self.guard:
            lock = self.locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.ptx:
                result = compile_candidate(job)
                if result.ptx:             # also a compile whose ptxas failed: its front end's PTX
                                           # is sound
                    self.ptx[key] = MadePtx(result.ptx, result.module_id)
                return result
        made = self.ptx[key]
        result = ptxas_only(job, made.ptx, made.module_id)
        if result.status != "no-ptxas-step":
            with self.guard:
                self.reused += 1
            return result
        return compile_candidate(job)  # nvcc's steps were not as expected: the whole pipeline


def ptxas_only(job: CompileJob, ptx: bytes, module_id: str = "") -> CompileResult:
    """The candidate built from a PTX made before (`module_id`: its
    compile's): nvcc's own ptxas step for its command line (asked of `nvcc
    --dryrun`), run on that PTX."""
    work = private_folder("cand")
    started = time.monotonic()
    env = _environment(job, work)
    try:
        asked = run_in_group([*job.command(work), "--dryrun"], cwd=job.cwd, env=env,
                             timeout=job.timeout)
        step = ptxas_step(asked.stderr, work) if asked.returncode == 0 else None
        if step is None:
            return CompileResult(Status.NO_PTXAS_STEP, time.monotonic() - started, asked.stderr)
        command, ptx_path, variables = step
        if job.ptxas:
            command[0] = job.ptxas  # the unit's own ptxas (nvcc_evo.driver.cmdline.ptxas)
        Path(ptx_path).write_bytes(ptx)
        done = run_ptxas(command, job.cwd, {**env, **variables}, job.timeout)
        return replace(_finished(job, done, time.monotonic() - started, work, "ptxas"),
                       module_id=module_id)
    finally:
        remove_private(work)


def ptxas_step(dryrun: str, work: str) -> tuple[list[str], str, dict[str, str]] | None:
    """From `nvcc --dryrun`: the one ptxas command (as argv), the PTX file it
    reads (in `work`) and the variables nvcc sets for its steps; None if the
    steps are not one ptxas run on a kept PTX."""
    steps = read_steps(dryrun)
    found = [c for c in steps.commands if PTXAS_STEP.match(c + " ")]
    if len(found) != 1:
        return None
    command = shlex.split(found[0])
    ptx = [word for word in command if word.endswith(".ptx")]
    if len(ptx) != 1 or os.path.dirname(ptx[0]) != work:
        return None
    return command, ptx[0], steps.variables


def run_ptxas(command: list[str], cwd: str, env: dict[str, str], timeout: float) -> Finished:
    """The ptxas step alone: `command` is ptxas's argv (its program first,
    found on the PATH nvcc sets for its steps)."""
    return run_in_group(command, cwd=cwd, env=env, timeout=timeout)


def _compile_as(owner: _Batch | Compiler, job: CompileJob, ptx: PtxCache | None,
                slots: threading.Semaphore | None) -> CompileResult:
    """One candidate compiled as `owner`'s (the groups it starts are killed
    by `kill_running(owner)`), in one of `slots` (a semaphore the compiles of
    several searches at once share: no more of them run than the retune's
    jobs), or at once without."""
    token = OWNER.set(owner)
    try:
        if slots is None:
            return compile_candidate(job, ptx)
        with slots:
            if owner.closed:                 # cancelled while it waited for a slot
                return CompileResult(Status.CANCELLED, 0.0, "")
            return compile_candidate(job, ptx)
    finally:
        OWNER.reset(token)


class _Batch:
    """The owner of one compile_each's groups."""
    closed = False


def compile_each(jobs: list[CompileJob], workers: int | None = None, ptx: PtxCache | None = None,
                 slots: threading.Semaphore | None = None) -> Iterator[tuple[int, CompileResult]]:
    """Candidates compile in parallel on the CPU cores; yields (index, result)
    as each finishes, so the caller can store it before the next one. An
    interrupt kills the compiles still running (they are in groups of their
    own, which a Ctrl-C at the terminal does not reach): these compiles only,
    not another search's."""
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
    batch = _Batch()
    try:
        futures = {pool.submit(_compile_as, batch, job, ptx, slots): i
                   for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:
        batch.closed = True
        pool.shutdown(wait=False, cancel_futures=True)
        kill_running(batch)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class Compiler:
    """A compile pool that outlives one batch: `submit` returns at once, so
    the next batch compiles while this one is measured. An interrupt while
    waiting kills the compiles still running (this pool's: several searches
    at once each have one, sharing `slots`)."""

    def __init__(self, workers: int | None = None, ptx: PtxCache | None = None,
                 slots: threading.Semaphore | None = None):
        self.pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
        self.ptx, self.slots, self.closed = ptx, slots, False

    def submit(self, jobs: list[CompileJob]) -> list:
        return [self.pool.submit(_compile_as, self, job, self.ptx, self.slots) for job in jobs]

    def result(self, future: Future[CompileResult]) -> CompileResult:
        """The compile's result, once it is done."""
        try:
            return future.result()
        except BaseException:            # an interrupt while waiting: nothing may keep compiling
            self.close(cancel=True)
            raise

    def close(self, cancel: bool = False) -> None:
        if cancel:
            self.closed = True
            self.pool.shutdown(wait=False, cancel_futures=True)
            kill_running(self)
        self.pool.shutdown(wait=True, cancel_futures=True)
