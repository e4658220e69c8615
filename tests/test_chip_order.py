"""The Blackwell chips added from AIConfigurator's operator data (gb200, b300_sxm, gb300; each file's
own figures: tests/test_gb200.py, test_b300.py, test_gb300.py) against older chips: a memory-bound
decode is faster than on an H100, and a model too large for the smaller-memory chip of the
generation fits on the larger one."""

from __future__ import annotations

import pytest

from decodelab.api import evaluate

DECODE = (
    "tracking=off",
    "workload=decode",
    "workload.batch_size=1",
    "workload.prompt_len=1024",
    "workload.output_len=128",
    "workload.kv_dtype=fp8",
)


@pytest.mark.parametrize("chip", ["gb200", "b300_sxm", "gb300"])
def test_decode_is_faster_than_on_h100(chip):
    design = (*DECODE, "model=qwen3_32b", "workload.weight_dtype=fp8_block")
    tpot = {}
    for name in ("h100_sxm", chip):
        r = evaluate(*design, f"hardware={name}")
        assert r.status == "ok", r.reason
        tpot[name] = r.metrics["tpot_ms"]
    assert 0 < tpot[chip] < tpot["h100_sxm"]


@pytest.mark.parametrize("chip, smaller", [("b300_sxm", "b200_sxm"), ("gb300", "gb200")])
def test_holds_a_model_the_smaller_chip_cannot(chip, smaller):
    """Qwen3-235B-A22B in FP8: ~220 GiB of weights, more than a B200's 179.1 or a GB200's 185.0 GiB
    of HBM, less than a B300's 268.6 or a GB300's 277.5 GiB."""
    design = (*DECODE, "model=qwen3_235b_a22b", "workload.weight_dtype=fp8")
    assert evaluate(*design, f"hardware={smaller}").status == "infeasible"
    r = evaluate(*design, f"hardware={chip}")
    assert r.status == "ok", r.reason
    assert r.metrics["tpot_ms"] > 0
