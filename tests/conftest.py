"""Shared fixtures: the real nvcc, temporary projects, and the GPU marker."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
# The bench block of tests/data/cuda/faulty.cu (a saxpy with BUG, SKIP and CRASH switches) for the GPU tests.
FAULTY_BENCH = '''
    bench {
        kernel saxpy
        let N = 1024 * 1024 * 32
        arg n : i32 = N
        arg a : f32 = 2.0
        arg x : f32[N] = random(seed=3)
        arg y : f32[N] = random(seed=4)
        grid (cdiv(N, BLOCK))
        block (BLOCK)
        check y rtol 1e-6
    }
'''


def pytest_collection_modifyitems(config, items):
    reason = _gpu_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _gpu_missing_reason() -> str | None:
    try:
        import pycuda.driver as driver  # noqa: F401
    except ImportError:
        return "needs PyCUDA and an NVIDIA GPU (pip install 'nvcc-evo[gpu]' on a machine with one)"
    try:
        driver.init()
        if driver.Device.count() == 0:
            return "no CUDA device on this machine"
    except Exception as error:  # the driver's own error types vary by version
        return f"CUDA driver unavailable: {error}"
    return None


@pytest.fixture(scope="session")
def real_nvcc() -> Path:
    found = shutil.which("nvcc")
    if found is None:
        pytest.fail("the real nvcc must be on PATH for the test suite")
    return Path(found).resolve()


def _pip_tool(name: str) -> Path | None:
    """A CUDA tool installed from the package index into site-packages/nvidia/cu13/bin."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        tool = Path(folder) / "cu13" / "bin" / name
        if tool.is_file():
            return tool
    return None


def _pip_toolkit() -> Path | None:
    """CUDA 13.5 installed from the package index into site-packages/nvidia/cu13."""
    return _pip_tool("nvcc")


def cmake_configure(source: Path, build: Path, env: dict, *more: str) -> None:
    """`cmake -S SOURCE -B BUILD` with the installed nvcc-evo as its CUDA compiler, as a user configures
    (`more`: further arguments, e.g. `-G Ninja`)."""
    done = subprocess.run(["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_CUDA_COMPILER={EVO}", *more],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def cmake_build(build: Path, env: dict) -> subprocess.CompletedProcess:
    """`cmake --build BUILD`, which must succeed."""
    done = subprocess.run(["cmake", "--build", str(build)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def compile_seconds(source: Path, arch: str = "sm_90", *defines: str) -> float:
    """How long the real nvcc takes, here and now, to compile `source` as a retune compiles a
    candidate (`-c`, one SASS target, ptxas verbose; into a folder of its own): what a test sets a
    time limit or a timeout against, so that the test asks the same of a loaded machine as of an
    idle one."""
    with tempfile.TemporaryDirectory(prefix="compile-seconds-") as work:
        started = time.monotonic()
        done = subprocess.run(["nvcc", "-c", str(source), f"-gencode=arch={arch.replace('sm_', 'compute_')},"
                               f"code={arch}", "-Xptxas", "-v", *defines, "-o", os.path.join(work, "timed.o")],
                              cwd=work, capture_output=True, text=True)
        seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return seconds


def cuobjdump() -> Path:
    found = _pip_tool("cuobjdump")         # (the test extra's nvidia-cuda-cuobjdump, with or without CUDA 13.5)
    if found is not None:
        return found
    if shutil.which("cuobjdump"):            # (the GPU machine's toolkit has it)
        return Path(shutil.which("cuobjdump"))
    pytest.fail("cuobjdump missing: `make test` installs nvidia-cuda-cuobjdump")


def toolkits() -> list:
    """The installed CUDA 13.0 and the 13.5 from the package index."""
    found = [pytest.param(Path(shutil.which("nvcc")).resolve(), id="cuda13.0")]
    pip = _pip_toolkit()
    found.append(pytest.param(pip, id="cuda13.5", marks=[] if pip else
                              pytest.mark.skip(reason="CUDA 13.5 not installed (make test installs it)")))
    return found


def sass(binary: Path) -> str:
    """Disassembly of every cubin in a .o or .cubin, for comparing builds."""
    tool = cuobjdump()
    env = dict(os.environ, PATH=f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([str(tool), "-sass", str(binary)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if not l.startswith("Fatbin") and "code for" not in l
             and not l.strip().startswith("File") and "arch =" not in l]
    return "\n".join(lines)


EVO = Path(sys.executable).parent / "nvcc-evo"
# Where the package is not installed (the GPU machine runs from the source tree):
EVO_COMMAND = [str(EVO)] if EVO.exists() else [sys.executable, "-m", "nvcc_evo"]


def interruptible() -> None:
    """A preexec function for a child a test will send SIGINT: the signal as
    a terminal gives it. A suite run in the background (`make test &`) has
    SIGINT ignored, its children inherit that, and their Python never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_evo(*args: str, cwd: Path | None = None, env: dict | None = None, input: str | None = None):
    """Run the installed `nvcc-evo` command as a user would."""
    return subprocess.run([*EVO_COMMAND, *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True)


# nvcc-evo's command line in a Python where the GPU check of kernel times stands aside (CUPTI is still
# checked): no GPU here, the stand-in programs add their kernels to the injection library themselves.
WITHOUT_GPU_CHECK = ("import sys\nfrom nvcc_evo.measure.profile import clock\nfrom nvcc_evo.cli import main\n"
                     "clock.gpu_missing = lambda: ''\nsys.exit(main(sys.argv[1:]))\n")


def run_evo_without_gpu_check(*args: str, cwd: Path, env: dict):
    """`nvcc-evo ARGS` as run_evo runs it, as on a machine with a GPU (WITHOUT_GPU_CHECK)."""
    return subprocess.run([sys.executable, "-c", WITHOUT_GPU_CHECK, *args], cwd=cwd,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)


@pytest.fixture(scope="session")
def evo_cache(tmp_path_factory) -> Path:
    """One toolkit-probe cache for the whole session, apart from the user's.
    Under pytest-xdist the workers of a run share it (each probe once, not
    once a worker): nvcc-evo writes its cache files whole (replace_file)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "xdg-cache"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("xdg-cache")


def evo_env(cache: Path, nvcc: Path | None = None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}
    env["XDG_CACHE_HOME"] = str(cache)
    # A temporary folder of its own: a retune sweeps (and says it swept) the private folders killed
    # processes left in its temporary folder; another test's (or another program's) are not this one's.
    # Ray keeps its sockets in the usual place (their paths must stay short).
    env["TMPDIR"] = tempfile.mkdtemp(prefix="tmp-", dir=cache.parent)
    env.setdefault("RAY_TMPDIR", "/tmp")
    if nvcc is not None:
        env["NVCC_EVO_REAL_NVCC"] = str(nvcc)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def kernels_project(folder: Path, units) -> Path:
    """A copy of the project's kernels `units` (file names) with the kernels'
    ACF, references and shared header: a project a retune can search."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (*units, "nvcc-evo.acf", "references.py", "block_reduce.cuh"):
        shutil.copy(ROOT / "kernels" / name, folder / name)
    return folder


def searched(folder: Path, units) -> tuple[list, list]:
    """What a retune of `units` left in `folder`: the stored records of those
    units (a unit's search is the same whatever other units the run searched)
    without their timings (compile time), and each unit's written entry
    without its provenance; the same for two runs of a deterministic backend."""
    from nvcc_evo.execute.store import Store
    spelled = {f'"{unit}"' for unit in units}           # (a record's unit as the ACF spells it)
    records = sorted((r.context.unit, repr(r.genome), r.measurement.status, r.sass_hash,
                      tuple((k, v) for k, v in r.measurement.metrics if k != "compile_time"))
                     for r in Store(folder / ".nvcc-evo" / "results.jsonl").read()
                     if r.context.unit in spelled)
    assert {record[0] for record in records} == spelled, (folder, units)     # each unit searched
    text = (folder / "nvcc-evo.acf").read_text()
    entries = [text[text.index(f'unit "{unit}"'):] for unit in units]
    return records, [entry[:entry.index("provenance")] for entry in entries]


def tracked_tree(dest: Path) -> Path:
    """The checkout as a clone would have it (no build outputs, no caches)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True)
    if listed.returncode != 0:
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", "build", "out", "*.egg-info",
                                                                  "__pycache__", ".nvcc-evo"))
        return dest
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest
