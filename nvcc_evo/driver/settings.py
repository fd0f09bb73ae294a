"""The project's settings: an `nvcc-evo.toml` beside the ACF, else the
`[tool.nvcc-evo]` table of the nearest `pyproject.toml` at or above the
ACF's folder (the project's root: the search stops at the first one).

Precedence is written once, in `Settings.value`: command line > environment
> the settings file > built-in default, and every value keeps where it came
from (`Value.source`: `--evaluations`, `NVCC_EVO_EVALUATIONS`,
`nvcc-evo.toml:4`, `default`), which `--explain` and `--retune --dry-run`
print. Keys are one table (nvcc_evo.driver.specs.KEYS), where each setting is
declared once: a retune's Options fields and its `--retune` flags are made
from the same rows (nvcc_evo.retune.scope.options). Unknown keys and wrong types are located errors
like an ACF's (`nvcc-evo.toml:3:1: error: ...`): tomllib gives no
positions for values, so nvcc_evo.driver.tomlplaces finds each key's line in the text.
A path the file names for nvcc-evo's own data (the log, results stores, the
report) must stay inside the project folder (the settings file's): a cloned
repository's settings are data from whoever wrote it; a path elsewhere comes
from the command line or the environment.

The compile path looks for the file with nvcc_evo.driver.common's
`find_settings_file` (os only: a few stats) and imports this module, and
tomllib, only when there is one.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf.text import BOM
from nvcc_evo.driver.common import find_settings_file
from nvcc_evo.driver.specs import BUILD_KEYS, BY_NAME, FORMS, RETUNE_KEYS, TABLES, Key
from nvcc_evo.driver.tomlplaces import decode_error, places
from nvcc_evo.errors import AcfError, Diagnostic, Location, UsageError
from nvcc_evo.system.files import leaves
from nvcc_evo.system.trust import untrusted

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any          # a TOML value as tomllib reads it, or a flag's as given

TABLE = ("tool", "nvcc-evo")            # the table in pyproject.toml; nvcc-evo.toml holds its keys
                                        # at top level
DEFAULT = "default"


class Value(NamedTuple):
    value: object
    source: str                # "--flag", "NVCC_EVO_X", "nvcc-evo.toml:4", "default"

    def __str__(self) -> str:
        source = "built-in default" if self.source == DEFAULT else self.source
        return f"{_show(self.value)} ({source})"


class SettingsError(AcfError):
    """Located errors in a settings file (or an environment variable's value)."""


class Settings(NamedTuple):
    path: str | None                           # the settings file, None when there is none
    values: dict                               # key name -> value as read from the file
    places: dict                               # key name -> "FILE:LINE"
    environ: Mapping[str, str]
    ignored: str = ""  # why the file found is not used (another user's): a warning

    def value(self, name: str, command_line: dict | None = None) -> Value:
        """The one place precedence is decided: command line > environment > file > default."""
        key = BY_NAME[name]
        if command_line and command_line.get(name) is not None:
            flag, given = key.flag, command_line[name]
            problem = value_problem(key, given)
            if problem:
                raise UsageError(f"{flag} {given}: must be {problem}")
            return Value(given, flag)
        if key.env and self.environ.get(key.env):
            return Value(_from_env(key, self.environ[key.env]), key.env)
        if name in self.values:
            return Value(self.values[name], self.places[name])
        return Value(key.default, DEFAULT)

    def for_build(self) -> Mapping[str, str]:
        """The environment a build decides with: the file's values for the
        variables the environment leaves unset (the environment wins)."""
        added = {BY_NAME[n].env: os.pathsep.join(v) if isinstance(v, list) else str(v)
                 for n, v in self.values.items()
                 if BY_NAME[n].env and not self.environ.get(BY_NAME[n].env) and n in BUILD_KEYS}
        return {**self.environ, **added} if added else self.environ

    def described(self, names: Iterable[str] | None = None,
                  command_line: dict | None = None) -> list[str]:
        """`name = value (source)` for each setting (all of them by default)."""
        return [f"{name} = {self.value(name, command_line)}" for name in (names or BY_NAME)]


def _show(value: object) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {v!r}" for k, v in value.items()) + "}"
    return repr(value) if isinstance(value, str) else str(value)


def load(acf_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Settings:
    """The settings that apply to the ACF at `acf_path` (SettingsError when
    its file has errors)."""
    found = find_settings_file(acf_path) if acf_path is not None else None
    if found is None:
        return Settings(None, {}, {}, environ)
    path, in_pyproject = found
    distrust = untrusted(path, environ)
    if distrust:  # it could name the nvcc a build runs: only the user's own, or trusted on purpose
        return Settings(None, {}, {}, environ, f"the project settings {distrust}")
    with open(path, "rb") as handle:
        data = handle.read()
    data = data[len(BOM):] if data.startswith(BOM) else data     # (as an ACF's: a BOM accepted,
                                                                 # columns after it)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:        # TOML is UTF-8: say where, as the ACF reader does
        before = data[:error.start]
        line, column = before.count(b"\n") + 1, len(before) - (before.rfind(b"\n") + 1) + 1
        shown = min(os.path.relpath(path), path, key=len)
        said = (f"the file is not UTF-8 text: byte(s) 0x{data[error.start]:02x} here "
                "(save it as UTF-8)")
        raise SettingsError([Diagnostic(Location(shown, line, column), said)]) from None
    return parse(text, path, in_pyproject, environ)


def parse(text: str, path: str, in_pyproject: bool, environ: Mapping[str, str]) -> Settings:
    import tomllib                    # (lean: only where a settings file holds the table)
    shown = min(os.path.relpath(path), path, key=len)      # as a compiler names it: short
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SettingsError([decode_error(error, text, shown)]) from None
    prefix = TABLE if in_pyproject else ()
    table = document
    for part in prefix:
        table = table.get(part, {}) if isinstance(table, dict) else {}
    tool, name = TABLE
    if in_pyproject and not (isinstance(document.get(tool), dict) and name in document[tool]):
        return Settings(None, {}, {}, environ)   # it names nvcc-evo (a dependency, its own name)
                                                 # but holds no table
    lines = text.splitlines()
    if not isinstance(table, dict):  # `[tool]` with `nvcc-evo = 3`: a value where the table belongs
        line, _, at_value = places(lines, prefix[:-1], TABLES).get(name, (1, 1, 1))
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        said = f"'{'.'.join(prefix)}' must be a table, got {_toml_type(table)}"
        raise SettingsError([Diagnostic(Location(shown, line, at_value), said, source)])
    where = places(lines, prefix, TABLES)
    values, problems = {}, []
    for name, raw in _flatten(table):
        line, column, at_value = where.get(name, where.get(name.rpartition(".")[0], (1, 1, 1)))
        problem = _problem(name, raw) or _outside(BY_NAME[name], raw, os.path.dirname(path))
        # a value's fault: at it
        at = Location(shown, line, at_value if problem.startswith("'") else column)
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        if problem:
            problems.append(Diagnostic(at, problem, source))
            continue
        key = BY_NAME[name]
        values[name] = _resolve_paths(key, raw, os.path.dirname(path))
    if problems:
        raise SettingsError(problems)
    return Settings(path, values, {n: f"{shown}:{where.get(n, (1,))[0]}" for n in values}, environ)


def _flatten(table: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(dotted name, value) of the table's keys; our sub-tables opened, a
    table-valued key (ptxas) kept whole."""
    for name, value in table.items():
        if name in TABLES and isinstance(value, dict):
            yield from ((f"{name}.{inner}", v) for inner, v in value.items())
        else:
            yield name, value


def _problem(name: str, raw: Any) -> str:
    key = BY_NAME.get(name)
    if key is None:
        known = sorted(n for n in BY_NAME if n.rpartition(".")[0] == name.rpartition(".")[0])
        table = f"[{name.rpartition('.')[0]}] " if "." in name else ""
        names = [k.rpartition(".")[2]
                 for k in known] + ([f"[{t}]" for t in sorted(TABLES)] if not table else [])
        return f"unknown setting '{name}' (known {table}settings: {', '.join(names)})"
    expected = _expected(key)
    if key.kind in ("str", "path", "choice"):
        ok = isinstance(raw, str) and raw != ""
    elif key.kind == "int":
        ok = isinstance(raw, int) and not isinstance(raw, bool)
    elif key.kind == "float":
        ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)
    elif key.kind == "pathlist":
        ok = isinstance(raw, list) and all(isinstance(v, str) and v for v in raw)
    else:
        ok = isinstance(raw, dict) and all(isinstance(v, str) and v for v in raw.values())
    if not ok:
        return f"'{name}' must be {expected}, got {_toml_type(raw)}"
    if key.choices and raw not in key.choices:
        return f"'{name}' must be one of {', '.join(key.choices)}, got '{raw}'"
    problem = value_problem(key, raw)
    return f"'{name}' must be {problem}, got {raw!r}" if problem else ""


def value_problem(key: Key, value: Any) -> str:
    """What a typed value of `key` must be, if it is not (the same check for
    the command line, the environment and the file): positive, a finite
    number of seconds, a spec of the key's form."""
    if key.kind == "float" and value != value:
        return "a number of seconds"
    if key.finite and value == float("inf"):
        return "a finite number of seconds"
    if key.positive and value <= 0:
        return "positive"
    if key.counted and value < 0:
        return "0 or more"
    if key.form and not FORMS[key.form][0].fullmatch(value):
        return FORMS[key.form][1]
    return ""


def _outside(key: Key, raw: Any, folder: str) -> str:
    """Why a path of nvcc-evo's own data that a settings file names leaves
    the project folder ("" when it stays inside, or the key is no such path)."""
    if not key.inside:
        return ""
    for path in raw if isinstance(raw, list) else [raw]:
        why = leaves(path, folder)
        if why:
            given = _where_given(key)
            return (f"'{key.name}' must name a file inside the project folder {folder}, got "
                    f"{path!r} ({why}): a project's files are data from whoever wrote them; name a "
                    f"file elsewhere {given}")
    return ""


def _where_given(key: Key) -> str:
    """Where a value of `key` may come from other than a settings file."""
    if key.name in RETUNE_KEYS:
        return f"with {key.flag} or {key.env}"
    if key.env:
        return f"in {key.env}"
    return "with --report's --store or --out"


def _expected(key: Key) -> str:
    return {"str": "a string", "path": "a path (a string)",
            "choice": f"one of {', '.join(key.choices)}",
            "int": "an integer", "float": "a number (seconds)",
            "paths": "a table of paths ({name = \"path\"})",
            "pathlist": "an array of paths"}[key.kind]


def _toml_type(raw: object) -> str:
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
             (list, "an array"), (dict, "a table"))
    kind = next((word for t, word in kinds if isinstance(raw, t)), type(raw).__name__)
    return f"{kind} ({raw!r})" if not isinstance(raw, (list, dict)) else kind


def _resolve_paths(key: Key, raw: Any, folder: str) -> Any:
    """Paths in a settings file are relative to its folder."""
    if key.kind == "path":
        return os.path.normpath(os.path.join(folder, os.path.expanduser(raw)))
    if key.kind == "paths":
        return {n: os.path.normpath(os.path.join(folder, os.path.expanduser(p)))
                for n, p in raw.items()}
    if key.kind == "pathlist":
        return [os.path.normpath(os.path.join(folder, os.path.expanduser(p))) for p in raw]
    if key.kind == "float":
        return float(raw)
    return raw


def _from_env(key: Key, text: str) -> int | float | str:
    """An environment variable's value, typed as its key (SettingsError if it is not)."""
    try:
        value = {"int": int, "float": float}.get(key.kind, str)(text)
    except ValueError:
        value = None
    if value is None or (key.choices and value not in key.choices):
        raise UsageError(f"{key.env}={text}: expected "
                         f"{_expected(key)}{', positive' if key.positive else ''}")
    problem = value_problem(key, value)
    if problem:
        raise UsageError(f"{key.env}={text}: must be {problem}")
    return value
