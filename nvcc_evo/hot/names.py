"""Kernel names in their spellings: mangled symbols, c++filt's and Nsight Systems'.

A cubin names a kernel by its mangled symbol; CUPTI reports the same; Nsight
Systems' kernel summary prints it demangled in its own spelling
(`void app::tile_gemm<(int)32>(const float *, const float *, float *, int)`),
c++filt in another (`void app::tile_gemm<32>(float const*, float const*,
float*, int)`). `normal` brings both to one text: template arguments without
their casts and suffixes, `const` after what it qualifies, no spaces but
between words, lambdas in c++filt's `{lambda(ARGS)#N}`. `base` is the
qualified name without template arguments or parameters, the last resort
when the spellings still differ.
"""
from __future__ import annotations

import re
import shutil
import subprocess

CASTS = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|unsigned|__int128)\)\s*(-?\d+)")
SUFFIXED = re.compile(r"\b(-?\d+)(?:ull|ul|ll|u|l)\b", re.I)
BOOLS = {"(bool)1": "true", "(bool)0": "false"}
LAMBDA = re.compile(r"\[lambda\((.*?)\) \(instance (\d+)\)\]")
TYPE = r"(?:(?:unsigned|signed|long|short)\s+)*[A-Za-z_][\w:]*(?:<[^<>]*>)?"
LEADING_CONST = re.compile(rf"\b(const|volatile)\s+({TYPE})")
SPACES = re.compile(r"\s+")
UNSPACED = re.compile(r"\s*([*&,()<>\[\]{}#])\s*")


def demangled(symbols: list[str]) -> dict[str, str]:
    """Each mangled symbol and c++filt's spelling of it (itself where there
    is no c++filt, or it is no C++ symbol: extern "C", a Triton entry)."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    cxx = [s for s in symbols if s.startswith("_Z")]
    spelled = dict(zip(symbols, symbols))
    if tool and cxx:
        try:
            done = subprocess.run([tool], input="\n".join(cxx) + "\n", capture_output=True, text=True, timeout=60)
            lines = done.stdout.splitlines()
            if done.returncode == 0 and len(lines) == len(cxx):
                spelled.update(zip(cxx, lines))
        except (OSError, subprocess.TimeoutExpired):
            pass
    return spelled


def normal(name: str) -> str:
    """One spelling of a demangled name, whichever tool demangled it."""
    text = LAMBDA.sub(lambda m: "{lambda(" + m.group(1) + ")#" + m.group(2) + "}", name)
    for cast, word in BOOLS.items():
        text = text.replace(cast, word)
    text = CASTS.sub(r"\1", text)
    text = SUFFIXED.sub(r"\1", text)
    text = LEADING_CONST.sub(r"\2 \1", text)
    text = UNSPACED.sub(r"\1", SPACES.sub(" ", text)).strip()
    return text[5:] if text.startswith("void ") else text


def base(name: str) -> str:
    """The qualified name alone: `app::tile_gemm` of `void app::tile_gemm<32>(float const*, ...)`."""
    text = normal(name)
    depth, cut = 0, len(text)
    for index, char in enumerate(text):
        if char in "<(" and depth == 0:
            cut = index
            break
    head = text[:cut]
    return head.rsplit(" ", 1)[-1]
