"""The tree is the architecture: the import graph of nvcc_evo/, read from
the sources (every import, the ones inside functions too), has no cycle and
runs only one way, from the command line down to the language."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from nvcc_evo import backends

PACKAGE = ROOT / "nvcc_evo"
# Each part may import the parts of lower layers, and itself; nothing else.
LAYERS = {
    "system": -1,                               # the OS helpers, what a message prints (say.visible)
    "nvcc_evo": 0, "errors": 0,                 # the version, the shared errors
    "status": 0,                                # what became of a candidate (Status)
    "backends": 0,                              # the table of backends (names, capabilities)
    "acf": 1,                                   # the language
    "driver": 2,                                # the drop-in nvcc
    "cubin": 3,                                 # a candidate's compile, what its machine code holds
    "measure": 4,                               # the backends
    "kerneldiff": 4,                            # why a build is faster, kernel by kernel (retune's and report's)
    "engine": 5,                                # the search engine: spaces, NSGA-II, budgets
    "execute": 6,                               # candidates compiled, measured, stored; lanes, cluster
    "retune": 7,                                # one retune: its scope, one search, its outcome
    "report": 8,                                # --report and --sass
    "hot": 8,                                   # --hot: the kernels a run loads the GPU with, their units
    "acfverbs": 8,                              # --acf-check and --acf-fmt
    "cli": 9, "__main__": 10,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> list[tuple[str, int]]:
    """(module of nvcc_evo, line) for each import in the file; `from P import m`
    counts as importing P.m where P.m is a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "nvcc_evo"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nvcc_evo":
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import")
            subs = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(name, node.lineno) for name in subs if name in modules] or [(node.module, node.lineno)]
    return found


def graph() -> dict[str, list[tuple[str, int]]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported(path, set(files)) for name, path in files.items()}


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nvcc_evo"


def test_every_part_has_a_layer_and_says_what_it_owns():
    for name, path in ((module_name(p), p) for p in PACKAGE.rglob("*.py")):
        assert part(name) in LAYERS, f"{path}: {part(name)} is no part of the architecture (tests/test_architecture.py)"
    for package in PACKAGE.iterdir():
        if (package / "__init__.py").exists():
            doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
            assert doc and "Imports:" in doc, f"{package}/__init__.py must say what it owns and may import"


def test_imports_run_one_way():
    against = [f"{name} imports {target} (line {line}): {part(name)} is layer {LAYERS[part(name)]}, "
               f"{part(target)} layer {LAYERS[part(target)]}"
               for name, targets in graph().items() for target, line in targets
               if part(target) != part(name) and LAYERS[part(target)] >= LAYERS[part(name)]]
    assert not against, "\n".join(against)


# Parts that import less than their layer allows: the engine knows nothing of compilers, launches or the
# retune; what it needs of them is a Protocol it owns (engine.evolve.Avoid, Overlapping; engine.budget.Asked).
NARROWER = {"engine": {"engine", "acf", "nvcc_evo", "errors", "system", "backends", "status"}}


def test_the_engine_imports_only_the_language_and_the_base():
    against = [f"{name} imports {target} (line {line})" for name, targets in graph().items()
               if part(name) in NARROWER for target, line in targets if part(target) not in NARROWER[part(name)]]
    assert not against, "\n".join(against)


# --sass's view reaches the project through its front doors only: driver.project (found, trusted, read) and the
# retune's public functions (the builds compared); what the terminal shows is its own.
FRONT_DOORS = {"nvcc_evo.report.compare": {"nvcc_evo.driver.project", "nvcc_evo.retune.run",
                                           "nvcc_evo.kerneldiff.view", "nvcc_evo.errors"}}


def test_the_sass_view_opens_the_project_and_asks_the_retune_through_their_front_doors():
    modules = graph()
    beyond = {name: sorted({t for t, _ in modules[name]} - doors) for name, doors in FRONT_DOORS.items()}
    assert not any(beyond.values()), beyond


def test_no_import_cycle():
    edges = {name: {t for t, _ in targets if t != name} for name, targets in graph().items()}
    for name in edges:                       # a package's __init__ is imported before any of its modules
        if "." in name:
            edges[name].discard(name.rpartition(".")[0])
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_compile_path_loads_only_the_shim():
    """A compile with no ACF in reach runs the shim alone: importing it (and
    the cli, where the console script starts) loads no other nvcc_evo module
    and nothing outside the standard library's os and sys."""
    probe = ("import sys; before = set(sys.modules); import nvcc_evo.cli, nvcc_evo.driver.shim; "
             "print(' '.join(sorted(set(sys.modules) - before)))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True,
                                text=True).stdout.split())
    ours = {m for m in loaded if m.startswith("nvcc_evo")}
    assert ours == {"nvcc_evo", "nvcc_evo.cli", "nvcc_evo.driver", "nvcc_evo.driver.common",
                    "nvcc_evo.driver.shim"}, ours
    assert not loaded - ours - {"__future__"}, sorted(loaded - ours)


MOST_MODULES = 12          # a package a newcomer reads whole: more, and it holds several concerns


def test_no_package_holds_more_than_a_dozen_modules():
    crowded = {}
    for folder in {p.parent for p in PACKAGE.rglob("*.py")}:
        modules = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MOST_MODULES:
            crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert not crowded, f"packages of more than {MOST_MODULES} modules (split by concern): {crowded}"


MOST_LINES, MOST_FUNCTION_LINES = 400, 60   # a module read in one sitting, a function on one screen


def test_no_module_or_function_outgrows_a_reading():
    long_modules, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MOST_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MOST_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}, {lines} lines")
    assert not long_modules, f"modules over {MOST_LINES} lines (split by concern): {long_modules}"
    assert not long_functions, f"functions over {MOST_FUNCTION_LINES} lines: {long_functions}"


def test_no_two_classes_share_a_name():
    """One class per name in nvcc_evo/ (nested classes too): a name that means two things costs every reader."""
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, f"classes that share a name (rename them for what they are): {shared}"


MAP = ROOT / "ARCHITECTURE.md"


def test_every_path_the_map_names_exists_and_every_module_is_on_it():
    """ARCHITECTURE.md stays current: each path of nvcc_evo/ it names (in full, or from the package:
    `driver/shim.py`) is in the tree, and each module of the tree (but `__init__.py` and `__main__.py`, which the package's own docstring and the layers cover) has a row."""
    text = MAP.read_text()
    named = set(re.findall(r"`(nvcc_evo/[\w/.]+)`", text))
    parts = "|".join(path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__")
    short = set(re.findall(rf"`((?:{parts})/[\w/.]*)`", text))          # from the package: `driver/shim.py`
    gone = sorted(path for path in named if not (ROOT / path.rstrip("/")).exists())
    gone += sorted(path for path in short if not (PACKAGE / path.rstrip("/")).exists())
    modules = {str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py")
               if path.name not in ("__init__.py", "__main__.py")}
    missing = sorted(modules - named)
    assert not gone, f"ARCHITECTURE.md names paths the tree does not have: {gone}"
    assert not missing, f"modules ARCHITECTURE.md has no row for: {missing}"


# A backend is one place (nvcc_evo/backends.py): code asks its row what it can do (`backends.row(name).needs_gpu`)
# and never compares its name. The ACF's run check `check command "..."` is spelled as the command backend:
# a comparison with a `.kind` is the check's word, not a backend's.
BACKEND_NAMES = frozenset(backends.NAMES)      # (not `auto`: the progress setting has one too)


def _names_a_backend(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in BACKEND_NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_backend(e) for e in node.elts)


def backend_name_comparisons(text: str, path: str = "<text>") -> list[int]:
    """The lines of `text` that compare something with a backend's name (`==`, `!=`, `in` a tuple of
    them, a `case` of one)."""
    found = []
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_names_a_backend, sides)) and not any(isinstance(s, ast.Attribute) and s.attr == "kind"
                                                             for s in sides):
                found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _names_a_backend(node.value):
            found.append(node.lineno)
    return found


def test_the_backend_name_check_finds_what_it_looks_for():
    code = ('a = options.backend == "pycuda"\nb = name in ("static", "replay")\nc = check.kind == "command"\n'
            'd = "replay" != backend\nmatch x:\n    case "command":\n        pass\ne = mode == "full"\n')
    assert backend_name_comparisons(code) == [1, 2, 4, 6]


def test_no_code_compares_a_backend_name():
    """Behaviour that differs between backends is a question to the table's row, so that a backend is one
    row and its factory: in the package and in the benchmarks that drive it."""
    sources = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
    against = [f"{path.relative_to(ROOT)}:{line}" for path in sources
               if path != PACKAGE / "backends.py"
               for line in backend_name_comparisons(path.read_text(), str(path))]
    assert not against, "backend names compared (ask the row of nvcc_evo.backends instead): " + ", ".join(against)


MOST_COLUMNS = 100         # a line read without scrolling, beside another file


def _checked_sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text()


def test_no_line_is_wider_than_a_reading():
    wide = [f"{path.relative_to(ROOT)}:{number}: {len(line)} columns"
            for path, text in _checked_sources()
            for number, line in enumerate(text.splitlines(), 1) if len(line) > MOST_COLUMNS]
    assert not wide, f"lines over {MOST_COLUMNS} columns (wrap, or name the pieces): {wide}"


def test_no_conditional_expression_holds_another():
    """`a if x else b if y else c` reads as a puzzle: an if/elif, or a small function, says it."""
    chained = [f"{path.relative_to(ROOT)}:{node.lineno}"
               for path, text in _checked_sources() for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.IfExp)
               and (isinstance(node.body, ast.IfExp) or isinstance(node.orelse, ast.IfExp))]
    assert not chained, f"chained conditional expressions: {chained}"


# Imports stand at the top of a module, but where start-up time is the reason: the modules a
# compile loads (the shim's, the wrapper's and the drop-in ptxas's: measured with `python -X
# importtime`; test_the_compile_path_loads_only_the_shim, tests/test_dropin_ptxas.py and
# tests/test_settings.py keep them lean), and the optional libraries a module imports only when a
# feature asks for them.
COMPILE_PATH = {
    "nvcc_evo.cli", "nvcc_evo.driver.shim", "nvcc_evo.driver.wrapper", "nvcc_evo.driver.common",
    "nvcc_evo.driver.toolkit", "nvcc_evo.driver.settings", "nvcc_evo.driver.compiledb",
    "nvcc_evo.driver.cmdline.compileplan", "nvcc_evo.driver.cmdline.flags",
    "nvcc_evo.driver.cmdline.ptxas", "nvcc_evo.driver.cmdline.split",
    "nvcc_evo.driver.match.archs", "nvcc_evo.driver.match.calls", "nvcc_evo.driver.match.find",
    "nvcc_evo.driver.match.index", "nvcc_evo.driver.dropin_ptxas.shim",
    "nvcc_evo.driver.dropin_ptxas.untouched", "nvcc_evo.driver.dropin_ptxas.decide",
    "nvcc_evo.system.files",
}
OPTIONAL_LIBRARIES = {"matplotlib", "nvidia", "pycuda", "pynvml", "ray", "rich", "scipy", "optuna",
                      "torch", "triton", "cupy"}


def _imports_in_functions(tree: ast.AST):
    def visit(node: ast.AST, inside: bool):
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            yield from visit(child, inside or isinstance(child, (ast.FunctionDef,
                                                                  ast.AsyncFunctionDef)))
    yield from visit(tree, False)


def test_imports_stand_at_the_top_but_where_start_up_time_counts():
    late = []
    for path, text in _checked_sources():
        if module_name(path) in COMPILE_PATH:
            continue
        for node in _imports_in_functions(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = [alias.name for alias in node.names]
            if any(name.split(".")[0] not in OPTIONAL_LIBRARIES for name in names):
                late.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not late, ("imports inside functions (to the top of the module: only the compile path "
                      f"and optional libraries import late): {late}")
