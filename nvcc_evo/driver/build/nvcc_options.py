"""nvcc's command line as data, and a parser that reads it the way nvcc does.

OPTIONS lists every option of `nvcc --help` (CUDA 13.0, then 13.5's additions): long spelling, short
spelling, and whether it takes a value (LIST values split on commas, except
inside double quotes or []). tests/test_nvcc_options.py checks the table
against the real nvcc's help. The parser never changes argv: it only reads it,
so that the wrapper can exec the original arguments plus its additions.
"""
from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Mapping, NamedTuple


class Takes(Enum):
    FLAG = "flag"      # no value
    VALUE = "value"    # one value: `-o out`, `-o=out`, `--output-file out`
    LIST = "list"      # a value that splits on commas: `-Xptxas -v,-O2`
    OPTIONAL = "optional"  # takes the next argument only if it is one of its values


FLAG, VALUE, LIST, OPTIONAL = Takes.FLAG, Takes.VALUE, Takes.LIST, Takes.OPTIONAL

# Values an OPTIONAL option takes from the next argument (`-Ofc max`, `-Ofc -c`).
OPTIONAL_VALUES = {
    "--Ofast-compile": ("0", "min", "mid", "max"),
    "--host-linker-script": ("use-lcs", "gen-lcs"),
}

# (long, short, takes), in `nvcc --help` order.
OPTIONS: tuple[tuple[str, str, Takes], ...] = (
("--cuda", "-cuda", FLAG),
    ("--cubin", "-cubin", FLAG),
    ("--fatbin", "-fatbin", FLAG),
    ("--ptx", "-ptx", FLAG),
    ("--optix-ir", "-optix-ir", FLAG),
    ("--ltoir", "-ltoir", FLAG),
    ("--preprocess", "-E", FLAG),
    ("--generate-dependencies", "-M", FLAG),
    ("--generate-nonsystem-dependencies", "-MM", FLAG),
    ("--generate-dependencies-with-compile", "-MD", FLAG),
    ("--generate-nonsystem-dependencies-with-compile", "-MMD", FLAG),
    ("--dependency-output", "-MF", VALUE),      # --help shows no <file>, but it takes one
    ("--generate-dependency-targets", "-MP", FLAG),
    ("--compile", "-c", FLAG),
    ("--device-c", "-dc", FLAG),
    ("--device-w", "-dw", FLAG),
    ("--device-link", "-dlink", FLAG),
    ("--link", "-link", FLAG),
    ("--lib", "-lib", FLAG),
    ("--run", "-run", FLAG),
    ("--output-file", "-o", VALUE),
    ("--pre-include", "-include", LIST),
    ("--objdir-as-tempdir", "-objtemp", FLAG),
    ("--library", "-l", LIST),
    ("--define-macro", "-D", LIST),
    ("--undefine-macro", "-U", LIST),
    ("--include-path", "-I", LIST),
    ("--system-include", "-isystem", LIST),
    ("--library-path", "-L", LIST),
    ("--output-directory", "-odir", VALUE),
    ("--compiler-bindir", "-ccbin", VALUE),
    ("--allow-unsupported-compiler", "-allow-unsupported-compiler", FLAG),
    ("--archiver-binary", "-arbin", VALUE),
    ("--cudart", "-cudart", VALUE),
    ("--cudadevrt", "-cudadevrt", VALUE),
    ("--libdevice-directory", "-ldir", VALUE),
    ("--target-directory", "-target-dir", VALUE),
    ("--use-local-env", "-use-local-env", FLAG),
    ("--force-cl-env-setup", "-force-cl-env-setup", FLAG),
    ("--profile", "-pg", FLAG),
    ("--debug", "-g", FLAG),
    ("--device-debug", "-G", FLAG),
    ("--generate-line-info", "-lineinfo", FLAG),
    ("--optimization-info", "-opt-info", LIST),
    ("--optimize", "-O", VALUE),
    ("--Ofast-compile", "-Ofc", OPTIONAL),
    ("--dopt", "-dopt", VALUE),
    ("--dlink-time-opt", "-dlto", FLAG),
    ("--lto", "-lto", FLAG),
    ("--gen-opt-lto", "-gen-opt-lto", FLAG),
    ("--ftemplate-backtrace-limit", "-ftemplate-backtrace-limit", VALUE),
    ("--ftemplate-depth", "-ftemplate-depth", VALUE),
    ("--no-exceptions", "-noeh", FLAG),
    ("--shared", "-shared", FLAG),
    ("--x", "-x", VALUE),
    ("--std", "-std", VALUE),
    ("--no-host-device-initializer-list", "-nohdinitlist", FLAG),
    ("--no-host-device-move-forward", "-nohdmoveforward", FLAG),
    ("--expt-relaxed-constexpr", "-expt-relaxed-constexpr", FLAG),
    ("--extended-lambda", "-extended-lambda", FLAG),
    ("--expt-extended-lambda", "-expt-extended-lambda", FLAG),
    ("--machine", "-m", VALUE),
    ("--m64", "-m64", FLAG),
    ("--compiler-options", "-Xcompiler", LIST),
    ("--linker-options", "-Xlinker", LIST),
    ("--archive-options", "-Xarchive", LIST),
    ("--ptxas-options", "-Xptxas", LIST),
    ("--nvlink-options", "-Xnvlink", LIST),
    ("--static-global-template-stub", "-static-global-template-stub", VALUE),
    ("--device-entity-has-hidden-visibility", "-device-entity-has-hidden-visibility", VALUE),
    ("--forward-unknown-to-host-compiler", "-forward-unknown-to-host-compiler", FLAG),
    ("--forward-unknown-to-host-linker", "-forward-unknown-to-host-linker", FLAG),
    ("--forward-unknown-opts", "-forward-unknown-opts", FLAG),
    ("--dont-use-profile", "-noprof", FLAG),
    ("--dryrun", "-dryrun", FLAG),
    ("--verbose", "-v", FLAG),
    ("--threads", "-t", VALUE),
    ("--split-compile", "-split-compile", VALUE),
    ("--split-compile-extended", "-split-compile-extended", VALUE),
    ("--fdevice-syntax-only", "-fdevice-syntax-only", FLAG),
    ("--fdevice-time-trace", "-fdevice-time-trace", VALUE),
    ("--keep", "-keep", FLAG),
    ("--keep-dir", "-keep-dir", VALUE),
    ("--save-temps", "-save-temps", FLAG),
    ("--clean-targets", "-clean", FLAG),
    ("--time", "-time", VALUE),
    ("--run-args", "-run-args", LIST),
    ("--input-drive-prefix", "-idp", VALUE),
    ("--dependency-drive-prefix", "-ddp", VALUE),
    ("--drive-prefix", "-dp", VALUE),
    ("--dependency-target-name", "-MT", VALUE),
    ("--no-align-double", "--no-align-double", FLAG),
    ("--no-device-link", "-nodlink", FLAG),
    ("--gpu-architecture", "-arch", VALUE),
    ("--gpu-code", "-code", LIST),
    ("--generate-code", "-gencode", LIST),
    ("--relocatable-device-code", "-rdc", VALUE),
    ("--entries", "-e", LIST),
    ("--maxrregcount", "-maxrregcount", VALUE),
    ("--use_fast_math", "-use_fast_math", FLAG),
    ("--ftz", "-ftz", VALUE),
    ("--prec-div", "-prec-div", VALUE),
    ("--prec-sqrt", "-prec-sqrt", VALUE),
    ("--fmad", "-fmad", VALUE),
    ("--extra-device-vectorization", "-extra-device-vectorization", FLAG),
    ("--default-stream", "-default-stream", VALUE),
    ("--disable-warnings", "-w", FLAG),
    ("--keep-device-functions", "-keep-device-functions", FLAG),
    ("--source-in-ptx", "-src-in-ptx", FLAG),
    ("--restrict", "-restrict", FLAG),
    ("--Wreorder", "-Wreorder", FLAG),
    ("--Wdefault-stream-launch", "-Wdefault-stream-launch", FLAG),
    ("--Wmissing-launch-bounds", "-Wmissing-launch-bounds", FLAG),
    ("--Wext-lambda-captures-this", "-Wext-lambda-captures-this", FLAG),
    ("--Wno-deprecated-declarations", "-Wno-deprecated-declarations", FLAG),
    ("--Wno-deprecated-gpu-targets", "-Wno-deprecated-gpu-targets", FLAG),
    ("--Werror", "-Werror", LIST),
    ("--resource-usage", "-res-usage", FLAG),
    ("--extensible-whole-program", "-ewp", FLAG),
    ("--no-compress", "-no-compress", FLAG),
    ("--qpp-config", "-qpp-config", VALUE),   # likewise
    ("--compile-as-tools-patch", "-astoolspatch", FLAG),
    ("--list-gpu-code", "-code-ls", FLAG),
    ("--list-gpu-arch", "-arch-ls", FLAG),
    ("--display-error-number", "-err-no", FLAG),
    ("--no-display-error-number", "-no-err-no", FLAG),
    ("--diag-error", "-diag-error", LIST),
    ("--diag-suppress", "-diag-suppress", LIST),
    ("--diag-warn", "-diag-warn", LIST),
    ("--host-linker-script", "-hls", OPTIONAL),
    ("--augment-host-linker-script", "-aug-hls", FLAG),
    ("--relocatable-link", "-r", FLAG),
    ("--brief-diagnostics", "-brief-diag", VALUE),
    ("--jump-table-density", "-jtd", VALUE),
    ("--relocatable-ptx", "-reloc-ptx", FLAG),
    ("--device-stack-protector", "-device-stack-protector", VALUE),
    ("--compress-mode", "-compress-mode", VALUE),
    ("--frandom-seed", "-frandom-seed", VALUE),
    ("--sanitize", "-sanitize", VALUE),
    ("--jobserver", "-jobserver", FLAG),
    ("--help", "-h", FLAG),
    ("--version", "-V", FLAG),
    ("--options-file", "-optf", LIST),
    # Added in CUDA 13.5 (13.0 rejects them; read so that a 13.5 build is understood).
    ("--enable-tile", "-enable-tile", FLAG),
    ("--tile-preview", "-tile-preview", VALUE),
    ("--tile-only", "-tile-only", FLAG),
    ("--simt-only", "-simt-only", FLAG),
    ("--tilebc", "-tilebc", FLAG),
    ("--tilecubin", "-tilecubin", FLAG),
    ("--tilefatbin", "-tilefatbin", FLAG),
    ("--tileiras-options", "-Xtileiras", LIST),
    ("--stdlib", "-stdlib", VALUE),
    ("--apply-controls", "-apply-controls", VALUE),
    ("--nvprune-options", "-Xnvprune", LIST),
    ("--verbose2", "-v2", FLAG),
    ("--fmax-errors", "-fmax-errors", VALUE),
    ("--fdevice-time-trace-granularity", "-fdevice-time-trace-granularity", VALUE),
    ("--prune", "-prune", FLAG),
    ("--Wconversion", "-Wconversion", FLAG),
    ("--concat", "-concat", FLAG),
    ("--fdevice-sanitize", "-fdevice-sanitize", VALUE),
    ("--skip-ptx-semantics-check", "-skip-ptx-semantics-check", FLAG),
    ("--utf-8", "-utf-8", FLAG),
    ("--safety-compatibility", "-safety-compat", FLAG),
)

# Short options whose value may be glued on: -DX=1, -I/path, -lm, -O3.
ATTACHED = ("-D", "-U", "-I", "-L", "-l", "-O")

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


def _read_options(args: list[str], origin: str, call: dict) -> None:
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
                _read_options_file(path, call)


def _read_options_file(path: str, call: dict) -> None:
    try:
        text = Path(path).read_text()
    except OSError as error:
        call["problems"].append(f"cannot read options file {path}: {error.strerror}")
        return
    nested = {"options": [], "inputs": call["inputs"], "unknown": call["unknown"],
              "problems": call["problems"]}
    _read_options(tokenize(text), path, nested)
    call["extra"].extend(nested["options"])


def parse_call(argv: list[str], environ: Mapping[str, str] | None = None) -> NvccCall:
    """Read an nvcc command line (and options files, NVCC_PREPEND_FLAGS and
    NVCC_APPEND_FLAGS, which nvcc itself applies)."""
    environ = os.environ if environ is None else environ
    call: dict[str, list] = {"options": [], "inputs": [], "unknown": [], "problems": [], "extra": []}
    _read_options(list(argv), "argv", call)
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


def rebuild_argv(argv: list[str], drop: set[str], keep_input: str | None) -> list[str]:
    """`argv` with the options named in `drop` (canonical long names) and
    every input but `keep_input` left out (None: every input stays); options
    files are expanded in place so that nothing in them can override what the
    caller adds."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            if keep_input is None or arg == keep_input:
                out.append(arg)
            continue
        found = _lookup(arg)
        if found is None:
            out.append(arg)
            continue
        long, takes, value = found
        words = [arg]
        takes_next = takes in (VALUE, LIST) or (takes is OPTIONAL and i < len(argv)
                                                and argv[i] in OPTIONAL_VALUES[long])
        if value is None and takes_next and i < len(argv):
            words.append(argv[i])
            value, i = argv[i], i + 1
        if long == "--options-file":
            for path in split_list(value or ""):
                try:
                    out.extend(rebuild_argv(tokenize(Path(path).read_text()), drop, keep_input))
                except OSError:
                    out.extend(words)
            continue
        if long not in drop:
            out.extend(words)
    return out
