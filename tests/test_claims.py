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
    ): "2.8x at k=5 with 3.5x at k=9 needs 3.53 and 5.86 tokens per round at the model's step costs (8B draft "
    "1.0 ms, 70B verify 7.1 ms, unoptimized 9.6 ms); any acceptance curve gives T9 <= 1.8 T5 - 0.8 = 5.56 "
    "(DF Table 1/4's setting would settle it)",
    (
        "C7",
        "all optimizations + SD over unoptimized target",
    ): "405B + 3B acceptance is a PLACEHOLDER (0.85); the cell needs the paper's AR(9) for the pair",
    (
        "C8",
        "SN40L-16 over DGX H100, 70B + 8B draft k=9",
    ): "2.70x: the DGX SD round on the papers' stack (C1's 300 tok/s) spends 69% in the draft (DF: 72%), but "
    "1.7x wants a ~27 ms round, an 8B step of ~2.2 ms; C8's batch is unstated (at 16: 1.9x)",
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


def test_tokens_per_round_bound_of_two_window_sizes():
    """T(k) = 1 + q_1 + ... + q_k with q_i = P(first i drafts accepted), non-increasing in i and shared by
    k = 5 and k = 9: T9 <= T5 + 4 q5 <= 1.8 T5 - 0.8. Hand-worked at alpha 0.88 (i.i.d.): T5 =
    (1 - 0.88^6) / 0.12 = 4.463, T9 = (1 - 0.88^10) / 0.12 = 6.012 <= 1.8 x 4.463 - 0.8 = 7.234."""
    from decodelab.components.speculative import tokens_per_round

    assert tokens_per_round(5, 0.88) == pytest.approx(4.463, abs=1e-3)
    assert tokens_per_round(9, 0.88) == pytest.approx(6.012, abs=1e-3)
    for a in (0.5, 0.7, 0.88, 0.95, 0.99, 1.0):
        assert tokens_per_round(9, a) <= 1.8 * tokens_per_round(5, a) - 0.8 + 1e-12


def test_c6_cells_ask_for_more_tokens_than_any_acceptance_curve(compose):
    """C6:1 with C6:2 (DF Table 4: 2.8x at k=5, 3.5x at k=9, BS1): at the model's round times the
    two cells need T5 = round5 / (base / 2.8) = 3.53 and T9 = round9 / (base / 3.5) = 5.86 tokens
    per round, above the bound 1.8 T5 - 0.8 = 5.56 that holds for every acceptance curve (C6's entry in
    GAPS)."""
    from decodelab.modes.dispatch import evaluate

    common = (
        "model=llama3_1_70b",
        "hardware=sn40l_rack16",
        "workload.batch_size=1",
        "workload.prompt_len=4096",
    )
    base = evaluate(compose(*common, "optimizations=default", "speculative=none"), keep_steps=False)
    need = {}
    for k, speedup in ((5, 2.8), (9, 3.5)):
        sd = evaluate(
            compose(
                *common,
                "optimizations=all",
                "speculative=draft",
                "model@speculative.draft=llama3_1_8b",
                f"speculative.k={k}",
            ),
            keep_steps=False,
        )["metrics"]
        round_ms = sd["tpot_ms"] * sd["spec_tokens_per_round"]
        need[k] = round_ms / (base["metrics"]["tpot_ms"] / speedup)
    assert need[5] == pytest.approx(3.53, abs=0.05)
    assert need[9] == pytest.approx(5.86, abs=0.05)
    assert need[9] > 1.8 * need[5] - 0.8
