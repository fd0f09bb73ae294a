"""nvcc-evo's lines on stderr: one prefix, one write per line, so that
searches at once never mix their lines (stdout is the compiler's)."""
from __future__ import annotations

import sys


def log(message: str) -> None:
    """A line on stderr, in one write (searches at once never mix their lines)."""
    sys.stderr.write(f"nvcc-evo: {message}\n")
    sys.stderr.flush()
