"""The injection library: found or built once per CUPTI release and C source.

CUPTI comes from the folder NVCC_EVO_CUPTI names (one with include/ and
lib/ or lib64/: a named folder that holds none is an error, never passed
by), else the nvidia-cuda-cupti wheel (`pip install 'nvcc-evo[profile]'`:
its include/cupti.h and lib/libcupti.so.N under the `nvidia` namespace
package), else the toolkit's extras/CUPTI or its own include/ and lib64/.
cupti.h includes cuda.h: the toolkit's include folder, as nvcc's dry run
names it.
The library is compiled by the system's C compiler (CC, else cc, else gcc)
into the user's cache folder as `inject-DIGEST.so` (the digest of the source,
the CUPTI release and where it lies), linked to that libcupti by its path
(an rpath), and moved into place by one rename: two runs at once never see
half a library.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.system.files import cache_folder
from nvcc_evo.system.leftovers import private_folder, remove_private

SOURCE = Path(__file__).with_name("inject.c")
CUPTI_ENV = "NVCC_EVO_CUPTI"
INSTALL = "pip install 'nvcc-evo[profile]'"


class Cupti(NamedTuple):
    """A CUPTI to build against: its headers' folder, its library, its release."""

    include: str
    library: str
    release: str


def _release(include: Path, library: Path) -> str:
    """The wheel's version where a wheel installed it, else the header's CUPTI_API_VERSION and
    the file's name."""
    # (a wheel's: site-packages/nvidia/cu13/lib/libcupti.so)
    site = library.parents[3] if len(library.parents) > 3 else None
    wheels = sorted(site.glob("nvidia_cuda_cupti-*.dist-info")) if site is not None else []
    for info in wheels:
        return info.name[len("nvidia_cuda_cupti-"):-len(".dist-info")]
    try:
        text = (include / "cupti_version.h").read_text(errors="replace")
    except OSError:
        text = ""
    found = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", text)
    return f"api {found.group(1) if found else 'unknown'} ({library.name})"


def _in_folder(root: Path) -> Cupti | None:
    include = root / "include"
    if not (include / "cupti.h").is_file():
        return None
    for lib in ("lib", "lib64"):
        found = sorted((root / lib).glob("libcupti.so*"), key=lambda p: (len(p.name), p.name))
        if found:
            library = found[-1] if found[0].name == "libcupti.so" and len(found) > 1 else found[0]
            return Cupti(str(include), str(library), _release(include, library))
    return None


def _roots(environ: Mapping[str, str], toolkit: str | None) -> list[Path]:
    roots: list[Path] = []
    try:
        import nvidia             # the namespace package pip's CUDA wheels install into
        roots += sorted(p for base in getattr(nvidia, "__path__", ())
                        for p in Path(base).iterdir() if p.is_dir())
    except ImportError:
        pass
    # (a toolkit installer's extras/CUPTI; Linux packages put it among the toolkit's own)
    if toolkit:
        roots += [Path(toolkit) / "extras" / "CUPTI", Path(toolkit)]
    return roots


def find_cupti(environ: Mapping[str, str], toolkit: str | None) -> Cupti:
    """The CUPTI NVCC_EVO_CUPTI names, else the first of the wheels and the toolkit;
    EnvironmentProblem when there is none, or the named folder holds none (another CUPTI is not
    taken in its place silently)."""
    named = environ.get(CUPTI_ENV)
    if named:
        found = _in_folder(Path(named))
        if found is None:
            raise EnvironmentProblem(f"{CUPTI_ENV}={named} holds no include/cupti.h and "
                                     "lib/libcupti.so (or lib64/): name a folder that does, or "
                                     f"unset it to use the nvidia-cuda-cupti wheel ({INSTALL}) or "
                                     "the toolkit's CUPTI")
        return found
    for root in _roots(environ, toolkit):
        found = _in_folder(root)
        if found is not None:
            return found
    raise EnvironmentProblem(f"no CUPTI found: kernel times need NVIDIA's CUPTI library: {INSTALL} "
                             "(or name a folder holding include/cupti.h and lib/libcupti.so in "
                             f"{CUPTI_ENV})")


def toolkit_paths(nvcc: str) -> tuple[str | None, tuple[str, ...]]:
    """The toolkit's root and include folders, as nvcc's dry run names them (TOP, INCLUDES)."""
    try:
        done = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None, ()
    top = re.search(r"^#\$ TOP=(.*)$", done.stderr, re.M)
    includes = re.search(r'^#\$ INCLUDES="(.*?)"', done.stderr, re.M)
    parts = includes.group(1).split() if includes else []
    folders = tuple(part[2:] for part in parts if part.startswith("-I"))
    return (os.path.normpath(top.group(1)) if top else None), folders


def compiler(environ: Mapping[str, str]) -> str:
    for name in (environ.get("CC"), "cc", "gcc"):
        found = shutil.which(name) if name else None
        if found:
            return found
    raise EnvironmentProblem("no C compiler (CC, cc or gcc) to build the kernel-time library with: "
                             "install one (the host compiler nvcc uses will do)")


def library(environ: Mapping[str, str], nvcc: str) -> str:
    """The injection library's path, built first where this CUPTI and source have none yet."""
    top, includes = toolkit_paths(nvcc)
    cupti = find_cupti(environ, top)
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + "\0".join([cupti.release, os.path.realpath(cupti.library),
                                                *includes]).encode()).hexdigest()[:16]
    target = Path(cache_folder()) / f"inject-{digest}.so"
    if target.is_file() and not target.is_symlink():
        return str(target)
    _build(environ, cupti, includes, target)
    return str(target)


def _build(environ: Mapping[str, str], cupti: Cupti, includes: tuple[str, ...],
           target: Path) -> None:
    # (one file system: a rename moves it)
    work = private_folder("inject", parent=str(target.parent))
    try:
        made = Path(work) / target.name
        lib = os.path.dirname(os.path.realpath(cupti.library))
        command = [compiler(environ), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                   "-o", str(made), str(SOURCE), "-I", cupti.include,
                   *(f"-I{folder}" for folder in includes),
                   os.path.realpath(cupti.library), f"-Wl,-rpath,{lib}", "-lpthread"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise EnvironmentProblem(f"cannot build the kernel-time library: {error}") from None
        if done.returncode != 0:
            said = "\n".join(f"    | {line}" for line in done.stderr.strip().splitlines()[-8:])
            raise EnvironmentProblem("building the kernel-time library against CUPTI "
                                     f"{cupti.release} ({cupti.include}) failed:\n{said}")
        # (the cache folder and the private folder: one file system in practice)
        os.replace(made, target)
    except OSError as error:
        raise EnvironmentProblem(f"cannot keep the kernel-time library in {target.parent}: "
                                 f"{error}") from None
    finally:
        remove_private(work)
