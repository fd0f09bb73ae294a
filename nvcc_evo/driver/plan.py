"""Match a compile against an ACF: which file, which unit, which target.

The ACF is `$NVCC_EVO_ACF` if set, else the nearest `nvcc-evo.acf` walking up
from each input's folder, else from the working directory. A unit matches an
input when one of its globs (relative to the ACF's folder) matches the input's
path (nvcc_evo.acf.unitpath). A target matches each SASS architecture the call builds.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf import unitpath
from nvcc_evo.driver.cache import prune
from nvcc_evo.driver.common import ACF_ENV, ACF_NAME, BROKEN_FILE, replace_file
from nvcc_evo.driver.build.nvcc_options import NvccCall

if TYPE_CHECKING:
    from nvcc_evo.driver.compiledb import CompileRecord
    from nvcc_evo.driver.toolkit import Toolkit

GPU_ENV = "NVCC_EVO_GPU"          # the GPU model the build is for, to pick named targets
STALE_ENV = "NVCC_EVO_STALE"      # keep (default): use stale knobs; default: build with defaults
TUNABLE_SUFFIXES = (".cu", ".ptx")
CMAKE_PROBES = ("CMakeCUDACompilerId.cu", "CMakeCUDACompilerABI.cu", "__cmake_determine_cuda")
# Part of the index cache's key: an index written before the check refused
# something (a define's shell characters, a path out of the ACF's folder) is
# not trusted. Change it whenever the check or the index changes.
INDEX_FORMAT = b"index-5\0"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SPACE_CHANGED = "pins or search space changed"     # the same words in --explain and --retune --dry-run


class TargetEntry(NamedTuple):
    """What a build needs of one target block (a lean copy, cached as JSON)."""

    arch: str
    gpu: str | None
    line: int
    settings: tuple[tuple[str, object], ...]
    fingerprint: str | None = None
    toolkit: str | None = None
    space_digest: str | None = None    # of the unit's pins and search block when it was tuned
    more_archs: tuple[str, ...] = ()   # the others a block of several architectures serves

    def serves(self, arch: str) -> bool:
        return arch == self.arch or arch in self.more_archs

    def __str__(self) -> str:
        archs = ", ".join((self.arch, *self.more_archs))
        return f"{archs} {self.gpu!r}" if self.gpu else archs


class UnitEntry(NamedTuple):
    position: int                  # the unit's index in the ACF
    globs: tuple[str, ...]
    line: int
    pins: tuple[tuple[str, object], ...]
    targets: tuple[TargetEntry, ...]
    space_digest: str = ""             # of its pins and search block now (acf.Unit.space_digest)
    files: tuple[str, ...] = ()        # the files its knobs name (acf.Unit.named_files), in its fingerprint
    kind: str = "source"               # "kernel": its globs name PTX entries (nvcc_evo.driver.dropin_ptxas.decide)

    def __str__(self) -> str:
        names = " ".join(f'"{g}"' for g in self.globs)
        return f"kernel {names}" if self.kind == "kernel" else names


class Match(NamedTuple):
    """One input file, one SASS architecture: the entry that applies."""

    input: str
    arch: str
    unit: UnitEntry | None
    target: TargetEntry | None = None
    fingerprint: str = ""
    stale: tuple[str, ...] = ()       # why the entry is out of date
    note: str = ""

    def settings(self, stale_policy: str) -> dict:
        if self.unit is None:
            return {}
        chosen = dict(self.unit.pins)
        if self.target is not None and not (self.stale and stale_policy == "default"):
            chosen.update(self.target.settings)
            chosen.update(self.unit.pins)   # pins always win
        return chosen


class CallPlan(NamedTuple):
    acf_path: Path | None
    matches: tuple[Match, ...] = ()
    archs: tuple[str, ...] = ()
    passthrough: str = ""              # why nothing is injected, when so
    notes: tuple[str, ...] = ()


def find_acf(start_dirs: list[Path], environ) -> Path | None:
    explicit = environ.get(ACF_ENV)
    if explicit:
        return Path(explicit).resolve()
    for start in start_dirs:
        for folder in [start, *start.parents]:
            candidate = folder / ACF_NAME
            if os.path.lexists(candidate):      # a folder, FIFO or link loop of that name too: it is the
                return candidate                # project's ACF, and acf_problem says why it cannot be read
    return None


def untrusted_acf(acf_path: Path, environ) -> str:
    """Why the ACF found by walking up is not used (nvcc_evo.system.trust:
    another user's file, a folder others may write); "" when it is trusted or
    NVCC_EVO_ACF names it (trusted as given)."""
    if environ.get(ACF_ENV):
        return ""
    from nvcc_evo.system.trust import untrusted
    return untrusted(acf_path, environ)


def unreadable(path) -> str:
    """Why the ACF at `path` cannot be read ("" when it can)."""
    from nvcc_evo.acf.text import require_regular_file
    try:
        require_regular_file(path)
        with open(path, "rb"):
            return ""
    except OSError as error:
        return error.strerror or str(error)


def acf_problem(acf_path: Path, environ) -> str:
    """Why the ACF found cannot be read, naming NVCC_EVO_ACF when it named
    the file ("" when it can be read)."""
    why = unreadable(acf_path)
    if not why:
        return ""
    named = f" ({ACF_ENV}={environ[ACF_ENV]})" if environ.get(ACF_ENV) else ""
    return f"cannot read the ACF {acf_path}{named}: {why}"


def named_acf_problem(environ) -> str:
    """Why the ACF that NVCC_EVO_ACF names cannot be read ("" when it can, or
    when it names none): an error for the verbs, a warning in builds."""
    named = environ.get(ACF_ENV)
    return acf_problem(Path(named).resolve(), environ) if named else ""


def index_units(file) -> tuple[UnitEntry, ...]:
    """The lean view of a checked AcfFile that builds need."""
    units = []
    for index, unit in enumerate(file.units):
        targets = []
        for target in unit.targets:
            record = {r.key: r.value for r in target.provenance or ()}
            targets.append(TargetEntry(target.arch, target.gpu, target.span.line,
                                       tuple((s.knob, s.value) for s in target.settings),
                                       record.get("fingerprint"), record.get("toolkit"), record.get("space_digest"),
                                       target.more_archs))
        units.append(UnitEntry(index, unit.globs, unit.span.line,
                               tuple((p.knob, p.value) for p in unit.pins), tuple(targets), unit.space_digest,
                               unit.named_files(), unit.kind))
    return tuple(units)


def _to_json(units: tuple[UnitEntry, ...]) -> list:
    return [[u.position, list(u.globs), u.line, [list(p) for p in u.pins],
             [[t.arch, t.gpu, t.line, [list(s) for s in t.settings], t.fingerprint, t.toolkit, t.space_digest,
               list(t.more_archs)]
              for t in u.targets], u.space_digest, list(u.files), u.kind] for u in units]


def _from_json(data: list) -> tuple[UnitEntry, ...]:
    return tuple(UnitEntry(index, tuple(globs), line, tuple(tuple(p) for p in pins),
                           tuple(TargetEntry(a, g, l, tuple(tuple(s) for s in st), f, tk, sd, tuple(more))
                                 for a, g, l, st, f, tk, sd, more in targets), space, tuple(files), kind)
                 for index, globs, line, pins, targets, space, files, kind in data)


def load_units(path: Path, cache_dir: Path | None) -> tuple[UnitEntry, ...]:
    """The ACF's units, from a JSON cache while the text is unchanged, so that
    a build neither imports lark nor re-checks the file; AcfError if it has errors."""
    from nvcc_evo.acf.text import read_text
    text = read_text(path)
    digest = hashlib.sha256(INDEX_FORMAT + text.encode() + b"\0" + str(path).encode()).hexdigest()[:24]
    cached = cache_dir / f"acf-{digest}.json" if cache_dir is not None else None
    try:
        if cached is not None:
            return _from_json(json.loads(cached.read_text()))
    except BROKEN_FILE:
        pass
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.acf.resolve import check
    file = parse_text(text, str(path))
    check(file, text)
    units = index_units(file)
    try:
        if cached is not None:
            replace_file(cached, json.dumps(_to_json(units)))
            prune(cache_dir)            # (a new index: those of older texts go in time)
    except OSError:
        pass
    return units


def match_unit(units: tuple[UnitEntry, ...], acf_dir: Path, source: Path) -> UnitEntry | None:
    """The first unit whose globs name `source` (nvcc_evo.acf.unitpath: path
    segments, inside the ACF's folder only); kernel units name PTX entries, never files."""
    parts = unitpath.inside(source, acf_dir)
    for unit in units:
        if unit.kind == "source" and any(unitpath.matches(glob, parts) for glob in unit.globs):
            return unit
    return None


def _gencode_codes(spec: str) -> list[str]:
    match = re.search(r"code=\[?([^\]]*)\]?", spec.replace('"', ""))
    return [c.strip() for c in match.group(1).split(",")] if match else []


def _native_archs() -> list[str]:
    import subprocess
    from nvcc_evo.system.programs import note
    note("nvidia-smi", "the GPUs' architectures")
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({"sm_" + line.strip().replace(".", "") for line in out.splitlines() if line.strip()})


def sass_archs(call: NvccCall, default_arch: str) -> tuple[list[str], str]:
    """The SASS targets the call builds, and a note when that is a guess."""
    codes: list[str] = []
    gencode = call.all_options()
    for opt in gencode:
        if opt.name == "--generate-code" and opt.value:
            codes += _gencode_codes(opt.value)
    arch = call.last("--gpu-architecture")
    gpu_codes = call.values("--gpu-code")
    if gpu_codes:
        codes += gpu_codes
    elif arch in ("native",):
        found = _native_archs()
        if not found:
            return [], "-arch=native with no GPU visible: nothing matched"
        codes += found
    elif arch in ("all", "all-major"):
        return [], f"-arch={arch} builds every architecture: apply only through -gencode"
    elif arch is not None:
        codes.append(arch)
    elif not codes:
        codes.append(default_arch)
    sass = sorted({c for c in codes if c.startswith("sm_")})
    jit = sorted({c for c in codes if c.startswith("compute_") and c.replace("compute_", "sm_") not in sass})
    if jit:
        return sass, f"{', '.join(jit)}: PTX only, compiled by the driver's JIT: no ptxas knob reaches it"
    return sass, ""


def fingerprint(source: Path, include_dirs: list[str], files: tuple[str, ...] = (), acf_dir: Path | None = None) -> str:
    """sha256 over the unit and every project header it includes with
    quotes, found as the preprocessor would (its folder, then -I folders),
    and the `files` its knobs name in `acf_dir` (controls files: an edited
    one makes a tuned entry stale; a unit that names none keeps the digest
    it always had)."""
    digest = _sources_digest(source, include_dirs)
    for name in files:
        assert acf_dir is not None             # (the files a unit's knobs name are in its ACF's folder)
        try:
            data = (acf_dir / name).read_bytes()
        except OSError:
            data = b"(unreadable)"
        digest.update(b"file\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + digest.hexdigest()[:32]


def _sources_digest(source: Path, include_dirs: list[str]):
    digest, seen, todo = hashlib.sha256(), set(), [source.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        digest.update(path.name.encode() + b"\0" + data + b"\0")
        for name in INCLUDE.findall(data.decode(errors="replace")):
            for folder in [path.parent, *map(Path, include_dirs)]:
                candidate = (folder / name)
                if candidate.is_file():
                    todo.append(candidate.resolve())
                    break
    return digest


def choose_target(unit: UnitEntry, arch: str, gpu: str | None) -> tuple[TargetEntry | None, str]:
    for_arch = [t for t in unit.targets if t.serves(arch)]
    if gpu:
        named = [t for t in for_arch if t.gpu == gpu]
        if named:
            return named[0], ""
    plain = [t for t in for_arch if t.gpu is None]
    if plain:
        return plain[0], ""
    if len(for_arch) == 1:
        return for_arch[0], f"only entry for {arch} is for {for_arch[0].gpu!r}; used it"
    if for_arch:
        names = ", ".join(repr(t.gpu) for t in for_arch)
        return None, f"several entries for {arch} ({names}): set {GPU_ENV} to choose"
    return None, f"no entry for {arch}: defaults (recorded for --retune)"


def staleness(target: TargetEntry | None, print_: str, toolkit_version: str, space_digest: str = "") -> tuple[str, ...]:
    """Why a target's entry is out of date. A provenance without a key (an
    entry written before it existed) is not stale for that key."""
    if target is None:
        return ()
    why = []
    if target.fingerprint is not None and target.fingerprint != print_:
        why.append("source changed since it was tuned")
    if target.toolkit is not None and target.toolkit != toolkit_version:
        why.append(f"tuned with CUDA {target.toolkit}, building with {toolkit_version}")
    if target.space_digest is not None and space_digest and target.space_digest != space_digest:
        why.append(SPACE_CHANGED)
    return tuple(why)


def is_cmake_probe(call: NvccCall, cwd: Path) -> bool:
    text = " ".join(call.argv) + " " + str(cwd)
    return any(p in text for p in CMAKE_PROBES) or "cmTC_" in text


def is_lto_link(call: NvccCall) -> bool:
    """`-dlink -dlto`: ptxas runs here, on code compiled earlier with -dlto."""
    return call.has("--device-link") and call.has("--dlink-time-opt")


def lto_objects(call: NvccCall) -> list[str]:
    return [i for i in call.inputs if i.endswith((".o", ".obj", ".a"))]


def build_link_plan(call: NvccCall, cwd: Path, environ, toolkit: Toolkit, cache_dir: Path | None, acf_path: Path,
                    compiled: dict[str, CompileRecord]) -> CallPlan:
    """For an LTO device link: each object's unit comes from the compile
    database (how the build compiled it); its target from the link's archs.
    Only ptxas knobs apply here: the sources were compiled already."""
    units = {u.position: u for u in load_units(acf_path, cache_dir)}
    archs, arch_note = sass_archs(call, toolkit.default_arch)
    matches = []
    for name in lto_objects(call):
        record = compiled.get(str((cwd / name).resolve()))
        unit = units.get(record.unit_index) if record is not None else None
        if unit is not None and record is not None and unit.globs != tuple(record.unit_globs):
            unit = None
        for arch in archs:
            if unit is None or record is None:          # (a unit only where there is a record)
                matches.append(Match(name, arch, None, note="not compiled through nvcc-evo for this ACF"))
                continue
            target, note = choose_target(unit, arch, environ.get(GPU_ENV))
            ptxas_only = unit._replace(pins=tuple(p for p in unit.pins if p[0].startswith("ptxas.")))
            if target is not None:
                target = target._replace(settings=tuple(s for s in target.settings if s[0].startswith("ptxas.")))
            matches.append(Match(name, arch, ptxas_only, target, record.fingerprint,
                                 staleness(target, record.fingerprint, toolkit.version, unit.space_digest), note))
    return CallPlan(acf_path, tuple(matches), tuple(archs), notes=(arch_note,) if arch_note else ())


def tunable_inputs(call: NvccCall) -> list[str]:
    language_cu = call.last("--x") == "cu"
    return [i for i in call.inputs if i != "-" and (language_cu or i.endswith(TUNABLE_SUFFIXES))]


def passthrough_reason(call: NvccCall, cwd: Path) -> str:
    """Why this call gets nothing, before any ACF is read ("" if it may)."""
    if call.unknown or call.problems:
        what = ", ".join(call.unknown) or "; ".join(call.problems)
        return f"nvcc-evo does not understand {what}: passed through untouched"
    if is_cmake_probe(call, cwd):
        return "a CMake probe or try-compile: passed through untouched"
    if call.has("--device-link") and not call.has("--dlink-time-opt"):
        return "device link without LTO runs no ptxas"
    if is_lto_link(call):
        return "" if lto_objects(call) else "LTO device link with no object inputs"
    if not tunable_inputs(call):
        return "no .cu or .ptx input to tune"
    return ""


def build_plan(call: NvccCall, cwd: Path, environ, toolkit: Toolkit, cache_dir: Path | None,
               acf_path: Path) -> CallPlan:
    """Which ACF entries apply to this call, per input and architecture."""
    inputs = tunable_inputs(call)
    units = load_units(acf_path, cache_dir)
    archs, arch_note = sass_archs(call, toolkit.default_arch)
    includes = call.values("--include-path")
    matches = []
    for name in inputs:
        source = cwd / name
        unit = match_unit(units, acf_path.parent, source)
        print_ = fingerprint(source, [str(cwd / d) for d in includes], unit.files, acf_path.parent) \
            if unit is not None else ""
        for arch in archs:
            if unit is None:
                matches.append(Match(name, arch, None, note=f"no unit in {acf_path.name} covers it"))
                continue
            target, note = choose_target(unit, arch, environ.get(GPU_ENV))
            matches.append(Match(name, arch, unit, target, print_,
                                 staleness(target, print_, toolkit.version, unit.space_digest), note))
    notes = (arch_note,) if arch_note else ()
    return CallPlan(acf_path, tuple(matches), tuple(archs), notes=notes)
