"""Golden values worked out by hand from the published model shapes and datasheets.

Every expected number below is computed in the test from the shapes (HF config.json values that
conf/model/*.yaml quotes) with the arithmetic written out; nothing is taken from the code under
test. Llama-3.1-8B: 32 layers, d_model 4096, 32 heads, 8 KV heads, head_dim 128, FFN 14336,
vocab 128256, untied embeddings, no biases. Llama-3.1-70B: 80 layers, d_model 8192, 64 heads,
8 KV heads, head_dim 128, FFN 28672, vocab 128256.
"""

from __future__ import annotations

import math

import pytest
from decodelab.components.models import dense
from decodelab.core.build import build
from decodelab.core.cost_setup import peak_flops
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate

GIB = 2**30
# The Kernel Looping paper's TensorRT-LLM (~10 kernels per Llama decoder layer): the residual add a
# kernel of its own, as the claims' sweeps run it (conf/engine/default.yaml)
PAPER = "engine.fused_add_norm=false"

# ---- Llama-3.1-8B by hand -------------------------------------------------------------------
L8, D8, H8, KV8, HD8, FFN8, V8 = 32, 4096, 32, 8, 128, 14336, 128256
EMBED_8B = V8 * D8  # 128256 * 4096 = 525,336,576
ATTN_8B = D8 * (H8 * HD8) + 2 * D8 * (KV8 * HD8) + (H8 * HD8) * D8
#        q: 4096*4096 = 16,777,216; k,v: 2*4096*1024 = 8,388,608; o: 16,777,216 -> 41,943,040
MLP_8B = 3 * D8 * FFN8  # gate, up, down: 3*4096*14336 = 176,160,768
NORMS_8B = 2 * D8  # input + post-attention RMSNorm = 8,192
LAYER_8B = ATTN_8B + MLP_8B + NORMS_8B  # 218,112,000
PARAMS_8B = 2 * EMBED_8B + L8 * LAYER_8B + D8  # embed + lm_head + 32 layers + final norm
KV_TOKEN_8B = 2 * L8 * KV8 * HD8 * 2  # K and V, 32 layers, 8 heads, 128, BF16

# ---- Llama-3.1-70B by hand ------------------------------------------------------------------
L70, D70, H70, KV70, HD70, FFN70, V70 = 80, 8192, 64, 8, 128, 28672, 128256
PARAMS_70B = (
    2 * V70 * D70  # embed + lm_head = 2,101,346,304
    + L70
    * (
        D70 * H70 * HD70 * 2  # q + o: 2 * 8192*8192
        + 2 * D70 * KV70 * HD70  # k, v: 2 * 8192*1024
        + 3 * D70 * FFN70  # gate, up, down
        + 2 * D70
    )  # two norms
    + D70
)  # final norm -> 70,553,706,496

ZERO_OVERHEAD = (
    "hardware.bw_eff_max=1",
    "hardware.bw_half_mb=0",
    "hardware.compute_eff_max=1",
    "hardware.compute_half_gflop=0",
    "hardware.attn_compute_eff_max=1",
    "hardware.launch_us=0",
    "hardware.sync_us=0",
    "hardware.host_step_us=0",
    "hardware.collective_latency_us=0",
    "hardware.fill_drain_us=0",
    "hardware.sustained_compute_ratio=1",  # burst clocks throughout (tests/test_sustained_clocks.py)
    "optimizations.cuda_graphs=true",
)


def test_hand_worked_constants_match_published_counts():
    # The hand arithmetic itself against the published totals (HF model cards / configs).
    assert EMBED_8B == 525_336_576
    assert LAYER_8B == 218_112_000
    assert PARAMS_8B == 8_030_261_248
    assert KV_TOKEN_8B == 131_072
    assert PARAMS_70B == 70_553_706_496


def test_llama3_1_8b_param_counts(compose):
    m = compose("model=llama3_1_8b").model
    p = dense.param_counts(m)
    assert p["total"] == 8_030_261_248
    assert p["embed"] == EMBED_8B
    assert p["lm_head"] == EMBED_8B  # untied: a second vocab x d matrix
    assert p["layer"] == LAYER_8B
    assert p["final_norm"] == D8


def test_llama3_1_8b_weight_and_kv_bytes(compose):
    cfg = compose("model=llama3_1_8b", "hardware=h100_sxm")
    d = build(cfg)
    # BF16 weights: 2 bytes per parameter = 16,060,522,496 B (16.06 GB)
    assert d.weight_bytes_total == 2 * 8_030_261_248 == 16_060_522_496
    # KV per token: 2 (K, V) * 32 layers * 8 KV heads * 128 head_dim * 2 B = 131,072
    assert dense.kv_bytes_per_token(cfg.model, 2.0) == 131_072
    assert d.kv_bytes_per_token == 131_072
    # FP8 KV halves it
    assert dense.kv_bytes_per_token(cfg.model, 1.0) == 65_536


def test_llama3_1_8b_linear_and_attention_flops(compose):
    m = compose("model=llama3_1_8b").model
    ops = dense.build_ops(m, 1, 2.0, 2.0, 2.0)
    linear = sum(op.flops_per_token * op.repeat for op in ops if op.kind == "gemm")
    # Every weight of the decoder stack and the LM head is used in one multiply-add per token:
    # 2 * (params - embedding table) = 2 * 7,504,924,672; the only non-GEMM weights are the
    # 65 RMSNorm vectors (266,240 params), far below 0.1 %.
    expected = 2 * (PARAMS_8B - EMBED_8B)
    assert linear == pytest.approx(expected, rel=1e-3)
    # exactly: 2 * (32 * (q,k,v,o + gate,up,down) + lm_head)
    assert linear == 2 * (L8 * (ATTN_8B + MLP_8B) + V8 * D8)
    # attention per (query, key) pair: QK^T and PV, 2 FLOPs per multiply-add each
    # -> 4 * 32 heads * 128 head_dim per layer, * 32 layers = 524,288
    attn = sum(op.attn_flops_per_ctx * op.repeat for op in ops)
    assert attn == 4 * 32 * 128 * 32 == 524_288


def test_batch1_roofline_tpot_llama3_1_8b_h100(compose):
    # the roofline operator law (hardware.op_model=roofline); the fitted laws: tests/test_oplaw.py
    """With every overhead zeroed and efficiencies 1, one decode step at 4k context is the bytes
    it reads divided by the H100's 3.35 TB/s."""
    # prompt 4095 + one decode step: that step ends at a context of exactly 4096 tokens
    cfg = compose(
        "model=llama3_1_8b",
        "hardware=h100_sxm",
        "hardware.op_model=roofline",
        "workload.batch_size=1",
        "workload.prompt_len=4095",
        "workload.output_len=2",
        *ZERO_OVERHEAD,
    )
    res = evaluate(cfg)
    assert res["status"] == "ok", res["reason"]
    weights_read = (PARAMS_8B - EMBED_8B) * 2  # 15,009,849,344 B (embedding: row gather)
    kv_read = 4096 * KV_TOKEN_8B  # 536,870,912 B
    kv_write = KV_TOKEN_8B  # the new token's K and V: 131,072 B
    hand_bytes = weights_read + kv_read + kv_write  # 15,546,851,328 B
    hand_s = hand_bytes / 3.35e12  # = 4.6408 ms
    tpot_s = res["metrics"]["tpot_ms"] / 1e3
    # activations (~12 MB: residual stream, logits, ...) only add time, < 0.1 % of the step
    assert tpot_s >= hand_s * (1 - 1e-12)
    assert tpot_s == pytest.approx(hand_s, rel=1e-3)
    assert 4.64 < res["metrics"]["tpot_ms"] < 4.65
    # every call is memory-bound at batch 1 and nothing else costs time
    m = res["metrics"]
    assert m["tpot_memory_ms"] == pytest.approx(m["tpot_ms"], rel=1e-12)
    for cause in CAUSES:
        if cause != "memory":
            assert m[f"tpot_{cause}_ms"] == 0.0, cause


def test_tensor_parallel_sharding_llama3_1_70b_dgx_h100(compose):
    cfg = compose("model=llama3_1_70b", "hardware=dgx_h100")
    assert cfg.hardware.tensor_parallel == 8
    d = build(cfg)
    # per-chip weights: every op's weights + the chip's 1/8 of the embedding table
    per_chip = sum(op.weight_bytes * op.repeat for op in d.ops) + V70 * D70 / 8 * 2
    total_bytes = PARAMS_70B * 2  # 141,107,412,992 B
    assert per_chip == pytest.approx(total_bytes / 8, rel=0.02)  # norms are replicated
    assert per_chip > total_bytes / 8  # ... so slightly more than 1/8
    # two all-reduces per decoder layer, ring: 2 * (8-1)/8 * 8192 * 2 B = 28,672 B per token
    allreduces = [op for op in d.ops if op.kind == "collective" and op.stage == "layer"]
    assert len(allreduces) == 2
    assert all(op.repeat == L70 and op.n_collectives == 1 for op in allreduces)
    assert all(op.link_bytes_per_token == 2 * 7 / 8 * 8192 * 2 == 28_672 for op in allreduces)
    # 8 KV heads over 8 chips: 1 per chip -> K and V of one token, one layer: 2*1*128*2 = 512 B
    assert dense.kv_heads_per_chip(8, 8) == 1
    kv_tok_chip = sum(op.kv_write_per_token * op.repeat for op in d.ops)
    assert kv_tok_chip == L70 * 2 * 1 * HD70 * 2 == 40_960
    # query heads per chip: 64 / 8 = 8 -> q, k, v outputs (8 + 2*1) * 128 = 1280 columns
    qkv = next(op for op in d.ops if op.name == "qkv_proj")
    assert qkv.weight_bytes == D70 * (8 + 2) * HD70 * 2 == 20_971_520
    # HBM used per chip: weights + KV of (4096 + 128) tokens, batch 1
    assert d.memory["used"]["hbm"] == pytest.approx(per_chip + (4096 + 128) * 40_960, rel=1e-12)


def test_llama3_1_70b_does_not_fit_one_h100(compose):
    res = evaluate(compose("model=llama3_1_70b", "hardware=h100_sxm"))
    assert res["status"] == "infeasible"
    assert "does not fit memory" in res["reason"]
    # 141,107,412,992 B / 2^30 = 131.4 GiB of weights against 79.22 GiB of HBM (CUDA-reported, printed to one decimal)
    assert f"needs {PARAMS_70B * 2 / GIB:.1f} GiB weights" in res["reason"]  # "needs 131.4 GiB"
    assert "hbm 79.2 GiB" in res["reason"]
    assert "\n" not in res["reason"]


def test_llama3_1_70b_spills_to_ddr_on_one_sn40l_socket(compose):
    # weights spill to DDR by themselves; KV only under the explicit spill policy (kv_placement)
    assert evaluate(compose("model=llama3_1_70b", "hardware=sn40l_socket"))["status"] == "infeasible"
    cfg = compose("model=llama3_1_70b", "hardware=sn40l_socket", "workload.kv_placement=spill_ddr")
    d = build(cfg)
    names = d.tier_names
    assert names == ["sram", "hbm", "ddr"]
    wf = dict(zip(names, d.memory["weight_frac"]))
    # the 64 GiB of HBM takes 64 * 2^30 / 141,107,412,992 = 48.7 % of the weights, DDR the rest
    hbm_share = 64 * GIB / (PARAMS_70B * 2)
    assert wf["hbm"] == pytest.approx(hbm_share, rel=1e-9)
    assert wf["ddr"] == pytest.approx(1 - hbm_share, rel=1e-9)
    assert wf["sram"] == 0.0
    assert dict(zip(names, d.memory["kv_frac"]))["ddr"] == pytest.approx(1.0)  # HBM is full

    socket = evaluate(cfg)
    node8 = evaluate(compose("model=llama3_1_70b", "hardware=sn40l_node8"))
    assert socket["status"] == node8["status"] == "ok"
    # the 72.4 GB in DDR alone take 0.72 s per token at 100 GB/s
    ddr_bytes = PARAMS_70B * 2 - 64 * GIB
    assert socket["metrics"]["tpot_ms"] > ddr_bytes / 100e9 * 1e3
    assert socket["metrics"]["tpot_ms"] > 10 * node8["metrics"]["tpot_ms"]
    node8_d = build(compose("model=llama3_1_70b", "hardware=sn40l_node8"))
    assert dict(zip(node8_d.tier_names, node8_d.memory["weight_frac"]))["ddr"] == 0.0


@pytest.mark.parametrize(
    "dtype, expected_tflops",
    [
        ("bf16", 989.4),
        ("fp16", 989.4),
        ("fp32", 989.4),  # H100 SXM dense BF16 tensor rate
        ("fp8", 1978.9),
        ("int8", 1978.9),  # 8-bit weights: the FP8 rate
        pytest.param("int4", 989.4),
    ],
)
def test_peak_flops_by_weight_dtype_h100(compose, dtype, expected_tflops):
    hw = compose("hardware=h100_sxm").hardware
    assert peak_flops(hw, dtype) == pytest.approx(expected_tflops * 1e12, rel=1e-12)


def test_peak_flops_a100_has_no_fp8_units(compose):
    hw = compose("hardware=a100_sxm").hardware
    # A100: no FP8 tensor cores (peak_tflops_fp8 = 0) -> FP8 weights run at the BF16 312 TFLOPS
    assert peak_flops(hw, "fp8") == peak_flops(hw, "bf16") == 312e12
    assert math.isclose(peak_flops(compose("hardware=sn40l_socket").hardware, "fp8"), 638e12)


@pytest.mark.slow
def test_kernel_calls_per_step_gpu(compose):
    # one kernel per operator: embedding + 10 per layer + final norm, LM head, sampling, the
    # Kernel Looping paper's TensorRT-LLM (the residual add a kernel of its own: PAPER)
    roof = ("hardware.op_model=roofline", PAPER)
    m = evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm", *roof))["metrics"]
    assert m["n_kernel_calls_per_step"] == 1 + 10 * 32 + 3 == 324  # "~320 launches per token"
    # the default engine (TensorRT-LLM's PyTorch flow) adds the residual into the next RMSNorm
    m = evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm", "hardware.op_model=roofline"))["metrics"]
    assert m["n_kernel_calls_per_step"] == 1 + 9 * 32 + 3 == 292
    # TP8 adds the two all-reduces of every layer
    m = evaluate(compose("model=llama3_1_70b", "hardware=dgx_h100", *roof))["metrics"]
    assert m["n_kernel_calls_per_step"] == 1 + 12 * 80 + 3 == 964
    # CUDA graphs on: the 2 us sync per call only
    on = evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm", *roof))["metrics"]
    assert on["tpot_launch_sync_ms"] == pytest.approx(324 * 2e-3, rel=1e-9)

    # off: the host dispatches every kernel (the default engine, TensorRT-LLM's PyTorch flow: 35 us
    # each; its attention call launches 2, eager_kernels: 356), ahead of the GPU: 356 x 35 us =
    # 12.46 ms outlasts the 8B kernels (< 7 ms), so the step is the dispatch + the 0.1 ms host step
    # (components/execution/gpu.py, core/kernel.py)
    def off(*ov):
        roof_off = ("optimizations.cuda_graphs=false", *roof, *ov)
        return evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm", *roof_off))["metrics"]

    assert off()["tpot_ms"] == pytest.approx(356 * 0.035 + 0.1, rel=1e-9)
    assert on["tpot_ms"] < 356 * 0.035
    # an engine without its own dispatch figure (null): the bare 4 us launch, 1.4 ms in all, hides
    # under the kernels: the step is unchanged
    assert off("engine.eager_launch_us=null")["tpot_ms"] == pytest.approx(on["tpot_ms"], rel=1e-12)
    # a launch longer than every kernel is the critical path: the step is 356 launches + host
    slow = off("engine.eager_launch_us=null", "hardware.launch_us=1000")
    assert slow["tpot_ms"] == pytest.approx(356 * 1.0 + 0.1, rel=1e-9)
    # the fitted operator laws (docs/model.md, "Per-shape operator laws"): RoPE + KV write run inside
    # the attention call
    m = evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm", PAPER))["metrics"]
    assert m["n_kernel_calls_per_step"] == 1 + 9 * 32 + 3 == 292
    m = evaluate(compose("model=llama3_1_8b", "hardware=h100_sxm"))["metrics"]
    assert m["n_kernel_calls_per_step"] == 1 + 8 * 32 + 3 == 260


def test_qk_norm_is_one_call_per_layer(compose):
    """Qwen3's per-head q/k RMSNorm (model.qk_norm): one elementwise call per layer after the QKV
    GEMM, 2 x head_dim weights per layer. By hand for Qwen3-32B on one H100 (64 layers, 64 query
    and 8 KV heads of 128): 1 + 11 * 64 + 3 = 708 calls (10 + qk_norm per layer, roofline law, the
    Kernel Looping paper's TensorRT-LLM: PAPER), one token moves (64 + 8) x 128 x 2 elements x 2 B = 36,864 B plus 2 x 128 x 2 B of weights."""
    roof = ("hardware=h100_sxm", "hardware.op_model=roofline", PAPER)
    on, off = compose("model=qwen3_32b", *roof), compose("model=qwen3_32b", *roof, "model.qk_norm=false")
    m_on, m_off = evaluate(on)["metrics"], evaluate(off)["metrics"]
    assert m_on["n_kernel_calls_per_step"] == 1 + 11 * 64 + 3 == 708
    assert m_on["n_kernel_calls_per_step"] - m_off["n_kernel_calls_per_step"] == 64
    (op,) = [o for o in build(on).ops if o.name == "qk_norm"]
    assert op.repeat == 64
    assert op.act_bytes_per_token == (64 + 8) * 128 * 2 * 2 == 36_864
    assert op.weight_bytes == 2 * 128 * 2
    assert not [o for o in build(off).ops if o.name == "qk_norm"]
    assert m_on["tpot_ms"] > m_off["tpot_ms"]


def test_engine_kernels_fused_add_norm_and_separate_rope(compose):
    """The engine's decoder-layer kernels (engine.fused_add_norm, engine.separate_rope;
    components/models/dense.py). By hand for Qwen3-32B BF16 on one H100 (d = 5120, 64 layers, 64
    query and 8 KV heads of 128, fitted laws: RoPE + KV write inside the attention call):
    - the default engine (TensorRT-LLM's PyTorch flow) runs the residual add inside the next input
      RMSNorm: no residual_add op, the input norm reads the layer output and the residual and writes
      both, 4 x 5120 x 2 B = 40,960 B and 4 x 2 x 5120 = 40,960 FLOPs per token, as the post-attention
      add + norm; 1 + 9 x 64 + 3 = 580 calls per step (644 with the add a kernel of its own);
    - SGLang also runs RoPE as its own kernel after the q/k norm: it reads and writes q and k,
      2 x (64 + 8) x 128 x 2 B = 36,864 B and 6 x 72 x 128 = 55,296 FLOPs per token, and the call
      inside attention keeps only the KV write (no RoPE FLOPs): 1 + 10 x 64 + 3 = 644 calls."""
    base = ("model=qwen3_32b", "hardware=h100_sxm")
    ops = {o.name: o for o in build(compose(*base)).ops}
    assert "residual_add" not in ops and "rope" not in ops
    assert ops["input_norm"].act_bytes_per_token == ops["residual_norm"].act_bytes_per_token == 40_960
    assert ops["input_norm"].flops_per_token == 40_960
    assert evaluate(compose(*base))["metrics"]["n_kernel_calls_per_step"] == 1 + 9 * 64 + 3 == 580
    paper = {o.name: o for o in build(compose(*base, PAPER)).ops}
    assert paper["input_norm"].act_bytes_per_token == 2 * 5120 * 2 and "residual_add" in paper
    assert evaluate(compose(*base, PAPER))["metrics"]["n_kernel_calls_per_step"] == 1 + 10 * 64 + 3 == 644
    sg = build(compose(*base, "engine=sglang")).ops
    names = [o.name for o in sg]
    assert names.index("rope") == names.index("qk_norm") + 1 and "residual_add" not in names
    rope, rkw = sg[names.index("rope")], sg[names.index("rope_kv_write")]
    assert (rope.kind, rope.repeat, rope.in_attention_call) == ("elementwise", 64, False)
    assert rope.act_bytes_per_token == 2 * (64 + 8) * 128 * 2 == 36_864
    assert rope.flops_per_token == 6 * 72 * 128 == 55_296
    assert rkw.flops_per_token == 0.0 and rkw.kv_write_per_token == 2 * 8 * 128 * 2
    assert evaluate(compose(*base, "engine=sglang"))["metrics"]["n_kernel_calls_per_step"] == 644
    # a dataflow chip's kernels are its execution model's: the engine's fields do not apply
    sn = compose("model=llama3_1_8b", "hardware=sn40l_socket", "engine=sglang")
    assert "residual_add" in {o.name for o in build(sn).ops}


def test_prefill_computes_logits_at_the_last_prompt_position_only(compose):
    """A prefill emits one token per sequence, so the final norm, LM head and sampling run on one
    position, not on the whole prompt (as every serving engine does). With every overhead zeroed,
    doubling the vocabulary adds to TTFT exactly one memory-bound LM head: its extra weights
    (V x d BF16) and, for that one position, V more BF16 logits written and V more FP32 scores
    read by sampling: (2 V d + 2 V + 4 V) B / 3.35 TB/s = 313.87 us. On all 4096 prompt
    positions the extra LM head alone would be 4096 x 2 V d FLOPs = 4.35 ms of compute."""

    def ttft(vocab):
        return evaluate(
            compose(
                "model=llama3_1_8b",
                "hardware=h100_sxm",
                "hardware.op_model=roofline",
                "workload.batch_size=1",
                "workload.prompt_len=4096",
                "workload.output_len=2",
                f"model.vocab_size={vocab}",
                *ZERO_OVERHEAD,
            )
        )["metrics"]["ttft_ms"]

    hand_ms = (2 * V8 * D8 + 2 * V8 + 4 * V8) / 3.35e12 * 1e3  # 0.31387 ms
    assert ttft(2 * V8) - ttft(V8) == pytest.approx(hand_ms, rel=1e-6)


def test_prefill_attention_runs_at_the_attention_efficiency(compose):
    """Attention's (query, key) FLOPs run at `attn_compute_eff_max` of the peak, GEMMs at
    `compute_eff_max`. A 4096-token prefill of Llama-3.1-8B has 4096 * 4096 - 4096 * 4095 / 2 =
    8,390,656 causal pairs x 4 * 32 heads * 128 * 32 layers = 524,288 FLOPs each = 4.3991 TFLOP
    of attention, compute-bound (16 MB of KV per layer against 137 GFLOP). Halving the attention
    efficiency from 1 adds that work once more at the 989.4 TFLOP/s peak: 4.4462 ms."""

    def ttft(eff):
        return evaluate(
            compose(
                "model=llama3_1_8b",
                "hardware=h100_sxm",
                "hardware.op_model=roofline",
                "workload.batch_size=1",
                "workload.prompt_len=4096",
                "workload.output_len=2",
                *ZERO_OVERHEAD,
                f"hardware.attn_compute_eff_max={eff}",
            )
        )["metrics"]["ttft_ms"]

    attn_flops = (4096 * 4096 - 4096 * 4095 // 2) * 4 * 32 * 128 * 32
    hand_ms = attn_flops / 989.4e12 * 1e3
    assert ttft(0.5) - ttft(1) == pytest.approx(hand_ms, rel=1e-9)
    assert 4.44 < hand_ms < 4.45


def _ideal_8b(compose):
    return evaluate(
        compose(
            "model=llama3_1_8b",
            "hardware=h100_sxm",
            "workload.batch_size=1",
            "workload.prompt_len=4095",
            "workload.output_len=2",
            *ZERO_OVERHEAD,
        )
    )["metrics"]


def test_roofline_tok_s_formula(compose):
    m = _ideal_8b(compose)
    # Dataflow paper Eq. 3 at batch 1: 3.35e12 / (streamed weights + KV of the mean decode
    # context); the embedding table is gathered by row, not streamed
    expected = 3.35e12 / (2 * (PARAMS_8B - EMBED_8B) + 4096 * KV_TOKEN_8B)
    assert m["roofline_tok_s"] == pytest.approx(expected, rel=1e-12)


def test_ideal_design_uses_at_most_peak_bandwidth(compose):
    m = _ideal_8b(compose)
    assert m["pct_peak_bw"] <= 100.0
    assert m["pct_roofline"] <= 100.0


def test_replicas_multiply_system_throughput(compose):
    # DGX H100 at TP4: two replicas of four GPUs each
    m4 = evaluate(compose("model=llama3_1_70b", "hardware=dgx_h100", "hardware.tensor_parallel=4"))["metrics"]
    m8 = evaluate(compose("model=llama3_1_70b", "hardware=dgx_h100"))["metrics"]
    assert m4["tok_s_system"] == pytest.approx(2 * m4["tok_s_aggregate"], rel=1e-12)
    assert m8["tok_s_system"] == pytest.approx(m8["tok_s_aggregate"], rel=1e-12)
    # roofline bandwidth is the group's: 4 x 3.35 TB/s vs 8 x 3.35 TB/s, same bytes at batch 1
    assert m8["roofline_tok_s"] == pytest.approx(2 * m4["roofline_tok_s"], rel=1e-12)


@pytest.mark.slow
def test_batch_barrier_and_batch_streaming_golden(compose):
    """Llama-3.2-1B (16 layers) on SN40L-16 with every optimization: each looped layer iteration
    waits (B - 1) x 1 us for the batch to leave it; BatchStreaming's 8 loop-buffer slots leave
    max(0, B - 8) x 1 us."""

    def fill(batch, bs):
        m = evaluate(
            compose(
                "model=llama3_2_1b",
                "hardware=sn40l_rack16",
                "optimizations=all",
                f"optimizations.batch_streaming={bs}",
                f"workload.batch_size={batch}",
            )
        )["metrics"]
        return m["tpot_fill_drain_ms"]

    once = fill(1, "false")  # embedding, looped layers, head: one 30 us fill/drain each
    assert once == pytest.approx(3 * 0.030, rel=1e-9)
    assert fill(1, "true") == pytest.approx(once, rel=1e-9)  # nothing to overlap
    assert fill(8, "false") - once == pytest.approx(16 * 7 * 1e-3, rel=1e-9)
    assert fill(8, "true") == pytest.approx(once, rel=1e-9)
    assert fill(16, "false") - once == pytest.approx(16 * 15 * 1e-3, rel=1e-9)
    assert fill(16, "true") - once == pytest.approx(16 * 8 * 1e-3, rel=1e-9)


def test_batch_streaming_notes_where_it_does_not_apply(compose):
    gpu = evaluate(compose("hardware=h100_sxm", "optimizations.batch_streaming=true"))
    assert any("batch_streaming does not apply to gpu" in n for n in gpu["notes"])
    df = evaluate(
        compose(
            "hardware=sn40l_socket",
            "optimizations.batch_streaming=true",
            "optimizations.kernel_looping=false",
        )
    )
    assert any("batch_streaming needs kernel_looping" in n for n in df["notes"])


def test_layers_of_different_kinds_are_separate_fused_calls(compose):
    """3 dense + 58 MoE layers emitted as two op groups: two looped calls, each paying its own
    launch and fill/drain once, each keeping its own layer-input activation traffic."""
    from decodelab.components.execution import dataflow
    from decodelab.components.ops import Op

    hw = compose("hardware=sn40l_rack16").hardware
    opt = compose("optimizations=all").optimizations
    ops = [
        Op("embedding", "embed", stage="pre"),
        Op("norm_d", "norm", repeat=3, act_bytes_per_token=4.0),
        Op("ffn_d", "gemm", repeat=3),
        Op("norm_m", "norm", repeat=58, act_bytes_per_token=4.0),
        Op("moe", "gemm", repeat=58, act_bytes_per_token=8.0),
        Op("lm_head", "gemm", stage="post"),
    ]
    ops, calls, _ = dataflow.assign_calls(ops, hw, opt)
    assert [op.call for op in ops] == [0, 1, 1, 2, 2, 3]
    assert [c["repeat"] for c in calls] == [1, 3, 58, 1]
    assert calls[1]["launch_once"] == calls[2]["launch_once"] == hw.hw_launch_us * 1e-6
    assert [op.act_bytes_per_token for op in ops[1:5]] == [4.0, 0.0, 4.0, 0.0]
