"""Kernel names in their spellings: mangled symbols, c++filt's and Nsight Systems'.

A cubin names a kernel by its mangled symbol; CUPTI reports the same; Nsight
Systems' kernel summary prints it demangled in its own spelling
(`void app::tile_gemm<(int)32>(const float *, const float *, float *, int)`),
c++filt in another (`void app::tile_gemm<32>(float const*, float const*,
float*, int)`). `normal` brings both to one text: template arguments without
their casts and suffixes, `const` after what it qualifies, no spaces but
between words, lambdas in c++filt's `{lambda(ARGS)#N}`, an anonymous
namespace (c++filt's `(anonymous namespace)`, Nsight Systems' `<unnamed>`)
as `{anonymous}`.
Nsight Systems writes a parameter whose type is a template's parameter by
that parameter (`void for_each<app::run(float *)::[lambda(int) (instance
1)]>(int, T1)`, `const T1 *`), where c++filt writes the type: `shape` (the
spelling with every parameter list emptied) finds the candidates and `fits`
tells whether a name with such `T1`, `T2` stands for a symbol's spelling.
`base` is the qualified name without template arguments or parameters, the
last resort when the spellings still differ.
"""
from __future__ import annotations

import re
import shutil
import subprocess

CASTS = re.compile(r"\((?:unsigned |signed )?"
                   r"(?:int|long|long long|short|char|unsigned|__int128)\)\s*(-?\d+)")
SUFFIXED = re.compile(r"\b(-?\d+)(?:ull|ul|ll|u|l)\b", re.I)
BOOLS = {"(bool)1": "true", "(bool)0": "false"}
LAMBDA = re.compile(r"\[lambda\((.*?)\) \(instance (\d+)\)\]")
ANONYMOUS = ("(anonymous namespace)", "<unnamed>")   # an anonymous namespace: c++filt's, Nsight
                                                     # Systems'
TEMPLATE_PARAMETER = re.compile(r"\bT\d+\b")      # Nsight Systems' name of a template's parameter,
                                                  # for its type
OPENING, CLOSING = "(<[{", ")>]}"
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
            done = subprocess.run([tool], input="\n".join(cxx) + "\n", capture_output=True,
                                  text=True, timeout=60)
            lines = done.stdout.splitlines()
            if done.returncode == 0 and len(lines) == len(cxx):
                spelled.update(zip(cxx, lines))
        except (OSError, subprocess.TimeoutExpired):
            pass
    return spelled


def normal(name: str) -> str:
    """One spelling of a demangled name, whichever tool demangled it."""
    text = LAMBDA.sub(lambda m: "{lambda(" + m.group(1) + ")#" + m.group(2) + "}", name)
    for spelling in ANONYMOUS:
        text = text.replace(spelling, "{anonymous}")
    for cast, word in BOOLS.items():
        text = text.replace(cast, word)
    text = CASTS.sub(r"\1", text)
    text = SUFFIXED.sub(r"\1", text)
    text = LEADING_CONST.sub(r"\2 \1", text)
    text = SPACES.sub(" ", text).strip()
    return UNSPACED.sub(r"\1", text[5:] if text.startswith("void ") else text)


def base(name: str) -> str:
    """The qualified name alone: `app::tile_gemm` of `void app::tile_gemm<32>(float const*,
    ...)`."""
    text = normal(name)
    depth, cut = 0, len(text)
    for index, char in enumerate(text):
        if char in "<(" and depth == 0:
            cut = index
            break
    head = text[:cut]
    return head.rsplit(" ", 1)[-1]


def shape(name: str) -> str:
    """`normal` with every parameter list emptied: `for_each<app::run()::{lambda()#1}>()`, the same
    for a name that writes a template's parameter for its type and for one that writes the type."""
    kept, depth = [], 0
    for char in normal(name):
        depth -= char == ")"
        if depth <= 0:
            kept.append(char)
        depth += char == "("
    return "".join(kept)


def fits(profiled: str, symbol: str) -> bool:
    """Whether `profiled` (normal) names `symbol` (normal, c++filt's), each `T1`, `T2` in it
    standing for one type: a piece of `symbol` whose brackets balance and that holds no comma
    outside them."""
    pieces = [p.replace(" ", "") for p in TEMPLATE_PARAMETER.split(profiled)]
    symbol = symbol.replace(" ", "")  # (`T1 const&` for `float>const&`: no space after a bracket)
    if len(pieces) == 1:
        return pieces[0] == symbol
    seen: set[tuple[int, int]] = set()

    def rest(index: int, at: int) -> bool:          # pieces[index:] from symbol[at:], a type before
                                                    # each but the first
        if (index, at) in seen:
            return False
        seen.add((index, at))
        piece, depth = pieces[index], 0
        for end in range(at + 1, len(symbol) + 1):
            char = symbol[end - 1]
            depth += (char in OPENING) - (char in CLOSING)
            if depth < 0 or (depth == 0 and char == ","):
                return False
            if depth != 0 or not symbol.startswith(piece, end):
                continue
            after = end + len(piece)
            if rest(index + 1, after) if index + 1 < len(pieces) else after == len(symbol):
                return True
        return False

    return symbol.startswith(pieces[0]) and rest(1, len(pieces[0]))


WIDEST = 200        # characters of a kernel's name a table shows (the profile keeps the whole)


def shortened(name: str, widest: int = WIDEST) -> str:
    """A long demangled name as a table shows it: template arguments and parameter lists nested
    deeper than the kernel's own collapsed to `...` (deepest first, until it fits), then, if
    still too wide, its middle cut."""
    if len(name) <= widest:
        return name
    for spelling in ANONYMOUS:
        name = name.replace(spelling, "{anonymous}")
    depth = _deepest(name)
    while len(name) > widest and depth > 0:
        name, depth = _collapsed(name, depth), depth - 1
    if len(name) <= widest:
        return name
    keep = widest - 5
    return f"{name[:keep - keep // 3]} ... {name[len(name) - keep // 3:]}"


def _deepest(name: str) -> int:
    """How deep `name`'s brackets (`<`, `(`) nest, 0 for none."""
    depth = deepest = 0
    for char in name:
        if char in "<(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ">)" and depth:
            depth -= 1
    return deepest


def _collapsed(name: str, deepest: int) -> str:
    """`name` with what stands inside brackets opened at `deepest` or deeper as `...`."""
    out, depth = [], 0
    for char in name:
        if char in "<(":
            depth += 1
            if depth == deepest:
                out.append(char + "...")
            elif depth < deepest:
                out.append(char)
            continue
        if char in ">)" and depth:
            if depth <= deepest:
                out.append(char)
            depth -= 1
            continue
        if depth < deepest:
            out.append(char)
    return "".join(out)
