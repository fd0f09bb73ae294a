"""Matching a compile against an ACF: which file, which unit, which target.

find (the ACF: `$NVCC_EVO_ACF`, else the nearest `nvcc-evo.acf` above the
inputs or here; trusted, readable), index (the lean view of a checked ACF
builds need, cached as JSON by its text), calls (which nvcc calls get
nothing, which inputs may be tuned), archs (the SASS architectures a call
builds; nvidia-smi for `-arch=native`), stale (fingerprints, why an entry is
out of date), builds (a recorded build's identity, what two builds do
differently: --retune's, not a compile's), units (the unit and target per input and architecture:
the `CallPlan`).

Imports: nvcc_evo.driver (common, cache, build.nvcc_options), nvcc_evo.acf
and nvcc_evo.system; lean: no lark nor the ACF model until an index must be
made.
"""
