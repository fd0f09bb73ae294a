"""The command backend: the user's own build-and-run command prints the metrics.

For applications whose kernels cannot be launched alone (templates, host code
choosing at run time, a project's own harness). The candidate reaches the
command through the wrapper: a copy of the ACF whose target holds its knobs is
named in NVCC_EVO_ACF, so a build with NVCC=nvcc-evo compiles the candidate.
`metric NAME kernels` needs no harness: the unit's own kernels' GPU time in
the run (measure.profile.clock).

- rebuilt, never skipped: before a run that must build the candidate, the files
  the compile database says the unit's compiles wrote are re-dated to 1970, so
  make or ninja rebuild them; and the wrapper's log (NVCC_EVO_LOG, private to
  the run) must show the unit compiled with the candidate's flags, else the
  candidate fails (`not-rebuilt`, `flags-not-applied`);
- statistics: `repeat N` (or `LOW..HIGH`, adaptive: stats.enough) runs per
  candidate, medians and relative spreads stored; `confirm` re-runs winner and
  baseline interleaved (rebuilt each time), sequentially (stats.verdict_clear;
  at most `confirm rounds`; its least rounds and the drift `reserve`d in a time
  budget), judged by stats.faster; a metric printed too coarsely is said;
  `drift`: the baseline rebuilt and run again after the search;
- wrong answers: a bench's `check` statements (acf.bench.command) and `check
  command`; a failed run's last lines go to stderr.

A kernel unit (Triton's, through nvcc-evo-ptxas) gets Triton's and
TorchInductor's caches of its own per run (compiled with the candidate's knobs
in every run); TRITON_PTXAS_PATH and TRITON_PTXAS_BLACKWELL_PATH name the
stand-ins, each running the real program the user named there, if any
(dropin_ptxas.afresh). The command sees NVCC_EVO_PHASE (search, confirm,
drift), NVCC_EVO_CANDIDATE, NVCC_EVO_RUN and NVCC_EVO_CANDIDATE_FLAGS.

The package, by concern: rebuilt (the build step: outputs re-dated, the
wrapper's log showing the candidate's flags), run (one run of the command:
its environment, process group, timeout and `check command`s), metrics (a
run's exit status, checks and metrics read into a `Run`; a candidate's runs
summarised; the primary metric's printed resolution), bench (`CommandBench`:
a candidate's repeated runs, the drift, the reserve) and confirm (winner and
baseline interleaved).

Imports: what nvcc_evo.measure may (acf, driver, cubin, system, status);
nothing above it.
"""
