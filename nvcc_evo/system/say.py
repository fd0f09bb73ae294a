"""nvcc-evo's lines on stderr: one prefix, one write per line, so that
searches at once never mix their lines (stdout is the compiler's); and
`visible`, the one function every message goes through (a Diagnostic, a
log line, a warning of a build): the characters that hide or reorder what a
terminal shows (bidi controls, zero-width characters, C0 and C1 controls
but tab and line feed) escaped, as `\\u202e`, so that a value read from a
file can neither hide text nor send the terminal escape sequences."""
from __future__ import annotations

import sys

# Bidi controls (embeddings, overrides, isolates, marks), zero-width characters, a byte-order mark
# out of place, C0 and C1 controls (DEL too) but tab and line feed: what compilers' -Wbidi-chars
# warns of, and more.
HIDDEN = frozenset([*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0), 0x061c, 0x200b,
                    0x200c, 0x200d,
                    0x200e, 0x200f, *range(0x202a, 0x202f), 0x2060, *range(0x2066, 0x206a), 0xfeff])
_ESCAPES = {code: f"\\u{code:04x}" for code in HIDDEN}


def visible(text: str) -> str:
    """`text` with every hidden character escaped (`\\u202e`)."""
    return text.translate(_ESCAPES)


def log(message: str) -> None:
    """A line on stderr, in one write (searches at once never mix their lines)."""
    sys.stderr.write(f"nvcc-evo: {visible(message)}\n")
    sys.stderr.flush()
