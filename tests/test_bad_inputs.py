"""Bad inputs found by the s7 probe (an installed wheel, every kind of bad
file, setting and argument): each used to end in a traceback, drop a build's
tuned flags with "internal error", break the build, or blow up in time and
memory. Real nvcc and ptxas throughout."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EVO, evo_env

KERNEL = 'extern "C" __global__ void k(float* y, const float* x) { y[threadIdx.x] = 2.0f * x[threadIdx.x]; }\n'
CAPPED = 'acf 1\nunit "k.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 24\n    }\n}\n'
TUNED = "nvcc-evo: added: -Xptxas -maxrregcount=24"
DEEP = "[" * 100_000 + "]" * 100_000          # valid JSON, nested past Python's recursion limit


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "nvcc-evo.acf").write_text(CAPPED)
    return tmp_path


def evo(project: Path, cache: Path, *args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), *args], cwd=project, env=evo_env(cache, **env),
                          capture_output=True, text=True, timeout=300)


def build(project: Path, cache: Path, **env) -> subprocess.CompletedProcess:
    return evo(project, cache, "-arch=sm_90", "-c", "k.cu", "-o", "k.o", NVCC_EVO_VERBOSE=1, **env)


def retune(project: Path, cache: Path, *more: str) -> subprocess.CompletedProcess:
    return evo(project, cache, "--retune", "--backend", "static", "--evaluations", "2", "--population", "2", *more)


def assert_clean(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr


# ------------------------------------------------------------------ caches
SHAPES = ["[1]", '"text"', "null", '{"answer": 5}', DEEP]


@pytest.fixture(scope="module")
def probed_cache(tmp_path_factory) -> Path:
    """A cache folder that holds the toolkit probe (a build's first step, the costly one): copied by
    each test that breaks a cache, so that the probe is made once."""
    folder = tmp_path_factory.mktemp("probed-project")
    (folder / "k.cu").write_text(KERNEL)
    (folder / "nvcc-evo.acf").write_text(CAPPED)
    cache = tmp_path_factory.mktemp("probed-cache")
    built = build(folder, cache)
    assert built.returncode == 0 and TUNED in built.stderr, built.stderr
    assert list(cache.rglob("toolkit-*.json"))
    return cache


def _broken(probed: Path, project: Path, tmp_path_factory, content: str) -> Path:
    """A cache folder a build of `project` filled (the probe copied, the project's ACF index its own:
    keyed by the ACF's path), then `content` written into every one of its cache files."""
    cache = tmp_path_factory.mktemp("broken-cache")
    shutil.copytree(probed, cache, dirs_exist_ok=True)
    assert build(project, cache).returncode == 0                    # fills the cache
    files = [p for p in cache.rglob("*.json")]
    assert {p.name.split("-")[0] for p in files} == {"toolkit", "acf"}, files
    for path in files:
        path.write_text(content)
    return cache


# A non-mapping (TypeError where a key is read), a mapping of other keys (KeyError), JSON nested past
# the recursion limit (RecursionError): the ways a reader meets another shape. A list, a string and
# null read alike; each is a miss of the ACF index's reader below, without a build.
BROKEN = pytest.mark.parametrize("content", ["[1]", '{"answer": 5}', DEEP], ids=["list", "other-keys", "deep"])


@BROKEN
def test_a_cache_file_of_another_shape_is_a_miss(project, tmp_path_factory, probed_cache, content):
    """Valid JSON of the wrong shape in every cache file (toolkit probe, ACF
    index): was "internal error (TypeError ...)" and an untuned build."""
    cache = _broken(probed_cache, project, tmp_path_factory, content)
    built = build(project, cache)
    assert built.returncode == 0 and TUNED in built.stderr, built.stderr
    assert_clean(built)


@BROKEN
def test_a_retune_reads_a_cache_file_of_another_shape_as_a_miss(project, tmp_path_factory, probed_cache,
                                                                 content):
    """The same broken cache read first by a retune (a build that read it first fills it again): was
    a traceback."""
    cache = _broken(probed_cache, project, tmp_path_factory, content)
    tuned = retune(project, cache)
    assert tuned.returncode == 0, tuned.stderr
    assert_clean(tuned)


@pytest.mark.parametrize("content", SHAPES, ids=["list", "string", "null", "other-keys", "deep"])
def test_an_acf_index_file_of_another_shape_is_a_miss(tmp_path, content):
    from nvcc_evo.driver.match import indexfile
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text(CAPPED)
    entry = {"units": [], "kernel_globs": [], "files": []}
    indexfile.write(str(tmp_path), acf.read_bytes(), str(acf), entry)
    assert indexfile.read(str(tmp_path), acf.read_bytes(), str(acf)) is not None      # a hit, as written
    Path(indexfile.cache_path(str(tmp_path), acf.read_bytes(), str(acf))).write_text(content)
    assert indexfile.read(str(tmp_path), acf.read_bytes(), str(acf)) is None


@pytest.mark.parametrize("content", [*SHAPES, '{"key": "another", "answer": "12.0"}'],
                         ids=["list", "string", "null", "other-keys", "deep", "another-key"])
def test_a_ptxas_answer_file_of_another_shape_is_asked_again(tmp_path, monkeypatch, content):
    """A ptxas answer kept in the cache (its release, its controls, an option it takes) holding
    another shape: `{"answer": 5}` was a hit answering 5."""
    from nvcc_evo.driver.cmdline import ptxas
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    asked = []
    def ask() -> str:
        asked.append(1)
        return "13.0"
    assert ptxas._cached("ptxas", "a key", ask) == "13.0" and len(asked) == 1
    assert ptxas._cached("ptxas", "a key", ask) == "13.0" and len(asked) == 1      # a hit, as written
    ptxas._cache("ptxas", "a key").write_text(content)
    assert ptxas._cached("ptxas", "a key", ask) == "13.0" and len(asked) == 2


def test_a_cache_folder_that_cannot_be_made_keeps_the_tuned_flags(project, tmp_path):
    """XDG_CACHE_HOME naming a file: the toolkit probe's cache write was an
    "internal error (NotADirectoryError)" and an untuned build."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    built = build(project, blocker)
    assert built.returncode == 0 and TUNED in built.stderr, built.stderr
    assert_clean(built)


# ------------------------------------------------------------------ the log
@pytest.mark.parametrize("where", ["/", "/nonexistent-folder/log.jsonl"])
def test_a_log_that_cannot_be_written_never_breaks_a_build(project, evo_cache, tmp_path_factory, where):
    """NVCC_EVO_LOG naming a folder or a missing folder: with an ACF the build
    lost its tuned flags, then its fallback wrote the log again and the build
    failed with a traceback; without one the shim crashed."""
    built = build(project, evo_cache, NVCC_EVO_LOG=where)
    assert built.returncode == 0 and TUNED in built.stderr, built.stderr
    assert f"cannot write the log NVCC_EVO_LOG={where}" in built.stderr
    assert_clean(built)
    plain = tmp_path_factory.mktemp("no-acf")
    (plain / "k.cu").write_text(KERNEL)
    untouched = build(plain, evo_cache, NVCC_EVO_LOG=where)
    assert untouched.returncode == 0 and (plain / "k.o").is_file(), untouched.stderr
    assert "Traceback" not in untouched.stderr


def test_a_log_set_in_the_settings_file_that_cannot_be_written(project, evo_cache):
    (project / "nvcc-evo.toml").write_text('log = "."\n')          # the project's folder: not a file
    built = build(project, evo_cache)
    assert built.returncode == 0 and TUNED in built.stderr, built.stderr
    assert_clean(built)


# ------------------------------------------------------------------ our own records
def test_a_results_line_nested_too_deeply_is_skipped(project, evo_cache):
    assert build(project, evo_cache).returncode == 0
    assert retune(project, evo_cache).returncode == 0
    store = project / ".nvcc-evo" / "results.jsonl"
    kept = store.read_text()
    with store.open("a") as out:
        out.write(DEEP + "\n" + json.dumps({"status": "ok", "metrics": [1], "spreads": {}, "detail": ""}) + "\n")
    again = retune(project, evo_cache, "--all")
    assert again.returncode == 0, again.stderr                      # was: RecursionError, a traceback
    assert_clean(again)
    assert store.read_text().startswith(kept)                        # nothing lost


def test_a_compile_record_nested_too_deeply_is_named(project, evo_cache):
    assert build(project, evo_cache).returncode == 0
    records = list((project / ".nvcc-evo" / "compile-db").glob("*.json"))
    assert records
    records[0].write_text(DEEP)
    dry = retune(project, evo_cache, "--dry-run")
    assert_clean(dry)
    assert "cannot be read" in dry.stderr and records[0].name in dry.stderr, dry.stderr


# ------------------------------------------------------------------ the ACF
@pytest.mark.parametrize("high", ["99999999999999999999", "100000000"])
def test_a_search_range_too_large_to_list_is_a_located_error(project, evo_cache, high):
    """`define.X in 0..HIGH`: the check said ok; a build enumerated every value
    for the unit's space digest (past 2**63: "internal error (OverflowError)";
    10**8: 76 s and 6 GB per build), and with a require the check and --retune
    ended in a traceback."""
    (project / "nvcc-evo.acf").write_text(
        'acf 1\nunit "k.cu" {\n    search {\n        define.X in 0..' + high + '\n        require X > 5\n    }\n'
        '    target sm_90 {\n        ptxas.maxrregcount = 24\n    }\n}\n')
    where = "nvcc-evo.acf:4:9: error: the range 0.." + high
    checked = evo(project, evo_cache, "--acf-check", "nvcc-evo.acf")
    assert checked.returncode == 1 and checked.stderr.startswith(where), checked.stderr
    assert "undefined name" not in checked.stderr                     # no second error made of the first
    tuned = retune(project, evo_cache, "--dry-run")
    assert tuned.returncode == 1 and where in tuned.stderr, tuned.stderr
    built = build(project, evo_cache)
    assert built.returncode == 0, built.stderr
    assert "the ACF has errors; building without tuned flags" in built.stderr and "nvcc-evo.acf:4:9" in built.stderr
    assert_clean(built)


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize("args, said", [
    (("--evaluations", "0"), "--evaluations 0: must be positive"),        # was: the baseline written to the ACF
    (("--evaluations", "-1"), "--evaluations -1: must be positive"),
    (("--population", "0"), "--population 0: must be positive"),
    (("--jobs", "0"), "--jobs 0: must be positive"),
    (("--time-limit", "-5"), "--time-limit -5.0: must be positive"),
    (("--timeout", "nan"), "--timeout nan: must be a number of seconds"),  # was: a traceback (ValueError)
    (("--timeout", "inf"), "--timeout inf: must be a finite number of seconds"),
    (("--gpus", "count:x"), "--gpus count:x: must be all, count:N or device numbers"),   # was: ignored
    (("--gpus", "0,,2"), "--gpus 0,,2: must be all, count:N or device numbers"),
    (("--cluster", "local:0"), "--cluster local:0: must be ray://HEAD:PORT, auto, local or local:N"),
    (("--at-once", "0"), "--at-once 0: must be positive"),
    (("--device", "-1"), "--device -1: must be 0 or more"),                 # was: accepted
])
def test_a_bad_search_setting_on_the_command_line_stops_before_anything(project, evo_cache, args, said):
    """The file's checks (positive, ...) were not made of the command line:
    --evaluations 0 or -1 wrote the baseline into the ACF as its choice."""
    assert build(project, evo_cache).returncode == 0
    before = (project / "nvcc-evo.acf").read_text()
    done = retune(project, evo_cache, *args)
    assert done.returncode == 2 and f"nvcc-evo: error: {said}" in done.stderr, done.stderr
    assert_clean(done)
    assert (project / "nvcc-evo.acf").read_text() == before
    assert not (project / ".nvcc-evo" / "results.jsonl").exists()


@pytest.mark.parametrize("line, said", [
    ("timeout = nan", "nvcc-evo.toml:2:11: error: 'retune.timeout' must be a number of seconds, got nan"),
    ("timeout = inf", "nvcc-evo.toml:2:11: error: 'retune.timeout' must be a finite number of seconds, got inf"),
    ('gpus = "count:x"', "nvcc-evo.toml:2:8: error: 'retune.gpus' must be all, count:N or device numbers "
                         "(0 or 0,2), got 'count:x'"),
    ('cluster = "local:0"', "nvcc-evo.toml:2:11: error: 'retune.cluster' must be ray://HEAD:PORT, auto, local or "
                            "local:N, got 'local:0'"),
    ('target = "sm_9000"', "nvcc-evo.toml:2:10: error: 'retune.target' must be a SASS architecture such as "
                           "sm_90 or sm_90a, got 'sm_9000'"),
])
def test_a_bad_search_setting_in_the_file_is_located(project, evo_cache, line, said):
    """Accepted before, then a traceback (timeout nan or inf) or silence (gpus,
    cluster: the dry run listed them as set), or an error naming --target."""
    (project / "nvcc-evo.toml").write_text(f"[retune]\n{line}\n")
    done = retune(project, evo_cache, "--dry-run")
    assert done.returncode == 1 and said in done.stderr, done.stderr
    assert_clean(done)


@pytest.mark.parametrize("variable, value, said", [
    ("NVCC_EVO_TIMEOUT", "nan", "NVCC_EVO_TIMEOUT=nan: must be a number of seconds"),
    ("NVCC_EVO_GPUS", "count:x", "NVCC_EVO_GPUS=count:x: must be all, count:N or device numbers"),
    ("NVCC_EVO_CLUSTER", "http://head", "NVCC_EVO_CLUSTER=http://head: must be ray://HEAD:PORT"),
])
def test_a_bad_search_setting_in_the_environment_is_named(project, evo_cache, variable, value, said):
    done = evo(project, evo_cache, "--retune", "--backend", "static", "--dry-run", **{variable: value})
    assert done.returncode == 2 and f"nvcc-evo: error: {said}" in done.stderr, done.stderr
    assert_clean(done)


def test_a_very_long_line_is_shown_around_the_error(project, evo_cache):
    """A 1 MB line: the message held the whole line and a caret line as long. (Now over the line's limit,
    said where the limit ends; a long line within it is shown around its error.)"""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 40'
                                          + " " * 1_000_000 + "x\n    }\n}\n")
    done = evo(project, evo_cache, "--acf-check", "nvcc-evo.acf")
    assert done.returncode == 1
    head, shown, caret = done.stderr.splitlines()[:3]
    assert head == "nvcc-evo.acf:4:16385: error: a line of 1000032 characters (the limit is 16384)"
    assert len(done.stderr) < 1000 and shown.startswith("...") and caret.strip() == "^"
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 40'
                                          + " " * 16_000 + "x\n    }\n}\n")
    done = evo(project, evo_cache, "--acf-check", "nvcc-evo.acf")
    head, shown, caret = done.stderr.splitlines()[:3]
    assert done.returncode == 1 and head.startswith("nvcc-evo.acf:4:16032: error: unexpected 'x'")
    assert len(done.stderr) < 1000 and shown.startswith("...")
    assert shown[len(caret) - 1] == "x" and caret.strip() == "^"


@pytest.mark.parametrize("acf, where", [
    ('acf 1\nunit "k.cu" {\n    bench {\n        command "./app\0x"\n        metric runtime "t: ([0-9.]+)"\n'
     '    }\n}\n', "nvcc-evo.acf:4:23:"),                 # was: ok, then --retune's traceback (embedded null byte)
    ('acf 1\nunit "k\0.cu" {\n    target sm_90 {\n        ptxas.maxrregcount = 24\n    }\n}\n', "nvcc-evo.acf:2:8:"),
    ('acf 1\nunit "k.cu" {\n    target sm_90 "H\x00200" {\n        ptxas.maxrregcount = 24\n    }\n}\n',
     "nvcc-evo.acf:3:20:"),                             # was: ok, a GPU name no GPU has
])
def test_a_nul_byte_is_a_located_error(project, evo_cache, acf, where):
    (project / "nvcc-evo.acf").write_text(acf)
    checked = evo(project, evo_cache, "--acf-check", "nvcc-evo.acf")
    assert checked.returncode == 1 and checked.stderr.startswith(f"{where} error: a NUL byte"), checked.stderr
    tuned = evo(project, evo_cache, "--retune", "--backend", "command", "--evaluations", "2")
    assert tuned.returncode == 1 and f"{where} error: a NUL byte" in tuned.stderr, tuned.stderr
    assert_clean(tuned)
    built = build(project, evo_cache)
    assert built.returncode == 0 and "the ACF has errors; building without tuned flags" in built.stderr
    assert_clean(built)


@pytest.mark.parametrize("kind, why", [("loop", "Too many levels of symbolic links"),
                                       ("dangling", "No such file or directory"),
                                       ("folder", "Is a directory"), ("fifo", "not a regular file")])
def test_an_acf_of_that_name_that_cannot_be_read_is_said(project, evo_cache, kind, why):
    """nvcc-evo.acf a link loop, a dangling link, a folder or a FIFO: builds
    went untuned without a word, and --retune said there was no ACF at all."""
    acf = project / "nvcc-evo.acf"
    acf.unlink()
    {"loop": lambda: acf.symlink_to("nvcc-evo.acf"), "dangling": lambda: acf.symlink_to("gone.acf"),
     "folder": acf.mkdir, "fifo": lambda: __import__("os").mkfifo(acf)}[kind]()
    said = f"cannot read the ACF {acf}: {why}"
    built = build(project, evo_cache)
    assert built.returncode == 0 and (project / "k.o").is_file()
    assert f"nvcc-evo: warning: {said}; building without tuned flags" in built.stderr, built.stderr
    for verb in (("--retune", "--dry-run"), ("--report",)):
        done = evo(project, evo_cache, *verb)
        assert done.returncode == 3 and f"nvcc-evo: error: {said}" in done.stderr, done.stderr
        assert_clean(done)


def test_the_report_never_replaces_what_is_not_a_regular_file(project, evo_cache):
    """--out named a FIFO (or, as root, /dev/full): the write's rename replaced
    it with the page; a link was replaced by a file; a folder was a raw errno."""
    import os
    import stat
    assert build(project, evo_cache).returncode == 0 and retune(project, evo_cache).returncode == 0
    os.mkfifo(project / "pipe")
    (project / "folder").mkdir()
    for name in ("pipe", "folder"):
        done = evo(project, evo_cache, "--report", "--out", name)
        assert done.returncode == 2, done.stderr
        assert f"the report file {name} is " in done.stderr and done.stdout == ""
    assert stat.S_ISFIFO(os.lstat(project / "pipe").st_mode)
    (project / "link.html").symlink_to("real.html")           # no link is followed (issue 25): name its target
    done = evo(project, evo_cache, "--report", "--out", "link.html")
    assert done.returncode == 2 and "the report file link.html is a symbolic link to real.html" in done.stderr
    assert (project / "link.html").is_symlink() and not (project / "real.html").exists()
    lost = evo(project, evo_cache, "--report", "--out", "/proc/none/report.html")
    assert lost.returncode == 3 and "cannot write the report /proc/none/report.html" in lost.stderr
    assert_clean(lost)


def test_a_results_store_that_is_no_regular_file_is_named(project, evo_cache):
    """.nvcc-evo/results.jsonl a FIFO: --retune hung reading it. (A full disk
    is the same error path: `cannot append to the results store ...: No space
    left on device`, found on a 64 KB tmpfs; it was a bare errno.)"""
    import os
    assert build(project, evo_cache).returncode == 0
    os.mkfifo(project / ".nvcc-evo" / "results.jsonl")
    before = (project / "nvcc-evo.acf").read_text()
    done = subprocess.run([str(EVO), "--retune", "--backend", "static", "--evaluations", "2", "--population", "2"],
                          cwd=project, env=evo_env(evo_cache), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert f"cannot append to the results store {project / '.nvcc-evo' / 'results.jsonl'}: " \
           f"{project / '.nvcc-evo' / 'results.jsonl'} is not a regular file" in done.stderr
    assert_clean(done)
    assert (project / "nvcc-evo.acf").read_text() == before


@pytest.mark.parametrize("content, said", [
    ('{"argv": ["nvcc"], "colour": 1}', "not a compile record of this nvcc-evo (missing cwd, env, nvcc"),
    ("[1, 2]", "not a compile record (JSON list, not an object)"),
])
def test_a_compile_record_of_another_shape_says_what_is_wrong(project, evo_cache, content, said):
    """Was Python's own words: `CompileRecord.__new__() missing 12 required
    positional arguments: ...`, `cannot convert dictionary update sequence element #0`."""
    assert build(project, evo_cache).returncode == 0
    record = next((project / ".nvcc-evo" / "compile-db").glob("*.json"))
    record.write_text(content)
    dry = retune(project, evo_cache, "--dry-run")
    assert f"compile database {record}: unreadable (TypeError: {said}" in dry.stderr, dry.stderr
    assert "__new__" not in dry.stderr and "sequence element" not in dry.stderr
    assert_clean(dry)


def test_a_build_against_an_acf_of_many_units_stays_quick(project, evo_cache):
    """20000 units named by their files: every build (the ACF's index cached)
    compiled one regular expression per unit glob to match its input, about
    10 s a compile here; literal segments are compared as strings now. What
    is asserted is the CPU time the build spent (under 1 s), which is the
    same on a loaded machine; its wall time there went over 4 s."""
    import resource

    def cpu_seconds() -> float:                 # (of the children this test waited for)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        return used.ru_utime + used.ru_stime
    unit = 'unit "u{}.cu" {{\n    target sm_90 {{\n        ptxas.maxrregcount = 40\n    }}\n}}\n'
    (project / "nvcc-evo.acf").write_text("acf 1\n" + "".join(unit.format(i) for i in range(20000)) + CAPPED[6:])
    explain = ("--explain", "-arch=sm_90", "-c", "k.cu", "-o", "k.o")
    first = evo(project, evo_cache, *explain)                         # checks the file and caches its index
    assert first.returncode == 0 and "-maxrregcount=24" in first.stdout, first.stderr
    start = cpu_seconds()
    again = evo(project, evo_cache, *explain)
    assert again.returncode == 0 and "-maxrregcount=24" in again.stdout
    spent = cpu_seconds() - start
    assert spent < 4.0, spent                                         # was about 10 s
