"""The papers' claims C1-C9 (shared/reference/claims.md), as `decodelab claims` computes them from
the sweeps under sweeps/. Figures that reproduce must stay within tolerance; figures that do not
are strict xfails naming the gap documented in docs/journal/2026-11-22-claims-where-the-model-stands.md
(linked from docs/claims.md), so a change that makes one pass (or breaks one) is noticed."""

from __future__ import annotations

import pytest

from conftest import claim_figure_params

IDS = ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]

# (claim id, figure name) -> the documented gap (docs/journal/2026-11-22-claims-where-the-model-stands.md)
GAPS = {
    ("C1", "8-GPU scaling over 4 GPUs"): "the papers' stack pays its kernel boundaries (trtllm_2024.yaml, "
    "calibrated on C1:1) alike at TP4 and TP8: 1.18x; 1.42x wants the TP4 step slower still",
    (
        "C4",
        "% of roofline, max over SD targets",
    ): "405B + 8B SD round at 78.3% of its ideal time, just over the published 78% (KL paper: >90%)",
    (
        "C6",
        "SD k=5 BS1 over target alone",
    ): "the pair's AR(5) is unpublished (DF Table 1); one i.i.d. alpha gives k=5 too close to k=9",
    (
        "C7",
        "all optimizations + SD over unoptimized target",
    ): "405B + 3B acceptance is a PLACEHOLDER (0.85); the cell needs the paper's AR(9) for the pair",
    (
        "C8",
        "SN40L-16 over DGX H100, 70B + 8B draft k=9",
    ): "2.70x: the DGX SD round on the papers' stack (C1's 300 tok/s); 1.7x at Table IV's SN40L speed wants a "
    "DGX faster than C1's, as the paper's estimate from standalone runs may have been",
    ("C9", "fusion speedup on decode, min"): "5.9x: with ~11x more calls unfused, <= 2x on Bloom-176B needs "
    "unfused calls <= ~50 us, which caps Mistral's fusion at ~8x against the 13x C9:1 sets",
    (
        "C9",
        "hardware orchestration on decode, max",
    ): "3.8x: 8x wants ~560 us per repeated software call, more "
    "than a first launch; the designs' per-call times span 7.6x, the published 8x / 1.4x need 17.5x",
    (
        "C9",
        "hardware orchestration on prefill (TTFT ratio), max",
    ): "1.39x: a Mistral-7B 2K batch-1 prefill layer call (~0.55 ms) is as long as a Bloom-176B decode call, "
    "whose 1.4x (C9:4) sets the repeated launch",
}


@pytest.fixture(scope="module")
def rows(claim_rows):
    return {(r["id"], r["figure"]): r for r in claim_rows if r["id"] in IDS}


@pytest.mark.slow
def test_every_claim_has_figures(rows):
    assert {cid for cid, _ in rows} == set(IDS)
    assert set(GAPS) <= set(rows), set(GAPS) - set(rows)


@pytest.mark.slow
@pytest.mark.parametrize("key", claim_figure_params(IDS, GAPS))
def test_claim_figure_within_tolerance(rows, key):
    r = rows[key]
    assert r["simulated"] is not None, f"{key}: no job produced the figure"
    assert r["pass"], f"{key}: simulated {r['simulated']:.3g}, published {r['published']}"


def test_c1_is_scaling_from_four_gpus(rows):
    """shared/reference/claims.md: the 1.42x is 8 GPUs over 4 (not over 1)."""
    # 1.19x with the papers' stack (conf/engine/trtllm_2024.yaml, its boundary calibrated on C1:1); 1.24x
    # with the TensorRT-LLM 1.0 tables' boundaries alone (the per-shape laws, GEMM and decode attention tables)
    assert rows[("C1", "8-GPU scaling over 4 GPUs")]["simulated"] == pytest.approx(1.186, rel=0.02)


def test_c7_runs_the_24_head_draft_at_its_own_degree(compose):
    """Llama-3.2-3B (24 heads) cannot split 16 ways: auto places it at TP8 beside the TP16 405B."""
    from decodelab.modes.dispatch import evaluate

    r = evaluate(
        compose(
            "model=llama3_1_405b",
            "model@speculative.draft=llama3_2_3b",
            "hardware=sn40l_rack16",
            "speculative=draft",
            "speculative.k=9",
        ),
        keep_steps=False,
    )
    assert r["status"] == "ok"
    assert r["metrics"]["spec_draft_tp"] == 8.0
    # two hand-offs per round: 2 x 2 us latency + (9 + 10) ids x 4 B / 100 GB/s = 4.00076 us
    assert r["metrics"]["spec_handoff_ms_per_round"] == pytest.approx(4.00076e-3, rel=1e-4)
