"""Which knobs of a unit --write adds reach its recorded build, asked as a retune asks.

The block is put first in a copy of the ACF beside it (the wrapper takes the
first unit that matches), the record's call is planned against that copy
(driver.cmdline.compileplan.RecordedBuild) and each value of each knob is asked
whether the build would pass it (retune.scope.reach.why_left_out): a user's own
`-maxrregcount` or `-G` in the build keeps a knob out, as it keeps it out of
a retune's search.
"""
from __future__ import annotations

import os
from pathlib import Path

from nvcc_evo.acf import model
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.text import read_text
from nvcc_evo.driver.cmdline.compileplan import RecordedBuild
from nvcc_evo.driver.toolkit import load_toolkit
from nvcc_evo.hot.origin import Origin
from nvcc_evo.retune.scope.reach import why_left_out
from nvcc_evo.system.leftovers import held_file
from nvcc_evo.system.say import log


def reaching(acf_path: Path, origin: Origin, globs: tuple[str, ...],
             wanted: list[tuple[str, model.Domain]], block: str) -> list[tuple[str, model.Domain]]:
    """`wanted` with only the values the build would pass (a knob with none left out, said)."""
    record = origin.record
    text = read_text(acf_path)
    head = parse_text(text, str(acf_path)).header_span.end
    # (a candidate ACF's name and lock: a killed run's copy is swept as a retune's is)
    path, fd = held_file(str(acf_path.parent), ".nvcc-evo-candidate-", ".acf")
    copy = Path(path)
    try:
        with os.fdopen(os.dup(fd), "w") as handle:
            handle.write(text[:head] + "\n\n" + block + text[head:])
        environ = {**{k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")},
                   **record.env}
        real = os.path.realpath(record.input)
        token = next((a for a in record.argv if os.path.realpath(os.path.join(record.cwd,
                                                                              a)) == real),
                     record.input)
        build = RecordedBuild(record.argv, record.cwd, dict(record.env), token, record.arch, globs,
                              copy, load_toolkit(Path(record.nvcc)), environ)
        kept = []
        for knob, domain in wanted:
            values = [v for v in model.domain_values(domain) if not why_left_out(build, {knob: v},
                                                                                 knob)]
            if not values:
                why = why_left_out(build, {knob: model.domain_values(domain)[0]}, knob)
                log(f"--write: {origin.source}: {knob} left out: the build would not pass it "
                    f"({why})")
            elif len(values) == len(model.domain_values(domain)):
                kept.append((knob, domain))
            else:
                kept.append((knob, model.SetDomain(tuple(values))))
        return kept
    finally:
        copy.unlink(missing_ok=True)
        os.close(fd)
