"""Invariants of the knob table."""
from __future__ import annotations

import re

from nvcc_evo.acf import knobs
from nvcc_evo.acf.knobs import Form, KNOBS, Kind


def test_names_are_unique_and_dotted():
    names = [k.name for k in KNOBS]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"(ptxas|nvcc)\.[a-z_]+", name), name


def test_spellings_are_unique_per_family():
    for family in ("ptxas", "nvcc"):
        spellings = [k.spelling.split("=")[0] for k in KNOBS if k.family == family]
        assert len(spellings) == len(set(spellings)), family


def test_every_row_is_well_formed():
    for knob in KNOBS:
        if knob.form is Form.TOOL:          # chooses a program: no flag, and only a step of its own takes it
            assert knob.spelling == "" and knob.name in knobs.STEP_ONLY, knob.name
            continue
        assert knob.spelling.startswith("-"), knob.name
        if knob.form is Form.SWITCH:
            assert knob.kind is Kind.BOOL and "{}" not in knob.spelling, knob.name
        else:
            assert "{}" in knob.spelling, knob.name
        if knob.kind is Kind.INT:
            assert knob.low < knob.high, knob.name
        if knob.kind is Kind.ENUM:
            assert len(knob.choices) >= 2, knob.name
        if knob.default is not None:
            assert knob.accepts(knob.default), knob.name


def test_knobs_md_rows_are_all_in_the_table():
    # The measured list of knobs that change device code, by ptxas/nvcc spelling.
    for spelling in ["-maxrregcount", "--register-usage-level", "-Ofc", "-dlcm", "-dscm", "-flcm", "-fscm",
                     "--fmad", "--use_fast_math", "--ftz", "--prec-div", "--prec-sqrt", "--maxntid",
                     "--minnctapersm", "--override-directive-values", "-jtd", "--disable-optimizer-constants",
                     "--device-function-maxrregcount", "--enable-func-clone-sc", "--restrict",
                     "--optimize-float-atomics"]:
        assert any(k.spelling.split("=")[0] == spelling for k in KNOBS), spelling
    assert knobs.lookup("ptxas.opt_level").spelling == "-O{}"


def test_defines_are_a_family_of_their_own():
    assert knobs.is_define("define.TILE_M")
    assert not knobs.is_define("define.")
    assert not knobs.is_define("define.a.b")
    assert knobs.lookup("define.TILE") is None


def test_accepts_checks_type_and_domain():
    reg = knobs.lookup("ptxas.maxrregcount")
    assert reg.accepts(64) and not reg.accepts(300) and not reg.accepts(True) and not reg.accepts(64.0)
    assert knobs.lookup("ptxas.fast_compile").accepts(0)        # -Ofc=0 written as a number
    assert not knobs.lookup("ptxas.dlcm").accepts("global")
    assert knobs.lookup("nvcc.ftz").accepts(False) and not knobs.lookup("nvcc.ftz").accepts(0)


def test_step_only_knobs_take_a_release_or_a_file():
    version, controls = knobs.lookup("ptxas.version"), knobs.lookup("ptxas.controls")
    assert version.accepts("13.3") and version.accepts("13.3.73") and version.accepts("toolkit")
    assert not version.accepts("13") and not version.accepts(13.3) and not version.accepts("latest")
    assert controls.accepts("controls/a.acf") and controls.accepts("none") and not controls.accepts(1)
    assert knobs.STEP_ONLY == {"ptxas.version", "ptxas.controls"}
