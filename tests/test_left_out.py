"""A knob a plan does not pass is a value (driver.cmdline.flags.Skipped): its knob, the ptxas step
it was left out of, the reason; the words a person reads (`--explain`, the log) are rendered from
it, and a retune asks its knob, never the words."""
from __future__ import annotations

from nvcc_evo.driver.cmdline.compileplan import CompilePlan
from nvcc_evo.driver.cmdline.flags import DEFAULT_PASSES_NOTHING, FlagPlan, Skipped
from nvcc_evo.retune.scope.reach import not_shipped, why_left_out

CAP = "ptxas.maxrregcount"
USER_WINS = "the user sets it (-maxrregcount=48); the user wins"


class OneStep:
    """A unit's build (retune.scope.reach.BuildStep) whose target step is `plan` whatever the
    entry says."""

    def __init__(self, plan: FlagPlan) -> None:
        self.plan = plan

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]:
        return self.plan, None

    def call_values(self) -> dict:
        return {}


def test_a_knob_left_out_of_one_ptxas_step_names_its_step():
    own = FlagPlan(("-Xptxas", "-O2"), (("ptxas.opt_level", 2),), (Skipped(CAP, USER_WINS),))
    call = FlagPlan((), (), (Skipped("define.TERMS", "differs within this call"),))
    plan = CompilePlan(call, ((("regs.cu", "sm_80"), own),))
    assert [s.knob for s in plan.skipped] == ["define.TERMS", CAP]
    assert plan.skipped[1].step == ("regs.cu", "sm_80")
    assert [str(s) for s in plan.skipped] == ["define.TERMS: differs within this call",
                                              f"{CAP} (regs.cu [sm_80]): {USER_WINS}"]


def test_a_retune_asks_the_knob_of_what_a_plan_leaves_out():
    """A knob left out of a step (named with its step where a person reads it) is found by its
    knob alone; another knob whose name begins with this one's is not it."""
    step = ("regs.cu", "sm_80")
    plan = FlagPlan((), (), (Skipped(CAP, USER_WINS, step),
                             Skipped("ptxas.opt_level", DEFAULT_PASSES_NOTHING)))
    assert why_left_out(OneStep(plan), {CAP: 32}, CAP) == USER_WINS
    assert why_left_out(OneStep(plan), {"ptxas.opt_level": 3}, "ptxas.opt_level") == ""
    assert why_left_out(OneStep(plan), {"ptxas.maxrreg": 3}, "ptxas.maxrreg") == \
        "the build passes nothing for it"
    assert not_shipped(plan, {CAP: 32, "ptxas.opt_level": 3}) == f"{CAP} = 32: {USER_WINS}"
