"""A ptxas call that the ACF certainly leaves as it is, known cheaply: the
ACF's cached index (nvcc_evo.driver.match.indexfile) lists its kernel units'
globs, and none names an `.entry` of the PTX. The shim then execs the real
ptxas at once, with no typed model, no pathlib, no toolkit table: a Triton
run compiles hundreds of kernels, most of which no unit names.

Only where the answer is certain: any call the full decision
(nvcc_evo.driver.dropin_ptxas.decide) might answer otherwise goes there (a
`--version`, a log to write, project settings beside the ACF, an ACF not
trusted, unreadable, with errors or not in the cache, a glob that names the
PTX). Imports os, re, json, zlib and fnmatch (kernelname) only (hashlib
only for a glob that names a PTX digest).
"""
from __future__ import annotations

import os
import re

from nvcc_evo.acf import kernelname
from nvcc_evo.driver.common import ACF_ENV, LOG_ENV, find_settings_file

TYPE_CHECKING = False
if TYPE_CHECKING:          # (every Triton ptxas call runs this first: no typing at run time)
    from collections.abc import Mapping

ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$]*)")
# ptxas's options that take a value, which may be the next word (`--maxrregcount 64`; ptxas --help,
# CUDA 13.0: those shown with `<...>`, and the cache modifiers, which take one though not shown so)
VALUE_OPTIONS = {"-o", "--output-file", "--gpu-name", "-arch", "--opt-level",
                 "--Ofast-compile", "-Ofc", "--allow-expensive-optimizations",
                 "-allow-expensive-optimizations",
                 "--def-load-cache", "-dlcm", "--def-store-cache", "-dscm", "--force-load-cache",
                 "-flcm",
                 "--force-store-cache", "-fscm", "--device-function-maxrregcount",
                 "-func-maxrregcount",
                 "--device-stack-protector", "-device-stack-protector", "--entry", "-e", "--fmad",
                 "-fmad",
                 "--input-as-string", "-ias", "--machine", "-m", "--maxntid", "-maxntid",
                 "--maxrregcount",
                 "-maxrregcount", "--minnctapersm", "-minnctapersm", "--options-file", "-optf",
                 "--position-independent-code", "-pic", "--register-usage-level", "-regUsageLevel",
                 "--sanitize", "-sanitize", "--split-compile", "-split-compile"}
OWN_OPTIONS = {"-v", "--verbose"}          # options a candidate's compile adds itself


def split_argv(argv: list[str]) -> tuple[str | None, list[str], list[str], list[str]]:
    """A ptxas command line's target, inputs, options (`--opt-level N` read
    as `-ON`) and the options a candidate's compile passes on."""
    arch, inputs, tokens, kept = None, [], [], []
    index = 0
    while index < len(argv):
        word = argv[index]
        name, eq, value = word.partition("=")
        if name in VALUE_OPTIONS and not eq and index + 1 < len(argv):
            value, index = argv[index + 1], index + 1
            word = f"{name}={value}"            # (ptxas takes each so: the option in one word)
        if name in ("--gpu-name", "-arch"):
            arch = value
        elif name == "--opt-level":
            tokens.append(f"-O{value}")
            kept.append(f"-O{value}")
        elif name in ("-o", "--output-file"):
            pass
        elif not word.startswith("-"):
            inputs.append(word)
        else:
            tokens.append(word)
            kept += [] if word in OWN_OPTIONS else [word]
        index += 1
    return arch, inputs, tokens, kept


def entries(data: bytes) -> tuple[str, ...]:
    """A PTX's `.entry` names."""
    return tuple(e.decode() for e in ENTRY.findall(data))


def kernel_globs(acf: str, environ: Mapping[str, str]) -> list[list[str]] | None:
    """The globs of each kernel unit of a trusted, readable ACF whose
    checked index is cached; None when that is not known here."""
    from nvcc_evo.driver.match import indexfile
    from nvcc_evo.system.files import cache_folder, read_regular
    from nvcc_evo.system.trust import untrusted
    try:
        if not environ.get(ACF_ENV) and untrusted(acf, environ):
            return None
        data, folder = read_regular(acf), cache_folder()
    except OSError:
        return None
    entry = indexfile.read(folder, data, acf)
    return entry.get("kernel_globs") if entry is not None and "units" in entry else None


def certain(argv: list[str], acf: str, environ: Mapping[str, str], cwd: str) -> bool:
    """Whether this call runs the real ptxas exactly as asked, and no more
    (nothing logged, nothing said), as the full decision would."""
    if "--version" in argv or environ.get(LOG_ENV) or find_settings_file(acf) is not None:
        return False
    globs = kernel_globs(acf, environ)
    if globs is None:
        return False
    _, inputs, _, _ = split_argv(argv)
    if not globs or len(inputs) != 1 or not inputs[0].endswith(".ptx"):
        return True
    try:
        with open(os.path.join(cwd, inputs[0]), "rb") as handle:
            data = handle.read()
    except OSError:
        return True                      # (ptxas says why)
    names = entries(data)
    digest = ""
    if any("@" in glob for unit in globs for glob in unit):
        import hashlib
        digest = hashlib.sha256(data).hexdigest()
    return not any(kernelname.matches(glob, names, digest) for unit in globs for glob in unit)
