"""Speculative decoding, draft placement, static graphs, KV placement and user claims: hand-worked
values (arithmetic in the comments)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from decodelab.components import speculative as spec
from decodelab.components.placement import GIB, place
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.dispatch import evaluate
from decodelab.modes.graphs import pick_graph


def _s(k, **kw):
    base = dict(k=k, acceptance=0.8, ar=0.0, acceptance_from="pairs", pairs={})
    base.update(kw)
    return NS(**base)


def test_ar_to_tokens_per_round():
    # AR(k) = (a + 1) / (k + 1): AR(9) = 0.6 -> 0.6 x 10 = 6 tokens per round
    assert spec.tokens_per_round(9, 0.0, ar=0.6) == pytest.approx(6.0)
    # i.i.d. alpha 0.88, k = 8: (1 - 0.88^9) / 0.12 = (1 - 0.316478) / 0.12 = 5.6960 -> AR(8) = 0.6329
    assert spec.tokens_per_round(8, 0.88) == pytest.approx(5.6960, rel=1e-4)
    assert spec.tokens_per_round(8, 0.88) / 9 == pytest.approx(0.633, abs=1e-3)
    assert spec.tokens_per_round(5, 1.0) == 6.0


def test_pair_value_wins_over_config_and_per_k():
    pair = NS(acceptance=0.88, ar={"k8": 0.633}, source="test")
    s = _s(8, pairs={"t__d": pair})
    assert spec.pair_acceptance(s, "t", "d")[:2] == (0.0, 0.633)  # measured AR(8)
    s9 = _s(9, pairs={"t__d": pair})
    assert spec.pair_acceptance(s9, "t", "d")[:2] == (0.88, 0.0)  # no AR(9): the pair's alpha
    assert spec.pair_acceptance(_s(9, pairs={"t__d": pair}), "t", "x")[:2] == (0.8, 0.0)  # no pair
    cfg_only = _s(8, pairs={"t__d": pair}, acceptance_from="config")
    assert spec.pair_acceptance(cfg_only, "t", "d")[:2] == (0.8, 0.0)  # what-ifs


def test_draft_parallelism():
    llama32_3b = NS(n_heads=24, n_kv_heads=8, ffn_dim=8192)
    llama31_8b = NS(n_heads=32, n_kv_heads=8, ffn_dim=14336)
    # 24 % 16 != 0 -> the largest degree <= 16 that splits 24 heads, 8 KV heads and 8192 FFN columns: 8
    assert spec.draft_parallelism(llama32_3b, 16, 0, 1) == (8, 1, None)
    assert spec.draft_parallelism(llama31_8b, 16, 0, 1) == (16, 1, None)  # 14336 / 16 = 896
    assert spec.draft_parallelism(llama32_3b, 16, 4, 4)[2] is None  # 4 copies x TP4 = 16 chips
    assert "exceed" in spec.draft_parallelism(llama32_3b, 16, 8, 3)[2]  # 24 chips > 16
    assert spec.copy_batch(16, 4) == 4 and spec.copy_batch(5, 2) == 3


def test_handoff_cost():
    # same chip group: tokens are already where both models need them
    assert spec.handoff_seconds(True, 9, 16, 2e-6, 100e9) == 0.0
    # two transfers: 2 x 2 us + (9 drafted + 10 verified) ids x 16 sequences x 4 B / 100 GB/s
    # = 4 us + 1216 B / 1e11 B/s = 4.01216 us
    assert spec.handoff_seconds(False, 9, 16, 2e-6, 100e9) == pytest.approx(4.01216e-6, rel=1e-9)


def test_graph_menu():
    menu = [[131072, 1], [32768, 1], [16384, 1], [8192, 1], [8192, 4], [4096, 1], [4096, 4]]
    assert pick_graph(menu, 4096) == (4096, 4)  # smallest graph holding it, its largest batch
    assert pick_graph(menu, 6144 + 2048) == (8192, 4)
    assert pick_graph(menu, 8193) == (16384, 1)
    assert pick_graph(menu, 131072) == (131072, 1)
    with pytest.raises(Infeasible):
        pick_graph(menu, 131073)
    with pytest.raises(ConfigError):
        pick_graph([], 10)


def test_static_graph_fixes_the_batch(compose):
    r = evaluate(
        compose(
            "model=deepseek_r1",
            "hardware=sn40l_rack16",
            "kv_policy=snapstream",
            "workload.weight_dtype=fp8",
            "workload.prompt_len=6144",
            "workload.output_len=2048",
            "workload.batch_size=64",
            "workload.static_graph=true",
        ),
        keep_steps=False,
    )
    assert r["status"] == "ok"
    assert (r["metrics"]["graph_max_seq"], r["metrics"]["graph_batch"]) == (8192.0, 4.0)


def test_kv_placement_is_stated():
    tiers = [
        NS(name="hbm", capacity_gib=64.0, bandwidth_gb_s=1600),
        NS(name="ddr", capacity_gib=1536.0, bandwidth_gb_s=100),
    ]
    # 60 GiB weights + 8 GiB KV: 4 GiB of KV fits beside the weights in HBM
    with pytest.raises(Infeasible, match="kv_placement=spill_ddr"):
        place(tiers, 60 * GIB, 8 * GIB)
    m = place(tiers, 60 * GIB, 8 * GIB, "spill_ddr")
    assert m["kv_frac"] == pytest.approx([0.5, 0.5])
    assert "KV: 4.0 GiB per chip placed in ddr (50%)" in m["notes"][0]
    # the same rule with a draft's 10 GiB already in HBM: only 54 GiB free, so 6 GiB of weights spill too
    m2 = place(tiers, 60 * GIB, 8 * GIB, "spill_ddr", reserved={"hbm": 10 * GIB})
    assert m2["weight_frac"] == pytest.approx([54 / 60, 6 / 60]) and m2["kv_frac"] == pytest.approx(
        [0.0, 1.0]
    )


def test_speculative_round_roofline_share(compose):
    r = evaluate(
        compose(
            "model=llama3_1_70b",
            "model@speculative.draft=llama3_1_8b",
            "hardware=sn40l_rack16",
            "speculative=draft",
            "speculative.k=9",
            "optimizations=all",
        ),
        keep_steps=False,
    )
    m = r["metrics"]
    assert 0 < m["pct_roofline"] < 100  # ideal round time over simulated round time
    # the pair's alpha 0.88 at k = 9: (1 - 0.88^10) / 0.12 = (1 - 0.278500) / 0.12 = 6.0125 tokens per round, AR(9) 0.60125
    assert m["spec_tokens_per_round"] == pytest.approx(6.0125, rel=1e-4)
    assert m["spec_ar"] == pytest.approx(0.60125, rel=1e-4)


USER_CLAIM = """\
defaults:
  - config
  - _self_
claim:
  id: U1
  source: a user's paper
  figures:
    - name: 8B TP8 over TP4 on DGX H100
      metric: tok_s_user
      ratio: {key: hardware.tensor_parallel, num: 8, den: 4}
      published: [1.0, 2.0]
hydra:
  sweeper:
    params:
      model: llama3_1_8b
      hardware: dgx_h100
      hardware.tensor_parallel: 4,8
      workload.output_len: 8
"""


def test_user_claims_from_a_directory(tmp_path, capsys):
    from decodelab.apps import claims as app

    (tmp_path / "u1.yaml").write_text(USER_CLAIM)
    assert app.main([str(tmp_path), "--no-track"]) == 0
    out = capsys.readouterr().out
    assert "USER claims" in out and "U1 (user)" in out and "1 of 1 figures pass" in out
    (tmp_path / "bad.yaml").write_text("claim: {id: U2}\nhydra: {sweeper: {params: {model: llama3_1_8b}}}\n")
    assert app.main([str(tmp_path), "--no-track"]) == 2
    assert "claim U2 has no figures" in capsys.readouterr().err


def test_user_claim_with_config_keys_outside_the_params_is_an_error(tmp_path, capsys):
    """A claim sweep file's own config keys (here `engine: {fused_add_norm: false}` and a group
    choice in `defaults`) would be applied by `decodelab -m` but not by `decodelab claims`, which
    runs the params on the primary config: one line naming them, exit status 2, nothing run."""
    from decodelab.apps import claims as app

    text = USER_CLAIM.replace("  - _self_\n", "  - override engine: vllm\n  - _self_\n")
    (tmp_path / "u1.yaml").write_text(text + "engine:\n  fused_add_norm: false\n")
    assert app.main([str(tmp_path / "u1.yaml"), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert "sets engine, defaults entry {'override engine': 'vllm'} outside hydra.sweeper.params" in err
    assert len([x for x in err.splitlines() if x.startswith("error:")]) == 1
