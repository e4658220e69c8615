"""MoE, MLA and hybrid architectures (components/models/layers.py) against hand-worked values,
and the SnapStream claims C13-C15 as `decodelab claims` computes them (sweeps/c13-c15)."""

from __future__ import annotations

import math

import pytest
from conftest import claim_figure_params
from decodelab.components.models import ARCHITECTURES, layers
from decodelab.components.speculative import tokens_per_round
from decodelab.core.build import build
from decodelab.kernel_layout import CAUSES, Step
from decodelab.modes.dispatch import evaluate

GIB = 2**30


def test_deepseek_r1_parameters(compose):
    m = compose("model=deepseek_r1").model
    p = layers.param_counts(m)
    d = 7168
    # MLA attention per layer: q_a 7168x1536 + norm 1536 + q_b 1536x(128*192)
    #   + kv_a 7168x(512+64) + norm 512 + kv_b 512x(128*(128+128)) + o 128*128x7168
    attn = d * 1536 + 1536 + 1536 * 128 * 192 + d * 576 + 512 + 512 * 128 * 256 + 128 * 128 * d
    assert attn == 187_107_328
    expert = 3 * d * 2048  # 44,040,192
    moe = (256 + 1) * expert + d * 256  # routed + shared + router
    dense = 3 * d * 18432
    total = 61 * (attn + 2 * d) + 3 * dense + 58 * moe + 2 * 129280 * d + d
    assert p["total"] == total == 671_026_404_352  # DeepSeek: 671B
    assert p["active"] == total - 58 * 248 * expert  # 8 of 256 routed experts
    assert p["active"] / 1e9 == pytest.approx(37.0, rel=0.02)  # DeepSeek: 37B activated
    assert p["mtp"] / 1e9 == pytest.approx(11.6, rel=0.01)  # HF total 685B = 671 + MTP + copies


def test_mla_kv_bytes_per_token(compose):
    m = compose("model=deepseek_r1").model
    assert layers.kv_bytes_per_token(m, 2.0) == 61 * (512 + 64) * 2 == 70_272  # models.md
    assert layers.kv_bytes_per_token(m, 1.0) == 35_136
    # a 128k sequence: 9.21 GB, held whole by every chip under TP (heads split, latent shared)
    d = build(
        compose(
            "model=deepseek_r1",
            "hardware=sn40l_rack16",
            "workload.weight_dtype=fp8",
            "workload.prompt_len=129024",
            "workload.output_len=2048",
        )
    )
    assert d.kv_slot_bytes_chip == 131072 * 70272 == d.kv_slot_bytes_model


def test_expected_distinct_experts():
    assert layers.expected_experts(256, 8, 1) == pytest.approx(8.0)  # batch 1: k
    assert layers.expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert layers.expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert layers.expected_experts(256, 8, 16) == pytest.approx(256 * (1 - (31 / 32) ** 16))
    assert layers.expected_experts(256, 8, 4096) == pytest.approx(256.0)
    vals = [layers.expected_experts(128, 4, n) for n in range(1, 200)]
    assert all(a < b for a, b in zip(vals, vals[1:]))


@pytest.mark.parametrize("model", ["deepseek_r1", "mixtral_8x7b", "gpt_oss_120b"])
@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_weights_read_and_held(compose, model, tokens):
    """Unsharded (tp=1): a decode step's ops read exactly the streamed parameters (k routed
    experts per token on average over the batch) and hold every parameter but the embedding
    table; MLA's prefill path reads the same weights (its decompression uses the kv_b_proj the
    decode path absorbs). Counted at 2 B per weight (BF16: every weight, the LM head too, at one
    width; under narrower weights the LM head stays 2 B, tests/test_optable.py)."""
    m = compose(f"model={model}").model
    ops = layers.build_ops(m, 1, 2.0, 2.0, 2.0, tokens_per_step=tokens)
    read = sum(o.weight_bytes * o.repeat for o in ops if o.path != "prefill") / 2.0
    read_prefill = sum(o.weight_bytes * o.repeat for o in ops if o.path != "decode") / 2.0
    assert read_prefill == pytest.approx(read, rel=1e-12)
    held = sum((o.resident_bytes if o.resident_bytes >= 0 else o.weight_bytes) * o.repeat for o in ops) / 2.0
    p = layers.param_counts(m)
    assert read == pytest.approx(layers.streamed_params(m, tokens), rel=1e-12)
    assert held == pytest.approx(p["total"] - p["embed"], rel=1e-12)
    if tokens == 1:
        assert read == pytest.approx(p["active"] - p["embed"], rel=1e-12)


def test_other_models_parameters(compose):
    mix = layers.param_counts(compose("model=mixtral_8x7b").model)
    assert mix["total"] == 46_702_792_704  # Mistral: 46.7B total
    assert mix["active"] / 1e9 == pytest.approx(12.9, rel=0.01)  # 12.9B active
    oss = layers.param_counts(compose("model=gpt_oss_120b").model)
    assert oss["total"] / 1e9 == pytest.approx(116.8, rel=0.005)  # OpenAI: 116.8B
    assert (oss["active"] - oss["embed"]) / 1e9 == pytest.approx(5.13, rel=0.01)  # 5.13B active


def test_hybrid_sliding_layers_hold_a_window(compose):
    m = compose("model=gpt_oss_120b").model
    mix = layers.kv_layer_mix(m, 2.0)
    assert (mix["full"], mix["sliding"], mix["window"]) == (0.5, 0.5, 128.0)
    base = ("model=gpt_oss_120b", "hardware=h100_sxm", "workload.weight_dtype=int4", "workload.output_len=64")
    long = build(compose(*base, "workload.prompt_len=65536"))
    # 36 layers * 2 * 8 heads * 64 * 2 B = 73,728 B per token if every layer kept it; half the
    # layers keep only 128 tokens
    assert long.kv_slot_bytes_model == pytest.approx((0.5 * 65600 + 0.5 * 128) * 73728)
    from decodelab.core.kv_costs import attended_at

    assert attended_at(long, 65536.0, 65600.0) == pytest.approx(0.5 * 65600 + 0.5 * 128)


def test_moe_batch_reads_more_experts(compose):
    """Per-token weight reads fall with batch (experts are shared), but expert bytes per step grow."""
    b1 = evaluate(compose("model=mixtral_8x7b", "hardware=dgx_h100"), keep_steps=False)["metrics"]
    b8 = evaluate(
        compose("model=mixtral_8x7b", "hardware=dgx_h100", "workload.batch_size=8"), keep_steps=False
    )["metrics"]
    assert b8["tpot_ms"] > b1["tpot_ms"] and b8["tok_s_aggregate"] > 4 * b1["tok_s_aggregate"]


def test_deepseek_max_batch_on_sn40l16(compose):
    """HBM left per chip after the FP8 weights / one sequence's latent KV slot (replicated on the
    16 chips): full cache at 128k 8.58 GiB -> 2 sequences; SnapStream's 32,764-token slot 2.14 GiB
    -> 11 sequences."""
    base = (
        "model=deepseek_r1",
        "hardware=sn40l_rack16",
        "workload.weight_dtype=fp8",
        "workload.prompt_len=129024",
        "workload.output_len=2048",
    )
    full, ss = build(compose(*base)), build(compose(*base, "kv_policy=snapstream"))
    # 671B / 16 + replicated parts, the embedding table and the LM head (129,280 x 7,168 each) at
    # BF16: + 2 x 926,679,040 x 1 B / 16 = 0.108 GiB over all-FP8 (39.96 GiB)
    assert full.weights_chip / GIB == pytest.approx(40.07, abs=0.01)
    for d, slot, expect in ((full, 131072, 2), (ss, 32764, 11)):
        assert d.kv_slot_bytes_chip == slot * 70272
        assert d.max_batch == math.floor((64 * GIB - d.weights_chip) / (slot * 70272)) == expect


def test_mtp_factor_from_the_acceptance_model():
    assert tokens_per_round(2, 0.8) == pytest.approx(1 + 0.8 + 0.64)  # the paper's x2.4


def test_architectures_registered():
    assert set(ARCHITECTURES) == {"dense", "moe", "mla", "hybrid", "csa"}


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            ["model=mixtral_8x7b", "model.experts_per_token=9"],
            "model.experts_per_token=9 must be in [1, n_experts=8]",
        ),
        (["model=deepseek_r1", "model.kv_lora_rank=0"], "model.kv_lora_rank=0 must be >= 1 for arch=mla"),
        (
            ["model=gpt_oss_120b", "model.layer_pattern=[full,mamba]"],
            "model.layer_pattern[1]='mamba' is not one of",
        ),
        (["model=gpt_oss_120b", "model.sliding_window=0"], "model.sliding_window=0 must be >= 1"),
    ],
)
def test_bad_architecture_fields(compose, overrides, fragment):
    res = evaluate(compose(*overrides), keep_steps=False)
    assert res["status"] == "invalid" and fragment in res["reason"], res["reason"]


def test_expert_ffn_must_shard(compose):
    res = evaluate(
        compose("model=mixtral_8x7b", "hardware=dgx_h100", "model.expert_ffn_dim=14334"), keep_steps=False
    )
    assert res["status"] == "infeasible" and "expert_ffn_dim" in res["reason"]


# ------------------------------------------------------------------------ claims C13 - C15

GAPS = {
    (
        "C14",
        "aggregate tok/s on the static graph x MTP factor, SnapStream, max over contexts",
    ): "with the MoE routing boundary the sambastack-tools menu's largest batch (4 at 4k) gives 1241 tok/s; "
    "the batch-8 graphs of SambaNova's docs example template are a what-if (docs/model.md 5b)",
}


@pytest.fixture(scope="module")
def snapstream_rows(claim_rows):
    return {(r["id"], r["figure"]): r for r in claim_rows if r["id"] in ("C13", "C14", "C15")}


@pytest.mark.parametrize("key", claim_figure_params(("C13", "C14", "C15"), GAPS))
def test_snapstream_claims(snapstream_rows, key):
    r = snapstream_rows[key]
    assert r["simulated"] is not None, f"{key}: no job produced the figure"
    assert r["pass"], f"{key}: simulated {r['simulated']:.3g}, published {r['published']}"


def test_snapstream_claim_values(snapstream_rows):
    """The values docs/generated/claims.md reports (the 4x: docs/kv_policies.md, "Architectures")."""
    v = {k[1]: r["simulated"] for k, r in snapstream_rows.items()}
    assert v["KV memory per sequence at 128k, full over SnapStream"] == pytest.approx(4.0, rel=1e-3)
    assert v["MTP factor at 80% acceptance"] == pytest.approx(2.44)
    # best context: the (4096, 4) graph of the sambastack-tools menu, 2048 + 2048 tokens: 509 tok/s x 2.44
    # (at 128k the (131072, 1) graph gives 159 x 2.44 = 389: docs/model.md 5b); both pay the MoE
    # routing boundary, 58 x 31 us per step (tests/test_moe_cost.py)
    key = "aggregate tok/s on the static graph x MTP factor, SnapStream, max over contexts"
    assert v[key] == pytest.approx(1241, rel=0.02)
    assert v["decode throughput at max batch, SnapStream over full, max over contexts"] == pytest.approx(
        3.92, rel=0.02
    )
    assert 1.0 < v["prefill overhead (TTFT ratio, batch 1), max over contexts"] < 1.01


def test_mla_prefill_decompresses_decode_absorbs(compose):
    """DeepSeek-R1 (128 heads, kv_lora 512, qk_nope 128, qk_rope 64, v 128), tp=1, per layer.
    Decode (absorbed): 2 * 128 * (2 * 512 + 64) = 278,528 FLOPs per (query, key) pair, plus the
    per-token absorptions 2 * 128 * 128 * 512 * 2 = 33,554,432. Prefill (decompressed): every
    context token's latent goes through kv_b_proj, 2 * 512 * 128 * (128 + 128) = 33,554,432 FLOPs,
    then 2 * 128 * (128 + 64) + 2 * 128 * 128 = 81,920 per pair: a whole-prompt prefill has the
    same linear work and 3.4x fewer attention FLOPs."""
    m = compose("model=deepseek_r1").model
    ops = layers.build_ops(m, 1, 1.0, 2.0, 2.0)
    per = lambda path, f: sum(getattr(o, f) for o in ops if o.path == path)  # noqa: E731
    assert per("decode", "attn_flops_per_ctx") == 278_528
    assert per("prefill", "attn_flops_per_ctx") == 81_920
    assert per("decode", "flops_per_token") == 33_554_432
    assert per("prefill", "flops_per_ctx") == 33_554_432
    assert per("prefill", "flops_per_token") == 0 and per("decode", "flops_per_ctx") == 0


def test_mla_prefill_path_in_kernel_and_reference(compose):
    """A prefill row runs only the prefill-path ops and a decode row only the decode-path ones
    (a call whose ops do not run is not issued), in the Numba kernel and the Python reference
    alike, fused or one kernel per operator."""
    from decodelab.core.build import build
    from decodelab.core.kernel import request_steps, simulate
    from decodelab.core.reference import reference_simulate

    for fusion in ("layer", "none"):
        cfg = compose(
            "model=deepseek_r1",
            "hardware=sn40l_rack16",
            "workload.weight_dtype=fp8",
            f"optimizations.fusion={fusion}",
        )
        design = build(cfg)
        steps = request_steps(3, 2048, 3)
        out, ref = simulate(*design.arrays(), steps), reference_simulate(design, cfg, steps)
        for r, row in enumerate(ref):
            for k, cause in enumerate(CAUSES):
                assert out[r, k] == pytest.approx(row[cause], rel=1e-9, abs=1e-15), (fusion, r, cause)
    # the prefill row is cheaper than the same row on the absorbed path (196,608 fewer FLOPs
    # per pair and layer)
    import numpy as np

    absorbed = steps.copy()
    absorbed[0, Step.PREFILL] = 0.0  # the same row taken as decode-path work
    t_pre = simulate(*design.arrays(), steps)[0].sum()
    t_abs = simulate(*design.arrays(), absorbed)[0].sum()
    assert t_pre < t_abs and np.isfinite(t_pre)


def test_gpt_oss_mxfp4_quantizes_only_the_experts():
    """gpt-oss ships MXFP4 experts and BF16 everything else (config.json quantization_config
    modules_to_not_convert; model.expert_only_dtypes: [mxfp4]): under weight_dtype=mxfp4 the
    attention projections are BF16 GEMMs, 2 bytes a weight (qkv: 2880 x (64 + 2 x 8) x 64 + its
    bias 5120 = 14,751,744 weights, 29.5 MB), costed on the BF16 tables, while an expert weight is
    4.25 bits; a bad entry or the field on a model without experts is one error line."""
    from conftest import compose_cfg
    from decodelab.errors import ConfigError

    d = build(compose_cfg("model=gpt_oss_120b", "hardware=h200_sxm", "workload.weight_dtype=mxfp4"))
    ops = {op.name: op for op in d.ops}
    assert ops["qkv_proj"].gemm_dtype == "bf16" and ops["o_proj"].gemm_dtype == "bf16"
    assert ops["qkv_proj"].weight_bytes == (2880 * 5120 + 5120) * 2.0
    assert ops["lm_head"].gemm_dtype == "bf16"
    assert ops["gate_up_proj"].gemm_dtype == ""  # the workload's, mxfp4
    assert not any("qkv_proj" in n for n in d.notes)  # the BF16 GEMM law covers it
    with pytest.raises(ConfigError, match=r"^model.expert_only_dtypes\[0\]='mxfp9' is not one of: "):
        build(compose_cfg("model=gpt_oss_120b", "model.expert_only_dtypes=[mxfp9]"))
    with pytest.raises(ConfigError, match="model.expert_only_dtypes is set but llama3_1_8b has no experts"):
        build(compose_cfg("model=llama3_1_8b", "model.expert_only_dtypes=[mxfp4]"))
    with pytest.raises(ConfigError, match=r"has no experts \(model.arch='dense', model.n_experts=8\)"):
        build(compose_cfg("model=llama3_1_8b", "model.n_experts=8", "model.experts_per_token=2",
                          "model.expert_ffn_dim=1024", "model.expert_only_dtypes=[mxfp4]"))  # fmt: skip
