"""The environment of a run of the user's program whose Triton kernels must
be compiled anew through the drop-in ptxas: a kernel unit's candidate run
(--retune's command backend, and any bench that runs the user's program).

- Triton runs TRITON_PTXAS_PATH below sm_100 and TRITON_PTXAS_BLACKWELL_PATH
  from sm_100 on: each names its stand-in (`nvcc-evo-ptxas`,
  `nvcc-evo-ptxas-blackwell`). A real program the user named there is moved
  to NVCC_EVO_REAL_PTXAS or NVCC_EVO_REAL_PTXAS_BLACKWELL (unless those name
  one already), so that each stand-in runs the program it replaces.
- Triton's cache (TRITON_CACHE_DIR) and TorchInductor's
  (TORCHINDUCTOR_CACHE_DIR) are the run's own, in `folder`, empty: the
  drop-in's `--version` digest makes Triton's cache miss for a new entry, but
  TorchInductor's FX graph cache is keyed without ptxas (torch 2.11: Triton's
  source hash, the CUDA version, the GPU, its own config) and on a hit
  launches the cubins it bundled without asking Triton (its static CUDA
  launcher, on by default): a warm one answers a candidate with the kernel of
  an earlier one. Its remote caches (off unless a user turns them on) are
  off for the run, for the same reason.
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from nvcc_evo.driver.common import (REAL_PTXAS_BLACKWELL_ENV, REAL_PTXAS_ENV,
                                    TRITON_PTXAS_BLACKWELL_ENV,
                                    TRITON_PTXAS_ENV, is_self)
from nvcc_evo.system.leftovers import private_folder, remove_private

# (Triton's variable, the stand-in it is given, where a real program named there goes)
STAND_INS = ((TRITON_PTXAS_ENV, "nvcc-evo-ptxas", REAL_PTXAS_ENV),
             (TRITON_PTXAS_BLACKWELL_ENV, "nvcc-evo-ptxas-blackwell", REAL_PTXAS_BLACKWELL_ENV))
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
INDUCTOR_REMOTE_OFF = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0",
                       "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "0"}


def stand_in(name: str) -> str:
    """Our console script `name`: beside this Python's nvcc-evo, else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.isfile(beside) else (shutil.which(name) or name)


def through_stand_ins(environ: dict, folder: str) -> dict:
    """`environ` for a run whose Triton compiles go through the stand-ins,
    with Triton's and TorchInductor's caches of its own under `folder`."""
    env = dict(environ)
    for variable, name, real in STAND_INS:
        named = env.get(variable, "")
        if named and os.path.isfile(named) and os.access(named, os.X_OK) and not is_self(named):
            env.setdefault(real, os.path.abspath(named))       # the user's own real program: the
                                                               # stand-in runs it
        if not (named and is_self(named)):
            env[variable] = stand_in(name)
    env[TRITON_CACHE_ENV] = os.path.join(folder, "triton-cache")
    env[INDUCTOR_CACHE_ENV] = os.path.join(folder, "inductor-cache")
    env.update(INDUCTOR_REMOTE_OFF)
    return env


@contextmanager
def afresh(environ: dict) -> Iterator[dict]:
    """`through_stand_ins` with the caches in a private folder of its own, removed after: one run of
    the program whose Triton kernels compile anew (a kernel unit's first run for a retune)."""
    folder = private_folder("afresh")
    try:
        yield through_stand_ins(environ, folder)
    finally:
        remove_private(folder)
