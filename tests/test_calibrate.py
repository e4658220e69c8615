"""`decodelab calibrate`: the root finder on toy laws worked by hand, the recording of a
calibration (a targeted line edit, comments kept), calibration figures in the claims table, and
the command's one-line errors (decodelab.runs.calibrate, decodelab.runs.placeholders)."""

from __future__ import annotations

import pytest
from decodelab.apps.cli import run_command
from decodelab.errors import ConfigError
from decodelab.runs.calibrate import _refuse_second, rounded, solve, target_of
from decodelab.runs.claims import mark_calibrations
from decodelab.runs.placeholders import (
    apply_edits,
    calibrated_line,
    figure_ids,
    load_params,
    registry_edit,
    resolve_figure,
    resolve_param,
    value_edits,
)


def test_root_of_a_linear_law():
    # figure = 2 x + 1, published 7: x = (7 - 1) / 2 = 3 by hand
    x, how = solve(lambda x: 2 * x + 1, 7.0, 0.0, 10.0)
    assert how == "root" and x == pytest.approx(3.0, abs=1e-8)


def test_root_of_a_monotone_nonlinear_law():
    # figure = 100 / x (a launch cost that slows a speedup), published 8: x = 12.5
    x, _ = solve(lambda x: 100.0 / x, 8.0, 1.0, 50.0)
    assert x == pytest.approx(12.5, rel=1e-8)


def test_no_root_in_range_gives_the_closest_end():
    x, how = solve(lambda x: x, 20.0, 0.0, 10.0)
    assert how == "closest" and x == pytest.approx(10.0, abs=1e-5)


def test_integer_parameter_rounds_to_the_better_integer():
    x, _ = solve(lambda x: 3.0 * x, 14.0, 1.0, 10.0, integer=True)  # 14 / 3 = 4.67 -> 5 (15 beats 12)
    assert x == 5.0


def test_target_of_a_published_range_is_its_nearer_end():
    assert target_of([6.0, 100.0], 4.9) == 6.0
    assert target_of([1.0, 2.0], 2.5) == 2.0
    assert target_of([1.0, 2.0], 1.5) == 1.5
    assert target_of(1042, 959.0) == 1042.0


def test_rounding_keeps_a_range_figure_inside():
    p = load_params()["pair.405b_3b"]
    # f rises with x; the root 0.90085 of f = 6 rounds to 0.9008 (f < 6) or 0.9009 (f > 6): inside wins
    value, after = rounded(lambda v: 6.0 + (v - 0.90085) * 100, 0.90085, p, [6.0, 100.0], 6.0)
    assert value == 0.9009 and after >= 6.0


YAML = """# a chip
memory:
  sram:
    bandwidth_gb_s: 100000     # order of magnitude
launch_us: 100.0               # three host transactions
route_fill_us: ${.fill_drain_us}
"""

REG = """parameters:
  chip.launch_us:
    key: hardware.launch_us
    files: [hardware/chip.yaml]
    when: {hardware.name: chip}
    range: [20, 300]
    range_source: "stated"
  chip.sram:
    key: hardware.memory.sram.bandwidth_gb_s
    files: [hardware/chip.yaml]
    range: [1, 2]
    range_source: "stated"
"""


def test_recording_edits_one_line_and_the_registry(tmp_path):
    (tmp_path / "hardware").mkdir()
    chip = tmp_path / "hardware" / "chip.yaml"
    chip.write_text(YAML)
    reg = tmp_path / "calibration.yaml"
    reg.write_text(REG)
    params = load_params(reg)
    edits = value_edits(params["chip.launch_us"], 37.5, tmp_path, note="calibrated on C9:3")
    edits += value_edits(params["chip.sram"], 250000.0, tmp_path)
    apply_edits(edits, registry_edit("chip.launch_us", calibrated_line("C9:3", 37.5, "2026-01-01"), reg), reg)
    text = chip.read_text().splitlines()
    assert text[3] == "    bandwidth_gb_s: 250000.0     # order of magnitude"
    assert text[4] == "launch_us: 37.5               # three host transactions; calibrated on C9:3"
    assert text[5] == "route_fill_us: ${.fill_drain_us}"
    after = load_params(reg)
    assert after["chip.launch_us"].calibrated_on == {"figure": "C9:3", "value": 37.5, "date": "2026-01-01"}
    with pytest.raises(ConfigError, match="already calibrated on C9:3"):  # a second figure
        _refuse_second(after["chip.launch_us"], "C2:1", after)
    with pytest.raises(ConfigError, match="C9:3 already calibrates chip.launch_us"):  # a second parameter
        _refuse_second(after["chip.sram"], "C9:3", after)


def test_figure_ids_and_parameter_names():
    figs = figure_ids(
        [
            ("a", {"id": "C2", "figures": [{"name": "g"}, {"name": "m"}]}),
            ("b", {"id": "C7", "figures": [{"name": "x"}]}),
        ]
    )
    assert [f[0] for f in figs] == ["C2:1", "C2:2", "C7:1"]
    assert resolve_figure("C7", figs)[0] == "C7:1" and resolve_figure("C2:2", figs)[3]["name"] == "m"
    with pytest.raises(ConfigError, match="name one as ID:N"):
        resolve_figure("C2", figs)
    params = load_params()
    assert resolve_param("hardware.launch_us", params).name == "sn40l.launch_us"  # one entry has the key
    with pytest.raises(ConfigError, match="more than one placeholder"):
        resolve_param("hardware.idle_w", params)


def test_a_calibration_figure_is_labelled_and_user_rows_never_are():
    rows = [{"id": "C2", "user": False}, {"id": "C2", "user": False}, {"id": "C2", "user": True}]
    mark_calibrations(rows)
    assert [r["fid"] for r in rows] == ["C2:1", "C2:2", "C2:3"]
    assert rows[0]["calibration"] == "sn40l.fill_drain_us"  # data/calibration.yaml: set from C2's geomean
    assert rows[1]["calibration"] is None and rows[2]["calibration"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope", "--on", "C7"], "error: nope: not a placeholder parameter"),
        (["sn40l.launch_us", "--on", "C99"], "error: C99: not a claim figure"),
        (["sn40l.launch_us", "--on", "C9"], "error: C9: the claim has 5 figures"),
        (["sn40l.fill_drain_us", "--on", "C5:1"], "error: sn40l.fill_drain_us is already calibrated on C2:1"),
        (["pair.405b_8b", "--on", "C2:1"], "error: C2:1 already calibrates sn40l.fill_drain_us"),
        (["sn40l.launch_us", "--on", "C9:2"], "error: sn40l.launch_us is already calibrated on C9:1"),
        (["sn40l.launch_us"], "error: give PARAM and --on FIGURE"),
    ],
)
def test_cli_errors_are_one_line(capsys, argv, message):
    assert run_command("calibrate", argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
