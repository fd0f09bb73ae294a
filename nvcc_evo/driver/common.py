"""What the shim and the rest of the driver share: the environment's names,
finding the real nvcc, the log line and replacing a cache file. Only `os`
and `sys` here (the shim imports it on every compile); imports nothing of
nvcc_evo, so that the shim, the wrapper and their caches all import it and
none of them imports another to get it.
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the shim imports this module on every compile: no typing at run time)
    from collections.abc import Iterable, Mapping
    from typing import TextIO

REAL_NVCC_ENV = "NVCC_EVO_REAL_NVCC"
REAL_PTXAS_ENV = "NVCC_EVO_REAL_PTXAS"        # the ptxas nvcc-evo-ptxas stands for
REAL_PTXAS_BLACKWELL_ENV = "NVCC_EVO_REAL_PTXAS_BLACKWELL"    # the ptxas-blackwell
                                                              # nvcc-evo-ptxas-blackwell stands for
# Triton's two ptxas programs (3.6: `ptxas` below sm_100, `ptxas-blackwell` from sm_100 on), the
# variables naming them, and the one naming the real program each stand-in runs
PLAIN_PTXAS, BLACKWELL_PTXAS = "ptxas", "ptxas-blackwell"
TRITON_PTXAS_ENV = "TRITON_PTXAS_PATH"
TRITON_PTXAS_BLACKWELL_ENV = "TRITON_PTXAS_BLACKWELL_PATH"
REAL_PTXAS_OF = {PLAIN_PTXAS: REAL_PTXAS_ENV, BLACKWELL_PTXAS: REAL_PTXAS_BLACKWELL_ENV}
TRITON_BIN = os.path.join("triton", "backends", "nvidia", "bin")  # where Triton keeps its own ptxas
GUARD_ENV = "NVCC_EVO_ACTIVE"
ACF_ENV = "NVCC_EVO_ACF"
ACF_NAME = "nvcc-evo.acf"
ENVIRONMENT = 3      # nvcc_evo.errors.ExitCode.ENVIRONMENT, without importing it
LOG_ENV = "NVCC_EVO_LOG"
GPU_ENV = "NVCC_EVO_GPU"          # the GPU model the build is for, to pick named targets
STALE_ENV = "NVCC_EVO_STALE"      # keep (default): use stale knobs; default: build with defaults
STALE_CHOICES = ("keep", "default")
# Set by --retune --backend command for its bench command's runs: such a build compiles a candidate.
PHASE_ENV = "NVCC_EVO_PHASE"
NO_ACF = f"no {ACF_NAME} above the inputs or here, and {ACF_ENV} unset"
SETTINGS_NAME = "nvcc-evo.toml"
PYPROJECT = "pyproject.toml"
# What reading one of our own files (a cache, a compile-database record, a
# results line) raises when it is broken: cut short, garbage, valid JSON of
# another shape, nested past Python's recursion limit. Each is a miss (a cache
# recomputed, a record skipped with its reason), never a crash or an untuned build.
BROKEN_FILE = (OSError, ValueError, LookupError, TypeError, AttributeError, RecursionError)


def find_settings_file(acf_path: str | os.PathLike[str]) -> tuple[str, bool] | None:
    """The project settings file of an ACF (nvcc_evo.driver.settings reads
    it): (path, whether it is a pyproject.toml), or None. An nvcc-evo.toml
    beside the ACF, else the nearest pyproject.toml at or above its folder
    if it names our table (a byte search: most hold none). Here, with os
    only, so that a compile without one loads nothing more."""
    folder = os.path.dirname(os.path.abspath(acf_path))
    beside = os.path.join(folder, SETTINGS_NAME)
    if os.path.isfile(beside):
        return beside, False
    while True:
        candidate = os.path.join(folder, PYPROJECT)
        if os.path.isfile(candidate):
            try:
                with open(candidate, "rb") as handle:
                    holds = b"nvcc-evo" in handle.read()
            except OSError:
                return None
            return (candidate, True) if holds else None
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def append_log(path: str, cwd: str, argv: list[str], acf: str = "", added: Iterable[str] = (),
               passthrough: str = "", skipped: Iterable[str] = (), problems: Iterable[str] = (),
               per_step: Mapping[tuple[str, str], Iterable[str]] | None = None,
               units: Iterable[tuple[str, str, Iterable[str]]] = (), program: str = "") -> None:
    """One JSON line per compile in NVCC_EVO_LOG (the wrapper's and the shim's);
    `per_step`: {(input, arch): ptxas options} when nvcc's steps ran split;
    `units`: (input, arch, unit globs) of each input the ACF covers (so that
    --retune's command backend sees that a candidate's flags reached its unit);
    `program`: the real program the drop-in ptxas ran."""
    import json
    import time
    line: dict[str, object] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cwd": cwd, "argv": argv, "acf": acf,
        "added": list(added), "passthrough": passthrough, "skipped": list(skipped),
        "problems": list(problems)}
    if program:
        line["program"] = program
    if units:
        line["units"] = [{"input": name, "arch": arch, "unit": list(globs)}
                         for name, arch, globs in units]
    if per_step:
        line["ptxas_per_step"] = [{"input": name, "arch": arch, "options": list(options)}
                                  for (name, arch), options in per_step.items()]
    write_log_line(path, json.dumps(line))


def write_log_line(path: str, text: str) -> None:
    """Append one line to NVCC_EVO_LOG (never through a link: a settings file
    of a cloned repository may name the log). A log that cannot be written (a
    folder, a link, a missing folder, a full disk) is said on stderr; it never
    breaks a build nor costs it its tuned flags."""
    from nvcc_evo.system.files import append
    try:
        append(path, text + "\n")
    except OSError as error:
        from nvcc_evo.system.say import visible
        print(visible(f"nvcc-evo: warning: cannot write the log {LOG_ENV}={path} "
                      f"({error.strerror or error}); the build goes on"), file=sys.stderr)


def replace_file(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Write a cache file (compile database, ACF index, toolkit facts, a cubin, a report) by a
    new temporary file and one rename, so that parallel builds never read half of
    one; never through a link (nvcc_evo.system.files.replace). (ACFs themselves go through
    nvcc_evo.acf.edit.write, which also locks, syncs to disk and keeps links, mode and spelling.)"""
    from nvcc_evo.system.files import replace
    replace(path, text)


class QuietStream:
    """stderr that never fails: with fd 2 closed (`2>&-`) Python's sys.stderr
    is None and print(file=None) writes to stdout, into a user's `-E` output;
    on an unwritable one (a full disk, a closed pipe) each write raises. Our
    messages are dropped then, never sent to stdout."""

    def __init__(self, stream: TextIO | None):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            if self.stream is not None:
                self.stream.write(text)
        except (OSError, ValueError):
            pass
        return len(text)

    def flush(self) -> None:
        try:
            if self.stream is not None:
                self.stream.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        try:
            return self.stream is not None and self.stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> object:
        if self.stream is None:
            raise AttributeError(name)
        return getattr(self.stream, name)


def guard_stderr() -> None:
    """Messages of ours go to stderr or nowhere (see QuietStream)."""
    if not isinstance(sys.stderr, QuietStream):
        sys.stderr = QuietStream(sys.stderr)


class NvccNotFound(Exception):
    pass


def is_self(candidate: str) -> bool:
    """Whether `candidate` is nvcc-evo: our own entry point, a console-script
    shim of ours, or a script that runs nvcc-evo by name (a wrapper that
    clears the environment first, `exec env -i nvcc-evo "$@"`, would bring
    each call back here with no trace of the last)."""
    try:
        resolved = os.path.realpath(candidate)
        if sys.argv and sys.argv[0] and resolved == os.path.realpath(sys.argv[0]):
            return True
        with open(resolved, "rb") as handle:
            head = handle.read(8192)
    except OSError:
        return False
    if b"nvcc_evo" in head[:1024]:                # a console-script shim of ours
        return True
    return head.startswith(b"#!") and _runs_nvcc_evo(head)


def _runs_nvcc_evo(script: bytes) -> bool:
    """Whether a script names nvcc-evo as a program (`nvcc-evo`, `.../bin/nvcc-evo`
    as a word of its own: not a folder `nvcc-evo/` nor `nvcc-evo-ptxas`)."""
    at = script.find(b"nvcc-evo")
    while at >= 0:
        before, after = script[at - 1:at] if at else b" ", script[at + 8:at + 9]
        if before in b" \t\n\"'/=;&|(" and after in b" \t\n\"';&|)":
            return True
        at = script.find(b"nvcc-evo", at + 1)
    return False


# The guard that survives a wrapper clearing the environment (env -i, sudo): a compile that runs a
# script as the real nvcc (a wrapper of it; nvcc itself is a binary) records its process (pid and
# start time, which an exec keeps) in a folder of its user's; a compile in that process, or below
# it, was called by that wrapper.
EXEC_RECORDS = "/tmp/nvcc-evo-exec-{uid}"


def _process(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, start time, uid) of a process, from /proc (None where there is none)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        uid = os.stat(f"/proc/{pid}").st_uid
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[1]), int(fields[19]), uid
    except (OSError, ValueError, IndexError):
        return None


def _records_of(uid: int) -> str | None:
    """The user's folder of records, where it is theirs and no link (None otherwise)."""
    folder = EXEC_RECORDS.format(uid=uid)
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    private = _is_dir(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o022
    return folder if private else None


def _is_dir(mode: int) -> bool:
    return mode & 0o170000 == 0o040000


def called_by_a_wrapper_of_ours() -> bool:
    """Whether this process, or one it descends from, is a compile of
    nvcc-evo's that ran a script as the real nvcc: that script led back
    here (nvcc-evo would call itself without end)."""
    pid = os.getpid()
    folders: dict[int, str | None] = {}
    for _ in range(64):
        found = _process(pid)
        if found is None:
            return False
        parent, start, uid = found
        folder = folders[uid] if uid in folders else folders.setdefault(uid, _records_of(uid))
        if folder is not None:
            try:
                with open(os.path.join(folder, str(pid)), "rb") as handle:
                    if handle.read() == str(start).encode():
                        return True
            except OSError:
                pass
        if parent <= 1:
            return False
        pid = parent
    return False


def note_wrapper(nvcc: str) -> None:
    """Before a script runs as the real nvcc: this process recorded (see
    EXEC_RECORDS), so that a call of nvcc-evo it leads to is found."""
    try:
        with open(nvcc, "rb") as handle:
            if handle.read(2) != b"#!":
                return
    except OSError:
        return
    found = _process(os.getpid())
    uid = os.geteuid()
    folder = EXEC_RECORDS.format(uid=uid)
    try:
        os.mkdir(folder, 0o755)
    except OSError:
        pass
    if found is None or _records_of(uid) is None:     # another user's folder in the way: no record
        return
    try:
        fd = os.open(os.path.join(folder, str(os.getpid())),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, str(found[1]).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def usable(path: str) -> bool:
    """An executable file that is not nvcc-evo itself."""
    return os.path.isfile(path) and os.access(path, os.X_OK) and not is_self(path)


def explicit_program(environ: Mapping[str, str], variable: str, itself: str,
                     error: type[Exception]) -> str | None:
    """The program an environment variable names, made absolute (None when
    unset); `error` when it is no executable file or is `itself`."""
    explicit = environ.get(variable)
    if not explicit:
        return None
    if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
        raise error(f"{variable}={explicit} is not an executable file")
    if is_self(explicit):
        raise error(f"{variable}={explicit} points at {itself} itself")
    return os.path.abspath(explicit)


def find_real_nvcc(environ: Mapping[str, str] = os.environ) -> str:
    """Explicit setting, else CUDA_HOME/CUDA_PATH, else PATH; never ourselves."""
    explicit = explicit_program(environ, REAL_NVCC_ENV, "nvcc-evo", NvccNotFound)
    if explicit:
        return explicit
    places = [os.path.join(environ[v], "bin", "nvcc")
              for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    places += [os.path.join(folder or ".", "nvcc")
               for folder in environ.get("PATH", "").split(os.pathsep)]
    ours = []
    for path in places:
        if usable(path):
            return os.path.abspath(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            ours.append(path)
    said = ""
    if ours:
        said = f" ({', '.join(dict.fromkeys(ours))}: nvcc-evo itself, or a script that runs it)"
    raise NvccNotFound(f"no real nvcc found{said}: set {REAL_NVCC_ENV}, CUDA_HOME or PATH")


def stale_problem(environ: Mapping[str, str]) -> str:
    """What is wrong with NVCC_EVO_STALE ("" when it is unset or one of
    STALE_CHOICES), in the settings' words: one rule for builds and verbs."""
    value = environ.get(STALE_ENV)
    return "" if not value or value in STALE_CHOICES else f"{STALE_ENV}={value}: expected one of " \
        f"{', '.join(STALE_CHOICES)}"
