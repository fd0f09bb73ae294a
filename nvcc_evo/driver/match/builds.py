"""A build's identity: how a compile-database record compiles its unit, as a key (`build_key`: its
arguments as nvcc reads them, environment and nvcc, with the ACF's folder written `<acf>` and a
build folder outside it `<build>`), and between two records what differs, in words that name each
one (`difference`): what an entry's `build` names, what makes it stale for another build, what
--retune says of a unit that its records compile in more than one way.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

from nvcc_evo.driver.cmdline.nvcc_options import parse_call, rebuild_argv
from nvcc_evo.driver.match.stale import source_digests
from nvcc_evo.system import files

if TYPE_CHECKING:
    from nvcc_evo.driver.compiledb import CompileRecord

# Options that name what a compile writes, not how it compiles (canonical names): two build folders
# of one project (Make's and Ninja's, objects in another place) are one build.
OUTPUT_OPTIONS = {"--output-file", "--dependency-output", "--dependency-target-name",
                  "--output-directory",
                  "--keep-dir"}
CMAKE_CACHE = "CMakeCache.txt"      # what marks the top of a CMake build folder (its compiles run
                                    # in subfolders)


class Compile(Protocol):
    """What a key is made of: a candidate's CompileJob, or a record's `Compiled`."""

    @property
    def argv(self) -> tuple[str, ...]: ...
    @property
    def cwd(self) -> str: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def nvcc(self) -> str: ...


class Compiled(NamedTuple):
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    nvcc: str


def compiled(record: CompileRecord, nvcc: str = "") -> Compiled:
    """A record as a Compile (`nvcc`: the one a retune runs; "": the record's own)."""
    return Compiled(tuple(record.argv), record.cwd, record.compile_env(), nvcc or record.nvcc)


def build_folder(cwd: str, root: Path) -> str | None:
    """The build folder a compile runs in, where it is not the ACF's source tree: the nearest folder
    at or above its working folder holding CMake's CMakeCache.txt (Makefiles run a subfolder's
    compiles there, Ninja at the top), else its working folder where that lies outside the ACF's
    folder. None where the build is the source tree itself (an in-source Make): its paths are the
    ACF's folder's."""
    here, acf = os.path.abspath(cwd), os.path.realpath(root)
    folder = here
    while not os.path.isfile(os.path.join(folder, CMAKE_CACHE)):
        parent = os.path.dirname(folder)
        if parent == folder:
            folder = here if not _within(os.path.realpath(here), acf) else ""
            break
        folder = parent
    return folder if folder and not _within(acf, os.path.realpath(folder)) else None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + os.sep)


def placeholders(root: Path, cwd: str = "") -> Callable[[str], str]:
    """Paths as a key writes them: the ACF's folder `<acf>`, the build folder of a compile run in
    `cwd` `<build>` (the longer first: a build folder inside the source tree is the build's)."""
    acf = os.path.realpath(root)
    names = {acf: "<acf>"}
    build = build_folder(cwd, root) if cwd else None
    if build is not None:
        names.update({build: "<build>", os.path.realpath(build): "<build>"})
    order = sorted(names, key=len, reverse=True)

    def relative(text: str) -> str:
        for path in order:
            if text == path:
                return names[path]
            text = text.replace(path + os.sep, names[path] + os.sep)
        return text
    return relative


def how_it_compiles(job: Compile) -> tuple[str, ...]:
    """The call's arguments as nvcc reads them: options files expanded in place (CMake's Makefiles
    pass `--options-file .../includes_CUDA.rsp` where Ninja passes the -I's), the outputs' names
    left out."""
    return tuple(rebuild_argv(list(job.argv), OUTPUT_OPTIONS, None, job.cwd))


def build_key(job: Compile, root: Path, outputs: bool = False, in_folder: bool = True) -> str:
    """The build's identity in the results store and an entry's provenance: its arguments as nvcc
    reads them (how_it_compiles), environment and nvcc, with the ACF's folder and its build folder
    written as placeholders, so that a moved or copied checkout and another build folder of it
    (-I<build>/include, as CUTLASS and most CMake projects pass) keep its results. `outputs`,
    `in_folder`: the keys of older nvcc-evo (older_keys)."""
    relative = placeholders(root, job.cwd if in_folder and not outputs else "")
    argv = tuple(relative(a) for a in (job.argv if outputs else how_it_compiles(job)))
    env = tuple((k, relative(v)) for k, v in job.env)
    return hashlib.sha256(repr((argv, env, job.nvcc)).encode()).hexdigest()[:16]


def older_keys(job: Compile, root: Path) -> tuple[str, str]:
    """The keys older nvcc-evo gave the same build, which an entry may name and is not stale for:
    with its outputs, and without its build folder as `<build>`."""
    return build_key(job, root, outputs=True), build_key(job, root, in_folder=False)


class Seen(NamedTuple):
    """A record as two builds are compared: arguments, environment and source files' digests, paths
    as placeholders."""

    argv: tuple[str, ...]
    env: dict[str, str]
    sources: dict[str, str]


def _seen(record: CompileRecord, root: Path) -> Seen:
    relative = placeholders(root, record.cwd)
    env = record.compile_env()
    return Seen(tuple(relative(a) for a in how_it_compiles(compiled(record))),
                {k: relative(v) for k, v in env},
                sources_read(Path(record.input), record.argv, env, record.cwd, root))


def sources_read(source: Path, argv: tuple[str, ...], env: tuple[tuple[str, str], ...], cwd: str,
                 root: Path) -> dict[str, str]:
    """{path: sha256} of each file the unit's fingerprint reads as this compile finds them, paths as
    placeholders (`<acf>/inc/params.h`, `<build>/include/config.h`)."""
    relative = placeholders(root, cwd)
    found = source_digests(source, parse_call(list(argv), dict(env), cwd), cwd)
    return {relative(path): digest for path, digest in found.items()}


def _sources_file(root: Path, unit_fingerprint: str) -> Path:
    return root / ".nvcc-evo" / "sources" / f"{unit_fingerprint.rpartition(':')[2]}.json"


def keep_sources(root: Path, unit_fingerprint: str, sources: dict[str, str]) -> None:
    """The files a fingerprint was made of, kept beside the ACF (`.nvcc-evo/sources/`) once an entry
    names it, so that "source changed" can name the files that did (changed_sources)."""
    try:
        files.folders(root, ".nvcc-evo", "sources")
        files.replace(_sources_file(root, unit_fingerprint), json.dumps(sources, sort_keys=True))
    except OSError:
        pass                    # (then "source changed" names no file: nothing else depends on it)


def changed_sources(root: Path, unit_fingerprint: str, sources: dict[str, str]) -> list[str]:
    """The files whose contents differ between the fingerprint `unit_fingerprint` (as keep_sources
    kept it) and `sources` now, those added or gone included, as a user reads them (`inc/params.h`);
    [] where none was kept."""
    try:
        then = json.loads(_sources_file(root, unit_fingerprint).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(then, dict):
        return []
    changed = sorted(p for p in set(then) | set(sources) if then.get(p) != sources.get(p))
    return [p.removeprefix("<acf>/") for p in changed]


def named_build(tuned_for: str, records: list[CompileRecord], root: Path, nvcc: str) -> str | None:
    """An entry tuned for the build `tuned_for` names ("recorded compile KEY") in words: the folder
    of the record of it, and what the latest record (records[0]) does differently; None where no
    record of it is left."""
    for record in records:
        job = compiled(record, nvcc)
        if tuned_for in {f"recorded compile {key}"
                         for key in (build_key(job, root), *older_keys(job, root))}:
            latest = records[0]
            return (f"tuned for the build recorded in {where(record, latest)}; the latest, in "
                    f"{where(latest, record)}, compiles it differently: "
                    f"{difference(latest, record, root)}")
    return None


def where(record: CompileRecord, other: CompileRecord) -> str:
    """The record's folder, and its output where the other record was made in the same folder."""
    return record.cwd if record.cwd != other.cwd else f"{record.cwd} (-o {record.output or '?'})"


def difference(first: CompileRecord, second: CompileRecord, root: Path) -> str:
    """What two records of a unit compile differently, naming each: arguments one has and the other
    not (or their order), environment variables, the nvcc each ran, source files (headers) whose
    contents differ."""
    a, b = _seen(first, root), _seen(second, root)
    words = []
    for mine, theirs, record, other in ((a, b, first, second), (b, a, second, first)):
        only = [x for x in mine.argv if x not in theirs.argv]
        if only:
            words.append(f"{' '.join(only[:6])}{' ...' if len(only) > 6 else ''} only in "
                         f"{where(record, other)}")
    for mine, theirs, record, other in ((a, b, first, second), (b, a, second, first)):
        repeated = Counter(mine.argv) - Counter(theirs.argv) if not words else Counter()
        if repeated and all(x in theirs.argv for x in repeated):
            words.append(f"{' '.join(repeated)} given more often in {where(record, other)}")
    if not words and a.argv != b.argv:
        words.append("the order of their arguments")
    for name in sorted(set(a.env) | set(b.env)):
        if a.env.get(name) != b.env.get(name):
            words.append(f"{name} ({a.env.get(name, 'unset')} against {b.env.get(name, 'unset')})")
    if first.nvcc != second.nvcc:
        words.append(f"the nvcc each ran ({first.nvcc} against {second.nvcc})")
    read = sorted(set(a.sources) | set(b.sources))
    changed = [p for p in read if a.sources.get(p) != b.sources.get(p)]
    if changed:
        words.append("the contents of "
                     f"{', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}")
    return "; ".join(words) or "nothing nvcc-evo can name"
