"""What became of a candidate: the status of a compile, a run, a measurement
and an evaluation. Str-valued, so that the results store keeps its words
("ok", "compile-error", ...) and a status reads as its word in messages."""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile-error"          # nvcc or ptxas refused the candidate's flags
    TIMEOUT = "timeout"                      # a compile or a run past its limit
    CRASH = "crash"                          # the kernel or the measuring process died
    OUT_OF_MEMORY = "out-of-memory"
    LAUNCH_REFUSED = "launch-refused"        # the driver would not launch it (too many registers,
                                             # shared memory, ...)
    WRONG_ANSWER = "wrong-answer"
    NO_KERNEL = "no-kernel"                  # the cubin defines no kernel (of the bench's name)
    NO_METRIC = "no-metric"                  # a command bench's run printed no value of its metric
    COMMAND_FAILED = "command-failed"        # a command bench's command exited non-zero
    NOT_REBUILT = "not-rebuilt"              # the command's build did not compile the unit
    FLAGS_NOT_APPLIED = "flags-not-applied"  # it compiled the unit without the candidate's flags
    BAD_BENCH = "bad-bench"                  # the bench cannot be set up for this candidate's
                                             # defines
    NOT_RECORDED = "not-recorded"            # replay: no recorded answer
    NOT_SHIPPED = "not-shipped"              # the build would drop one of the candidate's knobs
    LOST = "lost"                            # its lane's worker or node was lost, on every lane
                                             # tried
    NO_CUBIN = "no-cubin"                    # nvcc compiled, but no cubin of the target came out
    NO_PTXAS_STEP = "no-ptxas-step"          # nvcc's --dryrun shows no ptxas step to run again
    CANCELLED = "cancelled"                  # the search ended while the compile waited for a slot

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# only a genome that compiled has one
BUILT = frozenset({Status.OK, Status.WRONG_ANSWER, Status.LAUNCH_REFUSED})
