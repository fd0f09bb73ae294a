"""nvcc's command line as data, and a parser that reads it the way nvcc does.

The options are the table of nvcc_evo.driver.cmdline.nvcc_table (every option
of `nvcc --help`, checked against the real nvcc's help). The parser never
changes argv: it only reads it, so that the wrapper can exec the original
arguments plus its additions.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Mapping, NamedTuple

from nvcc_evo.driver.cmdline.nvcc_table import (ATTACHED, FLAG, LIST, OPTIONAL, OPTIONAL_VALUES,
                                                OPTIONS, VALUE, Takes)


_BY_SPELLING: dict[str, tuple[str, Takes]] = {}
for _long, _short, _takes in OPTIONS:
    _BY_SPELLING[_long] = (_long, _takes)
    _BY_SPELLING[_short] = (_long, _takes)

INPUT_SUFFIXES = (".cu", ".ptx", ".c", ".cc", ".cpp", ".cxx", ".gpu", ".o", ".obj", ".a", ".so",
                  ".cubin", ".fatbin", ".i", ".ii", ".lib", ".res")


class Opt(NamedTuple):
    """One option as given: canonical long name, its value, where it came from."""

    name: str
    value: str | None
    origin: str = "argv"          # argv, an options file's path, NVCC_APPEND_FLAGS, ...

    def items(self) -> list[str]:
        """The value split as nvcc splits lists."""
        if self.value is None:
            return []
        takes = _BY_SPELLING.get(self.name, (self.name, VALUE))[1]
        return split_list(self.value) if takes is LIST else [self.value]


class NvccCall(NamedTuple):
    argv: tuple[str, ...]
    options: tuple[Opt, ...]
    inputs: tuple[str, ...]
    unknown: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()   # unreadable options files, missing values
    extra: tuple[Opt, ...] = ()     # from options files and the environment

    def all_options(self) -> tuple[Opt, ...]:
        return self.options + self.extra

    def has(self, name: str) -> bool:
        return any(o.name == name for o in self.all_options())

    def values(self, name: str) -> list[str]:
        return [item for o in self.all_options() if o.name == name for item in o.items()]

    def last(self, name: str) -> str | None:
        found = self.values(name)
        return found[-1] if found else None


def split_list(value: str) -> list[str]:
    """Split on commas, except inside double quotes or [] (nvcc's rule)."""
    items: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for ch in value:
        if ch == '"':
            quoted = not quoted
        elif ch == "[" and not quoted:
            depth += 1
        elif ch == "]" and not quoted:
            depth -= 1
        if ch == "," and not quoted and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item for item in items if item != ""]


def tokenize(text: str) -> list[str]:
    """nvcc's tokenising of options files: blanks separate, double quotes
    group, a backslash escapes the next character, single quotes are plain."""
    tokens, current, quoted, started, i = [], [], False, False, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i + 1])
            started, i = True, i + 2
            continue
        if ch == '"':
            quoted, started = not quoted, True
        elif ch.isspace() and not quoted:
            if started:
                tokens.append("".join(current))
            current, started = [], False
        else:
            current.append(ch)
            started = True
        i += 1
    if started:
        tokens.append("".join(current))
    return tokens


def _lookup(arg: str) -> tuple[str, Takes, str | None] | None:
    """(long name, takes, glued value) for an option argument, or None."""
    name, eq, value = arg.partition("=")
    if name in _BY_SPELLING:
        long, takes = _BY_SPELLING[name]
        return long, takes, value if eq else None
    for short in ATTACHED:
        if arg.startswith(short) and len(arg) > len(short):
            long, takes = _BY_SPELLING[short]
            return long, takes, arg[len(short):]
    return None


def _read_options(args: list[str], origin: str, call: dict, cwd: str = "") -> None:
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            call["inputs"].append(arg)
            continue
        found = _lookup(arg)
        if found is None:
            call["unknown"].append(arg)
            continue
        long, takes, value = found
        if takes is OPTIONAL:
            if value is None and i < len(args) and args[i] in OPTIONAL_VALUES[long]:
                value, i = args[i], i + 1
            call["options"].append(Opt(long, value, origin))
            continue
        if takes is not FLAG and value is None:
            if i >= len(args):
                call["problems"].append(f"{arg} needs a value")
                continue
            value, i = args[i], i + 1
        call["options"].append(Opt(long, value if takes is not FLAG else None, origin))
        if long == "--options-file" and value is not None:       # (it takes a value)
            for path in split_list(value):
                _read_options_file(path, call, cwd)


OPTIONS_FILES_DEPTH = 16      # nvcc: "Too many options file opened" for a file that names itself


def _read_options_file(path: str, call: dict, cwd: str) -> None:
    depth = call.get("depth", 0) + 1
    if depth > OPTIONS_FILES_DEPTH:
        call["problems"].append(f"options files nested more than {OPTIONS_FILES_DEPTH} deep "
                                f"({path})")
        return
    try:
        text = (Path(cwd) / path).read_text()  # relative to the call's folder, as nvcc reads it
    except OSError as error:
        call["problems"].append(f"cannot read options file {path}: {error.strerror}")
        return
    nested: dict = {"options": [], "inputs": call["inputs"], "unknown": call["unknown"],
                    "problems": call["problems"], "depth": depth}
    nested["extra"] = nested["options"]     # (a file it names: its options in place, in order)
    _read_options(tokenize(text), path, nested, cwd)
    call["extra"].extend(nested["options"])


def parse_call(argv: list[str], environ: Mapping[str, str] | None = None,
               cwd: str | os.PathLike = "") -> NvccCall:
    """Read an nvcc command line (and options files, NVCC_PREPEND_FLAGS and
    NVCC_APPEND_FLAGS, which nvcc itself applies); a relative options file
    is read from `cwd`, the folder the call runs in (default: this process's)."""
    environ = os.environ if environ is None else environ
    call: dict[str, list] = {"options": [], "inputs": [], "unknown": [], "problems": [],
                             "extra": []}
    _read_options(list(argv), "argv", call, os.fspath(cwd))
    for variable in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        env_call: dict[str, list] = {"options": [], "inputs": [], "unknown": call["unknown"],
                    "problems": call["problems"]}
        _read_options(tokenize(environ.get(variable, "")), variable, env_call)
        call["extra"].extend(env_call["options"])
        call["inputs"].extend(env_call["inputs"])
    # Options files read from argv are "extra" too; keep argv's own options apart.
    own = [o for o in call["options"] if o.origin == "argv"]
    return NvccCall(tuple(argv), tuple(own), tuple(call["inputs"]), tuple(call["unknown"]),
                    tuple(call["problems"]), tuple(call["extra"]))


def rebuild_argv(argv: list[str], drop: set[str], keep_input: str | None,
                 cwd: str | os.PathLike = "") -> list[str]:
    """`argv` with the options named in `drop` (canonical long names) and
    every input but `keep_input` left out (None: every input stays); options
    files are expanded in place so that nothing in them can override what the
    caller adds."""
    out = []
    for long, value, words in _options(argv, cwd):
        is_input = long == ""
        if (keep_input is None or value == keep_input) if is_input else long not in drop:
            out.extend(words)
    return out


# The host compiler's own options that run a program or load code (gcc's -B and -wrapper, plugins,
# spec files; clang's -Xclang -load, its toolchain): given through -Xcompiler, they run what a
# project names.
HOST_RUNS = ("-B", "-wrapper", "-fplugin", "-specs", "--specs", "-Xclang", "-load",
             "--gcc-toolchain", "-ccc-")


def without_programs(argv: list[str], cwd: str | os.PathLike = "") -> tuple[list[str], list[str]]:
    """`argv` (its options files expanded) without what names a program nvcc
    or its host compiler would run or load: `-ccbin`'s host compiler, and the
    host compiler's options that run or load code (`HOST_RUNS`, given through
    `-Xcompiler`); and the options left out, each as it was written."""
    kept: list[str] = []
    left: list[str] = []
    for long, value, words in _options(argv, cwd):
        runs = long == "--compiler-bindir" or (long == "--compiler-options" and any(
            option.startswith(HOST_RUNS) for option in split_list(value or "")))
        if runs:
            left.append(" ".join(words))
        else:
            kept.extend(words)
    return kept, left


def _options(argv: list[str], cwd: str | os.PathLike,
             depth: int = 0) -> Iterator[tuple[str | None, str | None, list[str]]]:
    """(canonical long name, value, words) of each option of `argv`, options
    files read in place; an input is ("", itself, [itself]), an option this
    table does not know (None, itself, [itself])."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        found = None if arg == "-" or not arg.startswith("-") else _lookup(arg)
        if found is None:
            yield ("" if arg == "-" or not arg.startswith("-") else None), arg, [arg]
            continue
        long, takes, value = found
        words = [arg]
        takes_next = takes in (VALUE, LIST) or (takes is OPTIONAL and i < len(argv)
                                                and argv[i] in OPTIONAL_VALUES[long])
        if value is None and takes_next and i < len(argv):
            words.append(argv[i])
            value, i = argv[i], i + 1
        if long == "--options-file" and depth < OPTIONS_FILES_DEPTH:
            for path in split_list(value or ""):
                try:
                    text = (Path(cwd) / path).read_text()
                except OSError:
                    yield long, value, words
                    continue
                yield from _options(tokenize(text), cwd, depth + 1)
            continue
        yield long, value, words
