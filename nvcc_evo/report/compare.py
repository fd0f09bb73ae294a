"""`nvcc-evo --sass [UNIT-GLOB...] [--target sm_XX]`: each unit's baseline
(the build's own flags) and its ACF entry built as the wrapper builds them
(the compile plan of the unit's recorded build, retune.scope.reach.recorded_build:
what a retune's candidates compile with) and compared kernel by kernel in
the terminal (kerneldiff.compare, kerneldiff.view): registers, occupancy at
the bench's block size, spills, shared memory, instructions and the
instruction mix. A knob of the entry that the build would not pass is not
built, and said. No search, no GPU; nothing the ACF names is run, and no
program a compile record names (a cloned repository's `-ccbin tools/g++`)
unless the user asks (`--run-recorded`): the real nvcc found as a build
finds it, with the record's other options. The project is opened as every
verb opens it (driver.project: another user's ACF refused); the builds are
the retune's (retune.run.compare_entries); here, what the terminal shows.
"""
from __future__ import annotations

from nvcc_evo.driver.project import open_project
from nvcc_evo.errors import ExitCode
from nvcc_evo.kerneldiff.view import lines, notes
from nvcc_evo.retune.run import compare_entries


def run_sass(acf: str | None, globs: tuple[str, ...], target: str | None,
             run_recorded: bool = False) -> int:
    """Each unit's two builds compared in the terminal; programs a compile
    record names run only with `run_recorded` (`--run-recorded`)."""
    opened = open_project("--sass", acf, globs)              # found, trusted, readable; settings
    compared, skipped = compare_entries(opened, globs, target, run_recorded)
    shown = []
    for entry in compared:
        if entry.comparison is None:
            continue
        said = "its ACF entry" if entry.held else "no ACF entry: the baseline twice"
        print(f"{entry.task}: the build's own flags against {said}")
        print("\n".join(lines(entry.comparison, note=False)))
        shown.append(entry.comparison)
    for note in notes(shown):
        print(note)
    failed = len(shown) < len(compared)
    return ExitCode.INVALID_INPUT if failed or skipped or not compared else ExitCode.OK
