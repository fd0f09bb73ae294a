"""What a newcomer reads first: the README (short, per translation unit,
every file it names in the repository, its example ACF valid) and
`--evo-help` (every knob, an ACF that checks, the way to the language)."""
from __future__ import annotations

import re
import textwrap

from conftest import ROOT, run_evo
from nvcc_evo.acf.knobs import KNOBS

README = ROOT / "README.md"


def _check_acf(text: str, folder):
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.acf.resolve import check
    check(parse_text(text, str(folder / "nvcc-evo.acf")), text)


def test_the_readme_is_short_and_says_per_translation_unit():
    text = README.read_text()
    intro = text.split("\n\n")[1]
    assert "per-kernel" not in intro and "translation unit" in intro
    assert len(text.splitlines()) < 200


def test_every_file_the_readme_and_docs_link_is_in_the_repository():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links {target}"
    assert "../" not in README.read_text()


def test_the_readmes_example_acf_checks(tmp_path):
    example = README.read_text().split("```\n")[1]
    example = textwrap.dedent(example.split("```")[0] if "```" in example else example)
    assert example.startswith("acf 1")
    _check_acf(example, tmp_path)


def test_evo_help_lists_every_knob_and_leads_to_the_language(tmp_path):
    shown = run_evo("--evo-help")
    assert shown.returncode == 0 and shown.stderr == ""
    listed = shown.stdout.split("knobs (")[1]
    for knob in KNOBS:
        line = next(line for line in listed.splitlines() if line.split()[:1] == [knob.name])
        assert knob.flag_text() in line
    assert re.search(r"ptxas.opt_level +-Xptxas -ON +0..3 \(default 3\)", shown.stdout)
    assert "docs/acf.md" in shown.stdout and "--acf-check" in shown.stdout
    sample = shown.stdout.split(" in short:\n")[1].split("\nthe whole language")[0]
    _check_acf(textwrap.dedent(sample), tmp_path)
