"""The pycuda backend: real kernel time and energy on the GPU, correctness first.

Measurements run in a measuring process per GPU (worker), one request at a
time (pool). A candidate that kills the CUDA context or hangs is recorded
with its status and the process is replaced. The baseline's outputs, or the
bench's numpy reference, are what every candidate is compared with, within
the bench spec's tolerances (NaN never passes), on outputs poisoned before
the launch.

The package, by concern: bench (`GpuBench`: a candidate measured, the
drift, the reserve, racing's incumbent), references (what outputs are
compared with, and which a measuring process holds), confirm (the winner
re-measured against the baseline, interleaved, and on fresh inputs), pool
(the measuring processes: `POOLS`, `WorkerPool`, `TurnLock`), pipe (the
values on their pipe), worker (the measuring process: `Device`, its
context, checks and runs), data (the bench's inputs on the host and the
device), timing (events, racing, settling; energy from NVML; the copy rate),
device_check (the outputs' check on the GPU) and devices (which GPUs there
are, asked in a child).

Imports: what nvcc_evo.measure may (acf, driver, cubin, system, status);
nothing above it. PyCUDA and NVML only in the measuring process (worker,
timing) and in the child that devices asks.
"""
