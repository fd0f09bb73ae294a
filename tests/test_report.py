"""`nvcc-evo --report` from the ACF and the results store alone, on the
committed H200 records; the page rendered by a real headless browser; the
plots (matplotlib) on their own."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import xml.dom.minidom
from pathlib import Path

import pytest

from conftest import DATA, ROOT, evo_env, run_evo

KERNELS = ROOT / "kernels"
H200 = ROOT / "benchmarks" / "data" / "h200-search.jsonl"
UNITS = sorted(p.name for p in KERNELS.glob("*.cu"))
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "firefox")
FRONT_RED = (0xD6, 0x27, 0x28)          # the Pareto front's colour (nvcc_evo.report.plots)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "kernels.html"
    cache = tmp_path_factory.mktemp("cache")
    result = run_evo("--report", "--acf", str(KERNELS / "nvcc-evo.acf"), "--store", str(H200), "--out", str(out),
                     env=evo_env(cache))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    return out


def sections(page: str) -> dict[str, str]:
    parts = re.split(r'<section id="[^"]*"><h2>', page)[1:]
    return {re.match(r"&quot;([^&]+)&quot;", part).group(1): part for part in parts}


def test_every_kernel_has_its_front_and_convergence(report):
    page = report.read_text()
    found = sections(page)
    assert sorted(found) == UNITS
    for unit, part in found.items():
        plots = re.findall(r"<svg.*?</svg>", part, re.S)
        assert len(plots) == 2, unit                               # the front, the convergence
        front = xml.dom.minidom.parseString(plots[0])              # well-formed SVG, inlined
        texts = " ".join(node.firstChild.data for node in front.getElementsByTagName("text") if node.firstChild)
        assert re.search(r"Pareto front \(\d+\)", texts) and "runtime (us)" in texts and "energy (mJ)" in texts, unit
        assert "best so far" in plots[1] and "baseline" in plots[1] and "wall time (s)" in plots[1], unit


def test_the_page_says_knobs_spreads_verification_failures_and_staleness(report):
    found = sections(report.read_text())
    softmax = found["softmax.cu"]
    assert "<td>define.VEC</td><td>4</td><td><b>2</b></td>" in softmax     # chosen against the source's default
    assert re.search(r"runtime \(us\)</td><td>99\.\d+ <small>p20\.\.p80 [\d.]+% wide</small>", softmax)
    assert "<td>p_value</td><td>7.17e-5</td>" in softmax and "<td>date</td><td>2026-11-30</td>" in softmax
    assert "improved runtime 99.616 -&gt; 71.04" in softmax
    assert re.search(r"<td>wrong-answer</td><td>16</td><td><code>", softmax)     # failures, with an example
    assert "Up to date." in softmax
    assert "baseline kept: gain not significant" in found["scale.cu"]
    decode = found["hgemm_decode.cu"]
    assert re.search(r"<td>compile-error</td><td>7</td><td><code>ptxas", decode), decode[-3000:]


def test_a_stale_entry_and_unit_globs(tmp_path, evo_cache):
    shutil.copytree(KERNELS, tmp_path / "kernels", ignore=shutil.ignore_patterns(".nvcc-evo", "__pycache__"))
    acf = tmp_path / "kernels" / "nvcc-evo.acf"
    text = acf.read_text()
    at = text.index('unit "softmax.cu"')
    old = re.search(r'fingerprint = "sha256:[0-9a-f]+"', text[at:]).group(0)
    acf.write_text(text[:at] + text[at:].replace(old, 'fingerprint = "sha256:0000"', 1))
    (tmp_path / "kernels" / "results").mkdir()
    shutil.copy(H200, tmp_path / "kernels" / "results" / "h200.jsonl")
    (tmp_path / "kernels" / "nvcc-evo.toml").write_text('[report]\nstores = ["results/h200.jsonl"]\n'
                                                        'out = "results/r.html"\n')
    out = tmp_path / "kernels" / "results" / "r.html"               # (both from the project settings)
    result = run_evo("--report", "softmax*", cwd=tmp_path / "kernels", env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    found = sections(out.read_text())
    assert list(found) == ["softmax.cu"] and '<p class="stale">Stale: source changed</p>' in found["softmax.cu"]
    wrong = run_evo("--report", "nothing*", "--store", str(H200), cwd=tmp_path / "kernels", env=evo_env(evo_cache))
    assert wrong.returncode == 2 and "--report nothing*: no unit of" in wrong.stderr
    (tmp_path / "empty.jsonl").write_text("")                      # a store with nothing of softmax
    result = run_evo("--report", "softmax*", "--store", str(tmp_path / "empty.jsonl"), cwd=tmp_path / "kernels",
                     env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert re.search(r"<td>&quot;softmax.cu&quot;</td><td>sm_90: source changed</td>", out.read_text())
    (tmp_path / "kernels" / "nvcc-evo.toml").unlink()
    none = run_evo("--report", cwd=tmp_path / "kernels", env=evo_env(evo_cache))
    assert none.returncode == 2 and "no results store at" in none.stderr


def _browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def test_the_report_renders_in_a_real_browser(report):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser (apt-get install chromium-headless-shell, or chromium, or firefox)")
    shot = report.with_suffix(".png")
    if "firefox" in browser:
        argv = [browser, "--headless", "--window-size=1200,3000", "--screenshot", str(shot), report.as_uri()]
    else:
        argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--window-size=1200,3000", f"--screenshot={shot}", report.as_uri()]
    subprocess.run(argv, capture_output=True, timeout=120, check=True)
    kept = ROOT / "out" / "test-report-screenshot.png"          # to look at after the run
    kept.parent.mkdir(exist_ok=True)
    shutil.copy(shot, kept)
    print(f"report screenshot: {kept}")
    from PIL import Image
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 3000)
    colours = image.getcolors(maxcolors=1 << 20)
    assert len(colours) > 200                                  # text, tables and plots, not a blank page
    near = lambda c: all(abs(a - b) < 24 for a, b in zip(c, FRONT_RED))
    assert sum(count for count, colour in colours if near(colour)) > 50   # the first front drawn on screen
    if "firefox" not in browser:
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        assert dom.count("<svg") == 2 * len(UNITS)             # the browser parsed every inlined plot


def test_plots_draw_what_they_are_given():
    from nvcc_evo.report.plots import best_so_far, convergence_figure, front_figure, svg
    assert best_so_far([math.inf, 5, 7, 3, math.inf]) == [math.inf, 5, 5, 3, 3]
    figure = front_figure([(1, 4), (2, 2), (3, 3), (math.inf, 1)], [(1, 4), (2, 2)], "t", "x", "y",
                          baseline=(3, 3), chosen=(2, 2))
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == ["candidates (3)", "Pareto front (2)", "baseline (defaults)", "chosen"]
    drawn = svg(convergence_figure([9, math.inf, 4, 100], [0, 1, 2, 3], 9.0, "c", "runtime"))
    assert drawn.startswith("<svg") and "clipped at 3x baseline" in drawn and "wall time (s)" in drawn


def test_a_unit_whose_every_evaluation_failed_reports_without_warnings(tmp_path, evo_cache):
    """A command backend whose baseline failed (a project whose bench cannot run here) leaves a store of
    failures only: --report drew empty plots and matplotlib's "No artists with labels found to put in
    legend" UserWarning, with a site-packages path, reached the user's stderr."""
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "regs.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                           '    }\n    bench {\n        command "echo no GPU here; exit 1"\n'
                                           '        metric "time ([0-9]+) ms"\n    }\n}\n')
    env = evo_env(evo_cache)
    static = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "2", cwd=tmp_path, env=env)
    assert static.returncode == 0, static.stderr                   # the ACF's entry: the static backend's
    tuned = run_evo("--retune", "--backend", "command", "--target", "sm_90", "--evaluations", "2", cwd=tmp_path, env=env)
    assert tuned.returncode == 1 and "baseline failed (command-failed)" in tuned.stdout, tuned.stdout + tuned.stderr
    done = run_evo("--report", cwd=tmp_path, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    page = (tmp_path / ".nvcc-evo" / "report.html").read_text()
    assert "no finite values to draw" in page and "command-failed" in page
    # the command section does not pass the static backend's verdict off as its own (it showed "baseline
    # kept: no candidate beat it" and the static provenance for a baseline that failed)
    command = page[page.index("[sm_90] on cpu (command)"):]
    command = command[:command.index("[sm_90] on cpu (static)")] if "[sm_90] on cpu (static)" in command else command
    assert "was chosen by the static backend, not from these evaluations" in command
    assert "no candidate beat it" not in command and "(entry by static)" in page


def test_a_unit_whose_header_comes_through_an_include_folder_is_reported(tmp_path, evo_cache):
    """The report made the unit's fingerprint without the recorded build's -I folders, so a unit whose headers
    come through -I (all of CUTLASS) read as "source changed" with every evaluation left aside ("0
    evaluations of the sources as they are now") while --retune --dry-run found it up to date."""
    shutil.copy(DATA / "projects" / "make" / "kernel.cu", tmp_path / "kernel.cu")
    (tmp_path / "inc").mkdir()
    shutil.copy(DATA / "projects" / "make" / "params.h", tmp_path / "inc" / "params.h")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n    search {\n'
                                           '        ptxas.maxrregcount in {32, 255}\n    }\n}\n')
    env = evo_env(evo_cache)
    built = run_evo("-arch=sm_90", "-Iinc", "-c", "kernel.cu", "-o", "kernel.o", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    tuned = run_evo("--retune", "--backend", "static", "--evaluations", "3", cwd=tmp_path, env=env)
    assert tuned.returncode == 0, tuned.stderr
    listed = run_evo("--retune", "--dry-run", cwd=tmp_path, env=env)
    assert "nothing to retune" in listed.stderr, listed.stderr
    assert run_evo("--report", cwd=tmp_path, env=env).returncode == 0
    page = (tmp_path / ".nvcc-evo" / "report.html").read_text()
    assert re.search(r"From [^:]+: [1-9]\d* evaluations of the sources as they are now;", page), page[:2000]
    assert "left aside" not in page and "source changed" not in page
    assert "Up to date." in sections(page)["kernel.cu"]
    (tmp_path / "inc" / "params.h").write_text("#define TERMS 16\n")     # the header through -I: stale now
    listed = run_evo("--retune", "--dry-run", cwd=tmp_path, env=env)      # (naming the header: it said no file)
    assert '"kernel.cu" [sm_90]: source changed (inc/params.h)\n' in listed.stdout, listed.stdout + listed.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-Iinc", "-c", "kernel.cu", cwd=tmp_path, env=env)
    assert "    stale: source changed since it was tuned (inc/params.h)\n" in explained.stdout, explained.stdout
    assert run_evo("--report", cwd=tmp_path, env=env).returncode == 0
    page = (tmp_path / ".nvcc-evo" / "report.html").read_text()
    assert "of earlier sources left aside" in page and "source changed" in page
