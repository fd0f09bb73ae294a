"""What one CUDA toolkit accepts: probed once, cached by the nvcc binary.

A knob is usable only if the real tool takes its flag without printing a
single diagnostic (a ptxas "option not supported" line would match CMake's
flag-check failure pattern). The answer is cached in the user's cache folder,
keyed by nvcc's real path, size and modification time, so a build probes at
most once per toolkit.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import NamedTuple
from pathlib import Path

from nvcc_evo.acf import knobs
from nvcc_evo.driver.common import BROKEN_FILE, replace_file

PROBE_SOURCE = 'extern "C" __global__ void probe(float* x) { x[threadIdx.x] *= 2.0f; }\n'
CACHE_VERSION = 3


class Toolkit(NamedTuple):
    nvcc: str
    ptxas: str
    version: str                      # "13.0.88"
    default_arch: str                 # the SASS target nvcc uses with no -arch
    accepted: frozenset[str]          # knob names whose flag the toolkit takes silently
    rejected: tuple[tuple[str, str], ...] = ()   # (knob, what the tool printed)
    # The SASS targets of `-arch=all` and `-arch=all-major`, as nvcc's own steps name them.
    every_arch: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def version_tuple(self) -> tuple[int, int]:
        major, minor, *_ = (int(p) for p in self.version.split("."))
        return (major, minor)

    def accepts(self, knob_name: str) -> bool:
        """(Which ptxas runs a step, and its controls file, are checked per
        step by nvcc_evo.driver.cmdline.ptxas, against the ptxas chosen.)"""
        return (knob_name in self.accepted or knobs.is_define(knob_name)
                or knob_name in knobs.STEP_ONLY)

    def why_rejected(self, knob_name: str) -> str:
        return dict(self.rejected).get(knob_name, f"not available in CUDA {self.version}")

    def archs_of(self, spelling: str) -> tuple[str, ...]:
        """The SASS targets `-arch=SPELLING` builds (`all`, `all-major`); () where not probed."""
        return dict(self.every_arch).get(spelling, ())

    def __str__(self) -> str:
        return f"CUDA {self.version} ({self.nvcc})"


def cache_folder() -> Path:
    """The user's cache folder (nvcc_evo.system.files.cache_folder: made, no link)."""
    from nvcc_evo.system.files import cache_folder as made
    return Path(made())


def cache_folder_if_any() -> Path | None:
    """The cache folder, None where it cannot be made (a link in its place, a read-only home)."""
    try:
        return cache_folder()
    except OSError:
        return None


def _cache_path(nvcc: Path) -> Path:
    real = nvcc.resolve()
    stat = real.stat()
    key = f"{CACHE_VERSION}:{real}:{stat.st_size}:{stat.st_mtime_ns}"
    return cache_folder() / f"toolkit-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _run(argv: list[str], cwd: str) -> tuple[int, str]:
    import subprocess
    from nvcc_evo.driver.common import GUARD_ENV
    from nvcc_evo.system.programs import note
    note(argv[0], "toolkit probe")
    # (a script named as the real nvcc that runs nvcc-evo again says so, instead of probing itself)
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, GUARD_ENV: "1"})
    return result.returncode, (result.stdout + result.stderr).strip()


def _version(nvcc: Path) -> str:
    _, out = _run([str(nvcc), "--version"], ".")
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else "0.0.0"


def toolkit_version(nvcc: Path) -> str:
    """`nvcc --version`'s release (13.0.88): no probe, no compile."""
    return _version(nvcc)


def _probe_value(knob: knobs.Knob) -> str:
    """A flag with a value other than the default, to see it really taken."""
    if knob.kind is knobs.Kind.BOOL:
        value = not knob.default if knob.default is not None else True
        if knob.form is knobs.Form.VALUE:
            return knob.spelling.format(str(value).lower())
        return knob.spelling
    if knob.kind is knobs.Kind.ENUM:
        choice = next(c for c in knob.choices if c != knob.default)
        return knob.spelling.format(choice)
    return knob.spelling.format(min(max(knob.low, 64), knob.high) if knob.high >= 64 else knob.low)


def _probe_knob(knob: knobs.Knob, tools: dict, arch: str, work: str) -> tuple[str, bool, str]:
    flag = _probe_value(knob)
    if knob.family == "ptxas":
        relocatable = ["-c"] if knob.needs is knobs.Needs.RELOCATABLE else []
        argv = [tools["ptxas"], f"-arch={arch}", *relocatable, flag, "probe.ptx", "-o",
                f"{knob.name}.cubin"]
    else:
        argv = [tools["nvcc"], f"-arch={arch}", "-ptx", flag, "probe.cu", "-o", f"{knob.name}.ptx"]
    code, out = _run(argv, work)
    return knob.name, code == 0 and out == "", out.splitlines()[0] if out else f"exit {code}"


def _dryrun_facts(nvcc: str, work: str) -> tuple[str, str]:
    """(default SASS arch, the folder of nvcc's own tools), from --dryrun:
    the toolkit nvcc really uses, even behind a wrapper script."""
    _, out = _run([nvcc, "--dryrun", "-c", "probe.cu", "-o", "probe.o"], work)
    arch = re.search(r"ptxas\S*\s.*?-arch=(sm_\w+)", out)
    here = re.search(r"^#\$ _HERE_=(.*)$", out, re.M)
    folder = here.group(1).strip() if here else str(Path(nvcc).parent)
    return (arch.group(1) if arch else "sm_75"), folder


EVERY_ARCH = ("all", "all-major")      # -arch values that stand for several SASS targets


def _every_arch(nvcc: str, work: str, spelling: str) -> tuple[str, tuple[str, ...]]:
    """The SASS targets of `-arch=SPELLING`: the ptxas steps nvcc's --dryrun names
    (every one nvcc builds: `all` is each of --list-gpu-code, `all-major` a few)."""
    _, out = _run([nvcc, "--dryrun", f"-arch={spelling}", "-c", "probe.cu", "-o", "probe.o"], work)
    found = re.findall(r"^#\$ ptxas\S*\s.*?-arch=(sm_\w+)", out, re.M)
    return spelling, tuple(dict.fromkeys(found))


def probe(nvcc: Path) -> Toolkit:
    """Ask the real tools which knobs they take (about a second, once)."""
    import concurrent.futures
    import tempfile
    tools = {"nvcc": str(nvcc)}
    with tempfile.TemporaryDirectory(prefix="nvcc-evo-probe-") as work:
        Path(work, "probe.cu").write_text(PROBE_SOURCE)
        arch, bin_dir = _dryrun_facts(tools["nvcc"], work)
        tools["ptxas"] = str(Path(bin_dir) / "ptxas")
        code, out = _run([tools["nvcc"], f"-arch={arch}", "-ptx", "probe.cu", "-o", "probe.ptx"],
                         work)
        if code != 0:
            raise OSError(f"{nvcc} cannot compile a probe kernel: {out}")
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = list(pool.map(lambda k: _probe_knob(k, tools, arch, work),
                                    [k for k in knobs.KNOBS if k.name not in knobs.STEP_ONLY]))
            every = tuple(pool.map(lambda spelling: _every_arch(tools["nvcc"], work, spelling),
                                   EVERY_ARCH))
    accepted = frozenset(name for name, ok, _ in results if ok)
    rejected = tuple((name, why) for name, ok, why in results if not ok)
    return Toolkit(tools["nvcc"], tools["ptxas"], _version(nvcc), arch, accepted, rejected, every)


def load_toolkit(nvcc: Path) -> Toolkit:
    """The cached probe of this nvcc, probing on first use."""
    try:       # (no cache folder, a link in its place: probed, and not kept)
        data = json.loads(_cache_path(nvcc).read_text())
        return Toolkit(data["nvcc"], data["ptxas"], data["version"], data["default_arch"],
                       frozenset(data["accepted"]), tuple(tuple(r) for r in data["rejected"]),
                       tuple((spelling, tuple(archs)) for spelling, archs in data["every_arch"]))
    except BROKEN_FILE:
        pass
    toolkit = probe(nvcc)
    data = {"nvcc": toolkit.nvcc, "ptxas": toolkit.ptxas, "version": toolkit.version,
            "default_arch": toolkit.default_arch, "accepted": sorted(toolkit.accepted),
            "rejected": [list(r) for r in toolkit.rejected],
            "every_arch": [[spelling, list(archs)] for spelling, archs in toolkit.every_arch]}
    try:
        replace_file(_cache_path(nvcc), json.dumps(data, indent=1))
    except OSError:            # a cache folder that cannot be written: probed again next time
        pass
    return toolkit
