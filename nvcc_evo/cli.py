"""Command line: nvcc-evo's own verbs, else the drop-in nvcc wrapper.

A verb must come first (`nvcc-evo --acf-check FILE`); any other command line
belongs to nvcc and goes to the wrapper untouched. Every verb is spelled so
that it can never be an nvcc option (tests/test_cli.py compares them with
`nvcc --help`). Here an EvoError that reaches the top becomes a message and
an exit code (nvcc_evo.errors says where else one is caught); exit codes are
listed in nvcc_evo.errors.ExitCode and in the README.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the compile path imports neither typing nor argparse)
    import argparse


VERBS = ("--acf-check", "--acf-fmt", "--explain", "--retune", "--report", "--sass", "--hot",
         "--evo-help", "--evo-version")

HELP = """\
usage: nvcc-evo [nvcc options and files]       compile as nvcc, with the ACF's tuned flags
       nvcc-evo --acf-check ACF...             parse and check ACF files
       nvcc-evo --acf-fmt [--check] ACF...     rewrite ACF files in canonical form
                                               (--check: change nothing, exit 1 if not canonical)
       nvcc-evo --explain [nvcc options and files]
                                               what compiling would add, and why (compiles nothing)
       nvcc-evo --retune [UNIT-GLOB...] [--all] [--acf FILE] [--dry-run] [--full-protocol]
{retune flags}
                                               search each stale unit's knobs and write them to
                                               the ACF (defaults: nvcc-evo.toml beside the ACF,
                                               or pyproject.toml's [tool.nvcc-evo]; the
                                               environment and the command line win)
       nvcc-evo --report [UNIT-GLOB...] [--acf FILE] [--store JSONL...] [--out FILE]
                                               an HTML page of the results: chosen knobs against
                                               the baseline, fronts, convergence, failures, what
                                               is stale
                                               (no GPU, no compile; plots need nvcc-evo[report])
       nvcc-evo --sass [UNIT-GLOB...] [--target sm_XX] [--acf FILE] [--run-recorded]
                                               per kernel, the build's own flags against the ACF
                                               entry: registers, occupancy, spills, instructions,
                                               the mix
                                               (compiles; the mix needs nvdisasm: nvcc-evo[sass])
       nvcc-evo --hot [--acf FILE] [--write [--min-share PCT] [--build CMD]] -- COMMAND [ARGS...]
       nvcc-evo --hot --from FILE [--acf FILE] [--write [--min-share PCT] [--build CMD] [--run CMD]]
                                               run the command once recording its kernels
                                               (CUPTI: nvcc-evo[profile]), or read a saved profile
                                               or nsys's kernel summary CSV: kernels by GPU time,
                                               each with the unit that builds it; --write adds
                                               unit blocks for the hot ones
       nvcc-evo --evo-version                  print nvcc-evo's version
       nvcc-evo --evo-help                     this help (--help is nvcc's own)

exit codes: 0 ok, 1 invalid input, 2 usage, 3 environment (no nvcc, no GPU), 130 interrupted;
in compile mode, nvcc's own exit code.

an ACF (nvcc-evo.acf, found walking up from each source's folder) in short:
    acf 1
    unit "src/gemm.cu" {                      # globs, relative to the ACF's folder
        pin nvcc.use_fast_math = false        # a hand decision: never searched
        search {                              # what --retune explores
            define.TILE in {16, 32, 64}       # a #define of the source (-DTILE=...)
            ptxas.maxrregcount in 32..128 step 32
        }
        tune { minimize runtime }             # or energy, registers, spills, a bench metric...
        bench {                               # how to run it: a kernel launch, or your own harness:
            command "make -s NVCC=nvcc-evo bench && ./bench"
            metric runtime "time ([0-9.]+) ms" take min
        }
        target sm_90 { ptxas.maxrregcount = 64 }   # written by --retune, with provenance
    }
the whole language (every statement, objectives, bench forms): docs/acf.md in nvcc-evo's sources;
`nvcc-evo --acf-check FILE` checks a file, with each error located.

knobs (search them, pin them, or set them in a target block):
"""



def visible(text: str) -> str:
    """Every line printed here, hidden characters escaped (system.say.visible,
    imported only when a line is printed: the compile path stays lean)."""
    from nvcc_evo.system.say import visible as escaped
    return escaped(text)

def help_text() -> str:
    """HELP with the search settings' flags (from the settings' table), then
    one line per knob of the table: its name, flag and values."""
    from nvcc_evo.acf.knobs import KNOBS
    from nvcc_evo.retune.scope.options import usage
    lines: list[str] = []
    for item in usage():  # `[--flag VALUE]` items, none broken, lines of at most 110 characters
        if lines and len(lines[-1]) + 1 + len(item) <= 110:
            lines[-1] += " " + item
        else:
            lines.append(" " * 16 + item)
    width = max(len(knob.name) for knob in KNOBS)
    spelled = max(len(knob.flag_text()) for knob in KNOBS)
    rows = [f"    {k.name:<{width}}  {k.flag_text():<{spelled}}  {k.values_text()}" for k in KNOBS]
    rows.append(f"    {'define.NAME':<{width}}  {'-DNAME=V':<{spelled}}  C identifiers and number "
                "literals")
    return HELP.replace("{retune flags}", "\n".join(lines)) + "\n".join(rows) + "\n"


def _files_parser(verb: str, with_check: bool = False) -> argparse.ArgumentParser:
    import argparse   # verbs only: the compile path stays lean
    parser = argparse.ArgumentParser(prog=f"nvcc-evo {verb}")
    if with_check:
        parser.add_argument("--check", action="store_true",
                            help="change nothing; exit 1 if a file is not canonical")
    parser.add_argument("files", nargs="+", metavar="ACF")
    return parser


def retune(rest: list[str]) -> int:
    import argparse
    from nvcc_evo.retune.scope.options import Request, add_flags
    from nvcc_evo.retune.run import run_retune
    parser = argparse.ArgumentParser(prog="nvcc-evo --retune")
    parser.add_argument("globs", nargs="*", metavar="UNIT-GLOB", help="retune units whose globs "
                                                                      "match, stale or not")
    parser.add_argument("--all", action="store_true", help="retune every unit, stale or not")
    parser.add_argument("--acf", help="the ACF (default: nearest nvcc-evo.acf here or above)")
    add_flags(parser)            # one per search setting, from the settings' table
    parser.add_argument("--dry-run", action="store_true", help="list what would be retuned, and "
                                                               "why; tune nothing")
    parser.add_argument("--full-protocol", action="store_true",
                        help="measure every candidate the whole way (energy, every timed launch, "
                             "each compiled from source): no racing, no PTX reuse, no overlap; for "
                             "comparisons")
    args = vars(parser.parse_args(rest))
    _readable_acf(args["acf"])
    args["protocol"] = "full" if args.pop("full_protocol") else "fast"
    given = {name: value
             for name, value in args.items() if value is not None and name not in ("globs", "all")}
    # (the rest: run_retune decides)
    return run_retune(Request(globs=tuple(args["globs"]), all=args["all"], **given))


def report(rest: list[str]) -> int:
    import argparse
    from nvcc_evo.report.page import run_report
    parser = argparse.ArgumentParser(prog="nvcc-evo --report")
    parser.add_argument("globs", nargs="*", metavar="UNIT-GLOB", help="report these units "
                                                                      "(default: all)")
    parser.add_argument("--acf", help="the ACF (default: nearest nvcc-evo.acf here or above)")
    parser.add_argument("--store", action="append", default=[], metavar="JSONL",
                        help="results store(s) to read (default: .nvcc-evo/results.jsonl beside "
                             "the ACF)")
    parser.add_argument("--out", metavar="FILE", help="the HTML file (default: "
                                                      ".nvcc-evo/report.html beside the ACF)")
    args = parser.parse_args(rest)
    _readable_acf(args.acf)
    return run_report(args.acf, tuple(args.globs), args.store, args.out)


def sass(rest: list[str]) -> int:
    import argparse
    from nvcc_evo.report.compare import run_sass
    parser = argparse.ArgumentParser(prog="nvcc-evo --sass")
    parser.add_argument("globs", nargs="*", metavar="UNIT-GLOB", help="these units (default: all)")
    parser.add_argument("--target", help="the SASS architecture (default: those built or in "
                                         "the ACF)")
    parser.add_argument("--acf", help="the ACF (default: nearest nvcc-evo.acf here or above)")
    parser.add_argument("--run-recorded", action="store_true",
                        help="run the programs the compile records name (-ccbin, the host "
                             "compiler's plugins, a kernel's ptxas), as the build did (default: "
                             "left out, said)")
    args = parser.parse_args(rest)
    _readable_acf(args.acf)
    return run_sass(args.acf, tuple(args.globs), args.target, args.run_recorded)


def hot(rest: list[str]) -> int:
    import argparse
    from nvcc_evo.hot.run import run_hot
    split = rest.index("--") if "--" in rest else len(rest)
    options, command = rest[:split], rest[split + 1:]
    parser = argparse.ArgumentParser(prog="nvcc-evo --hot", usage="nvcc-evo --hot [options] -- "
                                                                  "COMMAND [ARGS...] | nvcc-evo "
                                                                  "--hot --from FILE [options]")
    parser.add_argument("--from", dest="source", metavar="FILE",
                        help="a saved profile (.nvcc-evo/hot/profile.json) or an Nsight Systems "
                             "kernel summary (nsys stats --report cuda_gpu_kern_sum --format csv), "
                             "instead of a run")
    parser.add_argument("--acf", help="the ACF (default: nearest nvcc-evo.acf here or above)")
    parser.add_argument("--write", action="store_true",
                        help="add unit blocks (search, tune, a bench of the unit's kernels' time) "
                             "for the hot units no ACF unit tunes yet")
    parser.add_argument("--min-share", type=float, default=5.0, metavar="PCT",
                        help="--write: the least share of the GPU time a unit's kernels must take "
                             "(default 5)")
    parser.add_argument("--build", metavar="CMD",
                        help="--write: how the project rebuilds through nvcc-evo before each "
                             "candidate's run (default: make -s NVCC=nvcc-evo, where a Makefile "
                             "is here)")
    parser.add_argument("--run", metavar="CMD",
                        help="--write with --from an nsys summary: the command that runs the "
                             "program")
    args, extra = parser.parse_known_args(options)
    if extra and not extra[0].startswith("-") and "--" not in rest:
        import shlex
        from nvcc_evo.errors import UsageError
        raise UsageError(f"--hot {shlex.join(extra)}: the command to run goes after `--`: nvcc-evo "
                         f"--hot [options] -- {shlex.join(extra)}")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not 0 <= args.min_share <= 100:            # (NaN too)
        from nvcc_evo.errors import UsageError
        raise UsageError(f"--hot --min-share {args.min_share:g}: a percentage of the GPU time, "
                         "from 0 to 100")
    if not args.write and (args.build is not None or args.run is not None):
        from nvcc_evo.errors import UsageError
        raise UsageError("--hot --build and --run say how the bench --write writes builds and runs "
                         "the program: without --write nothing is written (add --write)")
    _readable_acf(args.acf)
    return run_hot(args.acf, args.source, command, args.write, args.min_share / 100, args.build,
                   args.run)


def _readable_acf(named: str | None) -> None:
    """An ACF named by --acf or NVCC_EVO_ACF that cannot be read stops a
    retune before anything starts, saying which and why."""
    import os
    from nvcc_evo.driver.match.find import named_acf_problem, unreadable
    from nvcc_evo.errors import EnvironmentProblem, UsageError
    if named:
        why = unreadable(named)
        if why:
            raise UsageError(f"--acf {named}: {why}")
    elif named_acf_problem(os.environ):
        raise EnvironmentProblem(named_acf_problem(os.environ))


def _working_folder() -> None:
    """A verb run from a removed folder says which folder, in words (not Python's `[Errno 2]
    No such file or directory`)."""
    import os
    from nvcc_evo.errors import EnvironmentProblem
    try:
        os.getcwd()
    except FileNotFoundError:
        shown = f" ({os.environ['PWD']})" if os.environ.get("PWD") else ""
        raise EnvironmentProblem(f"the working folder{shown} was removed: cd to a folder that "
                                 "exists") from None


def run_verb(verb: str, rest: list[str]) -> int:
    from nvcc_evo.errors import ExitCode
    if verb in ("--explain", "--retune", "--report", "--hot"):
        _working_folder()
    if verb in ("--evo-help", "--evo-version"):
        import argparse
        argparse.ArgumentParser(prog=f"nvcc-evo {verb}").parse_args(rest)
    if verb == "--evo-help":
        print(help_text(), end="")
        return ExitCode.OK
    if verb == "--evo-version":
        from nvcc_evo import __version__
        print(f"nvcc-evo {__version__}")
        return ExitCode.OK
    if verb == "--explain":
        from nvcc_evo.driver.explain import explain
        print(explain(rest), end="")
        return ExitCode.OK
    if verb == "--retune":
        return retune(rest)
    if verb == "--report":
        return report(rest)
    if verb == "--sass":
        return sass(rest)
    if verb == "--hot":
        return hot(rest)
    from nvcc_evo.acfverbs import acf_check, acf_fmt
    if verb == "--acf-check":
        return acf_check(_files_parser(verb).parse_args(rest).files)
    args = _files_parser(verb, with_check=True).parse_args(rest)
    return acf_fmt(args.files, args.check)


def main(argv: list[str] | None = None) -> int:
    from nvcc_evo.driver.common import guard_stderr
    guard_stderr()  # stderr closed or unwritable: our messages are dropped, never put on stdout
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in VERBS:
        from nvcc_evo.driver.shim import run      # the compile path: nothing else imported
        return run(argv)
    from nvcc_evo.errors import AcfError, EvoError, ExitCode, LocatedError
    try:
        return run_verb(argv[0], argv[1:])
    except EvoError as error:        # (an ACF's diagnostics say `path:LINE:COL: error:` themselves)
        located = isinstance(error, (AcfError, LocatedError))
        print(visible(str(error) if located else f"nvcc-evo: error: {error}"), file=sys.stderr)
        return error.exit_code
    except OSError as error:   # a tool or file the machine lacks
        print(visible(f"nvcc-evo: error: {error}"), file=sys.stderr)
        return ExitCode.ENVIRONMENT
    except KeyboardInterrupt as stop:     # (Interrupted: with what was kept, said once here)
        from nvcc_evo.system.leftovers import kill_running
        kill_running()  # compiles in groups of their own, which the terminal's Ctrl-C missed
        print(visible(f"nvcc-evo: {stop or 'interrupted'}"), file=sys.stderr)
        return ExitCode.INTERRUPTED
