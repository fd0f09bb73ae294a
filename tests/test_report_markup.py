"""The report page escapes every value it reads from a file (issue 38, case
2): a cloned repository's results store, kernel comparisons, compile record
and ACF with markup, quotes and newlines in every field they hold; the page
`--report` writes from them has no markup of theirs, no attribute they
close, and no line they begin (a store's `arch` once carried a key onto a
line of its own, and `<td>sm_90<script>...</script></td>` ran)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from conftest import ROOT, evo_env, run_evo

KERNELS = ROOT / "kernels"
H200 = ROOT / "benchmarks" / "data" / "h200-search.jsonl"
LINE = "ssh-ed25519 AAAAattacker"
MARK = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>\n" + LINE


def marked(what: str) -> str:
    return f"{what}{MARK}"


def store_lines() -> list[dict]:
    """scale.cu's H200 records as they are (its entry's section), and again
    with markup in every string field a section shows (a section of its own)."""
    mine = [json.loads(l) for l in H200.read_text().splitlines() if '"unit": "\\"scale.cu\\""' in l]
    out = []
    for data in mine:
        data["metrics"][marked("metric")] = 1.5
        data["spreads"][marked("metric")] = 0.01
        data["detail"] = marked("detail")
        out.append(data)
    for number, data in enumerate(json.loads(json.dumps(mine))):
        data["context"].update(arch=marked("sm_90"), device=marked("device"), backend=marked("backend"),
                               toolkit=marked("toolkit"), build=marked("build"))
        data["genome"] = [[marked("knob"), 1]] + data["genome"]
        data["flags"] = [marked("flag")]
        data["sass_hash"] = marked("hash")
        if number % 3 == 0:
            data["status"], data["metrics"] = "compile-error", {}
        out.append(data)
    return out


def comparisons(hashes: set[str]) -> list[str]:
    """kernels.jsonl: each pair of scale.cu's builds, its kernel named in markup."""
    build = lambda h: {"sass_hash": h, "kernels": [{"name": marked("kernel"), "registers": 16}],
                       "launch": {"kernel": marked("kernel"), "threads": 256}}
    return [json.dumps({"unit": '"scale.cu"', "arch": "sm_90", "device": marked("device"), "backend": "pycuda",
                        "note": marked("note"), "time": 1.0, "baseline": build(a), "chosen": build(b)})
            for a in hashes for b in hashes]


def compile_record() -> dict:
    return {"argv": [marked("-arg"), "scale.cu"], "cwd": ".", "env": {"CPATH": marked("env")}, "nvcc": marked("nvcc"),
            "toolkit": marked("13.0"), "input": "scale.cu", "output": marked("out.o"), "unit_index": 0,
            "unit_globs": ['scale.cu'], "arch": "sm_90", "target": marked("t"), "fingerprint": marked("f"),
            "stale": [marked("s")], "flags": [marked("flag")], "time": 1.0}


def test_no_value_from_a_file_is_markup_in_the_page(tmp_path, evo_cache):
    clone = tmp_path / "clone"
    shutil.copytree(KERNELS, clone, ignore=shutil.ignore_patterns(".nvcc-evo", "__pycache__"))
    acf = clone / "nvcc-evo.acf"
    text = acf.read_text()
    spelled = json.dumps(MARK)[1:-1]                       # (an ACF string: \" and \n escaped)
    at = text.index('unit "scale.cu"')
    verdict = re.search(r'verdict = "(?:[^"\\]|\\.)*"', text[at:]).group(0)
    text = text[:at] + text[at:].replace(verdict, f'verdict = "verdict{spelled}"', 1)
    acf.write_text(text + f'\nunit "unit{spelled}.cu" {{\n    search {{\n        ptxas.opt_level in 1..3\n'
                          f'    }}\n}}\n')
    (clone / ".nvcc-evo" / "compile-db").mkdir(parents=True)
    (clone / ".nvcc-evo" / "compile-db" / "0.json").write_text(json.dumps(compile_record()))
    lines = store_lines()
    (clone / ".nvcc-evo" / "results.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    hashes = {l["sass_hash"] for l in lines if "<" not in l["sass_hash"]}
    (clone / ".nvcc-evo" / "kernels.jsonl").write_text("\n".join(comparisons(hashes)) + "\n")

    done = run_evo("--report", cwd=clone, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    page = (clone / ".nvcc-evo" / "report.html").read_text()
    assert "<script" not in page and "<img" not in page and "onerror=alert(2)>" not in page
    assert not [l for l in page.splitlines() if l.lstrip().startswith(LINE)]    # no line of its own
    shown = "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&gt;&lt;img src=x onerror=alert(2)&gt;\\n" + LINE
    assert f"detail{shown.partition(chr(92))[0]}</code>" in page            # (a failure's first line)
    for field in ("metric", "sm_90", "device", "backend", "knob", "verdict", "unit", "kernel", "note"):
        assert f"{field}{shown}" in page, field                # each reached the page, escaped
