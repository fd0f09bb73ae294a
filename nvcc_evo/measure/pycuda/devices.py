"""Which CUDA devices this machine has, asked in a child process so that
this one never creates a CUDA context."""
from __future__ import annotations

import functools
import subprocess
import sys


def gpu_names() -> list[str]:
    """The model of each visible CUDA device, by device number ([] without
    PyCUDA or a device; asked in a child, so this process never creates a
    context; once a process: the backend's choice, its devices and the GPU
    an entry's staleness is judged for all ask)."""
    return list(_gpu_names())


@functools.lru_cache(maxsize=1)
def _gpu_names() -> tuple[str, ...]:
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return ()
    probe = ("import pycuda.driver as d; d.init(); "
             "print('\\n'.join(d.Device(i).name() for i in range(d.Device.count())))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip())


def gpu_available() -> bool:
    """PyCUDA importable and a CUDA device present (checked in a child, so
    this process never creates a context)."""
    return bool(gpu_names())
