"""The papers' claims C1-C9 (shared/reference/claims.md), as `decodelab claims` computes them from
the sweeps under sweeps/. Figures that reproduce must stay within tolerance; figures that do not
are strict xfails naming the gap documented in docs/model.md section 5b, so a change that makes
one pass (or breaks one) is noticed."""

from __future__ import annotations

import pytest

from conftest import claim_figure_params

IDS = ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]

# (claim id, figure name) -> the documented gap (docs/model.md 5b)
GAPS = {
    ("C1", "DGX H100 TP8 tok/s per user"): "the fitted TensorRT-LLM all-reduce (3.8 us, back to back in a "
    "CUDA graph) leaves out arrival skew between GPUs in a real decode step (docs/model.md 5d)",
    ("C1", "achieved HBM bytes/s (21% of 24.0 TB/s)"): "follows the TP8 tok/s figure (docs/model.md 5d)",
    (
        "C1",
        "8-GPU scaling over 1 GPU",
    ): "1.42x with ~300 tok/s on 8 GPUs implies one H100 above its bandwidth bound",
    (
        "C3",
        "SN40L-16 over DGX H100, max",
    ): "the papers' own 8B figures (C5 1042 tok/s over C1 ~300 tok/s) bound it at ~3.5x; the 3.7x "
    "row's GPU baseline is unpublished",
    (
        "C4",
        "% of roofline, min over models",
    ): "small models at TP16 are dominated by exposed all-reduce latency and call boundaries",
    (
        "C6",
        "SD k=5 BS1 over target alone",
    ): "acceptance of the paper's dataset is not published (the figures need a ~ 0.98 at the modelled draft cost)",
    ("C6", "SD k=9 BS1 over target alone"): "acceptance of the paper's dataset is not published",
    ("C6", "SD k=9 BS16 over target alone"): "acceptance of the paper's dataset is not published",
    ("C7", "all optimizations + SD over unoptimized target"): "acceptance; see C6",
    (
        "C8",
        "SN40L-16 over DGX H100, 70B + 8B draft k=9",
    ): "H100 SD figure is the paper's estimate from standalone runs, not a measured SD stack",
    ("C9", "fusion speedup on decode, max"): "unfused per-operator costs of SN40L unpublished",
    ("C9", "fusion speedup on decode, min"): "unfused per-operator costs of SN40L unpublished",
    ("C9", "hardware orchestration on decode, max"): "software launch cost per call unpublished",
    (
        "C9",
        "hardware orchestration on prefill (TTFT ratio), max",
    ): "unfused batch-1 prefill exposes each operator's 0.1 ms software launch (fused rows: 1.01-1.33x)",
}


@pytest.fixture(scope="module")
def rows(claim_rows):
    return {(r["id"], r["figure"]): r for r in claim_rows if r["id"] in IDS}


def test_every_claim_has_figures(rows):
    assert {cid for cid, _ in rows} == set(IDS)
    assert set(GAPS) <= set(rows), set(GAPS) - set(rows)


@pytest.mark.parametrize("key", claim_figure_params(IDS, GAPS))
def test_claim_figure_within_tolerance(rows, key):
    r = rows[key]
    assert r["simulated"] is not None, f"{key}: no job produced the figure"
    assert r["pass"], f"{key}: simulated {r['simulated']:.3g}, published {r['published']}"
