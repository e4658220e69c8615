"""KV-cache policies (components/kv_policy/, docs/kv_policies.md): memory and bytes-read formulas
against hand-worked values (budget accounting, window included or not, GQA selection
granularity), the slot behaviour the serving simulation relies on (static slots stay constant,
SnapKV grows one token per step, Quest saves reads, not memory) at the caps level, the prefill
selection cost reaching TTFT, and one-line errors for bad policy parameters."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from decodelab.components.kv_policy import (
    KV_POLICIES,
    cost,
    h2o,
    pyramidkv,
    quest,
    snapkv,
    snapstream,
    streaming_llm,
)
from decodelab.core import kernel as K
from decodelab.core import kv_costs
from decodelab.kernel_layout import Cap
from decodelab.modes.dispatch import evaluate

# Llama-3.1-8B: 32 layers, 32 query heads, 8 KV heads (G = 4), head dim 128
LLAMA8B = SimpleNamespace(
    name="llama3_1_8b",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    kv_lora_rank=0,
    qk_rope_head_dim=0,
)
# DeepSeek-R1: 61 layers, 128 heads, one MLA latent of 512 + 64 per layer
DSR1 = SimpleNamespace(
    name="deepseek_r1",
    n_layers=61,
    n_heads=128,
    n_kv_heads=1,
    head_dim=192,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
)


def pol(name="full", **kw):
    base = dict(
        name=name,
        sinks=0,
        window=0,
        budget=0,
        params={},
        obs_window=32,
        budget_includes_window=True,
        pooling="avg",
        pool_kernel=5,
        granularity="kv_head",
        pyramid_beta=0.0,
        page_size=16,
        top_k_pages=0,
        dense_layers=0,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def caps_of(module, p, model=None):
    k = module.kernel_params(p, model)
    return np.array([k["prompt_cap"], k["total_cap"], k["read_cap"]])


def held(prompt, generated, caps):
    """Tokens held after `generated` decode steps: the caps with the read cap removed."""
    c = caps.copy()
    c[Cap.READ_CAP] = 0.0
    return K.attended_tokens(float(prompt), float(prompt + generated), c)


# ---------------------------------------------------------------- memory formulas, hand-worked


def test_full_keeps_everything():
    p = pol("full")
    assert KV_POLICIES["full"].cached_tokens(p, 4096, 100) == 4196
    assert not caps_of(KV_POLICIES["full"], p).any()


def test_streaming_llm_sinks_plus_window():
    p = pol("streaming_llm", sinks=4, window=2000)
    assert streaming_llm.cached_tokens(p, 8192, 10) == 2004  # 4 sinks + 2000 recent
    assert streaming_llm.cached_tokens(p, 1000, 10) == 1010  # shorter than the window
    assert streaming_llm.slot_layout(p) == "static" and streaming_llm.slot_capacity(p) == 2004


@pytest.mark.parametrize(
    "includes, gran, prompt, kept",
    [
        (True, "kv_head", 8192, 1024),  # top-(1024 - 32) + the 32 window tokens
        (False, "kv_head", 8192, 1056),  # top-1024 + 32 window tokens
        (True, "layer", 8192, 1024),  # per layer: same memory as per KV head
        (True, "kv_head", 1000, 1000),  # prompt within the budget: nothing evicted
        (True, "query_head", 8192, 4000),  # union of 4 query heads: 32 + 4 * (1024 - 32)
        (False, "query_head", 8192, 4128),  # 32 + 4 * 1024
        (True, "query_head", 2000, 2000),  # union bound above the prompt: keeps the prompt
    ],
)
def test_snapkv_budget_accounting_and_gqa_granularity(includes, gran, prompt, kept):
    p = pol("snapkv", budget=1024, budget_includes_window=includes, granularity=gran)
    assert snapkv.cached_tokens(p, prompt, 0, LLAMA8B) == kept
    assert snapkv.cached_tokens(p, prompt, 37, LLAMA8B) == kept + 37
    # the kernel caps give the same cache after any number of decode steps
    caps = caps_of(snapkv, p, LLAMA8B)
    for t in (1, 10, 500):
        assert held(prompt, t, caps) == snapkv.cached_tokens(p, prompt, t, LLAMA8B)


def test_per_query_head_selection_stores_up_to_g_times_more():
    kv = snapkv.cached_tokens(pol("snapkv", budget=4096, granularity="kv_head"), 131072, 0, LLAMA8B)
    qh = snapkv.cached_tokens(pol("snapkv", budget=4096, granularity="query_head"), 131072, 0, LLAMA8B)
    assert kv == 4096 and qh == 32 + 4 * 4064 and 3.9 < qh / kv <= 4.0


def test_h2o_heavy_plus_recent_and_score_traffic():
    p = pol("h2o", budget=1024, window=1024)
    assert h2o.cached_tokens(p, 32768, 5, LLAMA8B) == 2048
    assert (
        h2o.cached_tokens(pol("h2o", budget=1024, window=1024, granularity="query_head"), 32768, 5, LLAMA8B)
        == 1024 + 4 * 1024
    )
    # FP32 score read + written per held token, per KV head and layer: 2 * 4 * 8 * 32 = 2048 B
    assert h2o.decode_overhead_bytes(p, LLAMA8B, 1.0) == 2048.0
    # as KV token-equivalents (131,072 B per BF16 token): 1/64 more per held token
    model = SimpleNamespace(**vars(LLAMA8B), layer_pattern=[])
    from decodelab.components.models import dense

    rm = kv_costs.read_model(KV_POLICIES["h2o"], p, dense, model, 2.0)
    assert rm[kv_costs.ReadModel.EXTRA] == pytest.approx(1 / 64)


def test_pyramidkv_layer_budgets():
    p = pol("pyramidkv", budget=2048, pyramid_beta=20)
    b = pyramidkv.layer_budgets(p, 32)
    # selected part s = 2048 - 32 = 2016: last layer s / 20 = 100.8, first 2s - 100.8 = 3931.2,
    # each + the 32 window tokens; the mean is the budget
    assert b[0] == pytest.approx(3963.2) and b[-1] == pytest.approx(132.8)
    assert np.mean(b) == pytest.approx(2048.0)
    assert pyramidkv.cached_tokens(p, 8192, 3, LLAMA8B) == pytest.approx(2048 + 3)
    # short prompt: the 24 lower layers keep all 1000 tokens, layers 24-31 keep k_l < 1000:
    # k_l = 3963.2 - l * 3830.4 / 31, mean over l = 24..31 = (997.74 + 132.8) / 2
    k24 = 3963.2 - 24 * 3830.4 / 31
    expect = (24 * 1000 + 8 * (k24 + 132.8) / 2) / 32
    assert pyramidkv.cached_tokens(p, 1000, 0, LLAMA8B) == pytest.approx(expect)
    assert expect < 1000  # ragged layers keep less than min(P, B) (the caps overstate it)


def test_quest_saves_reads_not_memory():
    p = pol("quest", page_size=16, budget=2048, dense_layers=2)
    # memory: 32768 tokens + min/max key metadata (1 token-equivalent per page) in 30 of 32 layers
    assert quest.cached_tokens(p, 32768, 0, LLAMA8B) == 32768 + 30 / 32 * 2048
    assert quest.cached_tokens(p, 32768, 0, LLAMA8B) > KV_POLICIES["full"].cached_tokens(p, 32768, 0)
    # reads: 2 dense layers read all; 30 read 128 pages + every page's metadata
    assert quest.read_tokens(p, LLAMA8B, 32768) == 2 / 32 * 32768 + 30 / 32 * (2048 + 2048)
    # MLA: a page's min and max of the latent are two latents
    assert quest.cached_tokens(p, 32768, 0, DSR1) == pytest.approx(32768 + 59 / 61 * 2 * 2048)
    assert quest.kernel_params(pol("quest", page_size=16, top_k_pages=64, budget=9999))["read_cap"] == 1024


def test_quest_read_model_matches_read_tokens():
    p = pol("quest", page_size=16, budget=2048, dense_layers=2)
    model = SimpleNamespace(**vars(LLAMA8B), layer_pattern=[])
    from decodelab.components.models import dense

    rm = kv_costs.read_model(KV_POLICIES["quest"], p, dense, model, 2.0)
    stored = np.array([100.0, 2048.0, 5000.0, 32768.0, 131071.0])
    got = kv_costs.effective_tokens(stored, caps_of(quest, p, model), rm)
    assert got == pytest.approx([quest.read_tokens(p, model, s) for s in stored])


def test_snapstream_static_slot():
    p = pol("snapstream", sinks=4, budget=16380, window=16380, granularity="layer")
    assert snapstream.slot_capacity(p, DSR1) == 32764
    assert snapstream.cached_tokens(p, 129024, 0, DSR1) == 32764
    assert snapstream.cached_tokens(p, 129024, 2048, DSR1) == 32764
    assert snapstream.cached_tokens(p, 1000, 24, DSR1) == 1024  # slot not yet full
    assert 131072 / snapstream.slot_capacity(p, DSR1) == pytest.approx(4.0, rel=1e-3)


# --------------------------------------------------- slot behaviour at the caps (serving contract)


@pytest.mark.parametrize(
    "name, p",
    [
        ("streaming_llm", pol("streaming_llm", sinks=4, window=2000)),
        ("snapstream", pol("snapstream", sinks=4, budget=1020, window=1024)),
        ("h2o", pol("h2o", budget=1024, window=1024)),
    ],
)
def test_static_policies_keep_constant_capacity(name, p):
    m = KV_POLICIES[name]
    caps = caps_of(m, p, LLAMA8B)
    assert m.slot_layout(p) == "static"
    sizes = {held(32768, t, caps) for t in range(1, 300)}
    assert sizes == {m.slot_capacity(p, LLAMA8B)}


def test_snapkv_grows_one_token_per_step():
    p = pol("snapkv", budget=1024)
    caps = caps_of(snapkv, p, LLAMA8B)
    sizes = np.array([held(32768, t, caps) for t in range(1, 300)])
    assert KV_POLICIES["snapkv"].slot_layout(p) == "growing" and sizes[0] == 1025
    assert (np.diff(sizes) == 1).all()


def test_quest_reads_are_capped_memory_is_not():
    p = pol("quest", page_size=16, budget=2048)
    caps = caps_of(quest, p, LLAMA8B)
    assert [held(32768, t, caps) for t in (1, 100)] == [32769, 32868]
    assert K.attended_tokens(32768.0, 32868.0, caps) == 2048


# --------------------------------------------------------------------- prefill selection cost


def test_snapkv_scoring_cost_hand_worked():
    p = pol("snapkv", budget=1024, obs_window=32, pool_kernel=5, granularity="kv_head")
    c = snapkv.prefill_overhead(p, LLAMA8B, 8192, kv_bytes=2.0, act_bytes=2.0)
    P, w, H, Hkv, d, L = 8192, 32, 32, 8, 128, 32
    flops = w * P * H * (2 * d + 6) + P * H + P * Hkv * 6
    byts = P * Hkv * d * 2 + w * H * d * 2 + 2 * 4 * P * Hkv + 2 * 1024 * (2 * Hkv * d) * 2
    assert c["flops"] == L * flops and c["bytes"] == L * byts
    assert snapkv.prefill_overhead(p, LLAMA8B, 1000)["flops"] == 0  # no compression, no scoring


def test_snapstream_scoring_under_mla_is_per_layer():
    p = pol("snapstream", sinks=4, budget=16380, window=16380, granularity="layer")
    c = snapstream.prefill_overhead(p, DSR1, 129024)
    P, w, H, lat, L = 129024, 32, 128, 576, 61
    flops = w * P * H * (2 * lat + 6) + P * H + P * 1 * 6
    byts = P * lat * 2 + w * H * lat * 2 + 2 * 4 * P + 2 * 32764 * lat * 2
    assert c["flops"] == L * flops and c["bytes"] == L * byts


def test_prefill_selection_reaches_ttft(compose):
    base = ("model=llama3_1_8b", "workload.prompt_len=32768", "workload.output_len=16")
    full = evaluate(compose(*base), keep_steps=False)["metrics"]
    for name in ("snapkv", "h2o", "quest"):
        m = evaluate(compose(*base, f"kv_policy={name}"), keep_steps=False)["metrics"]
        assert m["ttft_kv_select_ms"] > 0
        assert m["ttft_ms"] == pytest.approx(full["ttft_ms"] + m["ttft_kv_select_ms"], rel=1e-9)
    # H2O recomputes every causal pair's attention: ~ one more prefill attention pass
    assert evaluate(compose(*base, "kv_policy=h2o"), keep_steps=False)["metrics"]["kv_select_pct_ttft"] > 10


# ---------------------------------------------------------------------- whole-design effects


def test_policies_in_a_design(compose):
    base = ("model=llama3_1_8b", "workload.prompt_len=32768", "workload.output_len=64")
    res = {
        n: evaluate(compose(*base, f"kv_policy={n}"), keep_steps=False)["metrics"]
        for n in ("full", "streaming_llm", "snapkv", "quest", "snapstream")
    }
    full = res["full"]
    # full at 32k: (32768 + 64) * 131,072 B per sequence
    assert full["kv_slot_gib_model"] == pytest.approx((32768 + 64) * 131072 / 2**30)
    assert res["quest"]["max_batch"] <= full["max_batch"] < res["snapkv"]["max_batch"]
    assert res["quest"]["tpot_ms"] < full["tpot_ms"]  # fewer KV bytes read
    # fewer KV bytes never cost more; at batch 1 both read ~2k tokens, where the measured decode
    # attention is flat in the context (opcost/attention_decode.py), so the two may cost the same
    assert res["streaming_llm"]["tpot_ms"] <= res["snapkv"]["tpot_ms"] * (1 + 1e-12)
    assert res["snapkv"]["tpot_ms"] < full["tpot_ms"]


def test_static_slot_does_not_grow_with_output(compose):
    for name, grows in (("snapstream", False), ("streaming_llm", False), ("snapkv", True)):
        a, b = (
            evaluate(
                compose(
                    "model=llama3_1_8b",
                    "workload.prompt_len=65536",
                    f"workload.output_len={n}",
                    f"kv_policy={name}",
                ),
                keep_steps=False,
            )["metrics"]["kv_slot_gib_model"]
            for n in (128, 1152)
        )
        assert (b - a) == pytest.approx(1024 * 131072 / 2**30 if grows else 0.0)


def test_batch_fill_runs_the_largest_batch_that_fits(compose):
    m = evaluate(
        compose(
            "model=llama3_1_8b", "kv_policy=snapkv", "workload.prompt_len=32768", "workload.batch_fill=true"
        ),
        keep_steps=False,
    )["metrics"]
    assert m["batch_size"] == m["max_batch"] > 1
    assert m["mem_hbm_pct"] <= 100.0
    too_big = evaluate(compose("model=llama3_1_70b", "workload.batch_fill=true"), keep_steps=False)
    assert too_big["status"] == "infeasible" and "batch_fill" in too_big["reason"]


# ------------------------------------------------------------------------- validation errors


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            ["kv_policy=snapkv", "kv_policy.budget=16"],
            "kv_policy.budget=16 must exceed kv_policy.obs_window=32",
        ),
        (["kv_policy=snapkv", "kv_policy.granularity=head"], "kv_policy.granularity='head' is not one of"),
        (["kv_policy=snapkv", "kv_policy.pooling=median"], "kv_policy.pooling='median' is not one of"),
        (["kv_policy=snapkv", "kv_policy.pool_kernel=4"], "kv_policy.pool_kernel=4 must be an odd number"),
        (["kv_policy=streaming_llm", "kv_policy.window=0"], "kv_policy.window=0 must be >= 1"),
        (["kv_policy=quest", "kv_policy.page_size=0"], "kv_policy.page_size=0 must be >= 1"),
        (
            ["kv_policy=quest", "kv_policy.dense_layers=40"],
            "kv_policy.dense_layers=40 must be in [0, n_layers)",
        ),
        (["kv_policy=pyramidkv", "kv_policy.pyramid_beta=-1"], "kv_policy.pyramid_beta=-1.0 must be >= 0"),
        (
            [
                "model=deepseek_r1",
                "hardware=sn40l_rack16",
                "kv_policy=snapstream",
                "kv_policy.granularity=query_head",
            ],
            "not possible with MLA",
        ),
    ],
)
def test_bad_policy_parameters_are_one_line_errors(compose, overrides, fragment):
    res = evaluate(compose(*overrides), keep_steps=False)
    assert res["status"] == "invalid", res
    assert fragment in res["reason"] and "\n" not in res["reason"], res["reason"]


def test_every_policy_has_the_interface():
    names = (
        "check",
        "cached_tokens",
        "kernel_params",
        "slot_layout",
        "slot_capacity",
        "read_tokens",
        "decode_overhead_bytes",
        "prefill_overhead",
    )
    for name, mod in KV_POLICIES.items():
        assert all(callable(getattr(mod, n, None)) for n in names), name
    assert cost.union_kept(32, 992, 4) == 4000


def test_kvplot_writes_plot_and_table(tmp_path):
    import json

    from decodelab.apps import kvplot

    for i, (name, budget, batch) in enumerate(
        [("snapkv", 1024, 200), ("snapkv", 4096, 100), ("full", 1024, 16), ("full", 4096, 16)]
    ):
        d = tmp_path / str(i)
        d.mkdir()
        rec = {
            "status": "ok",
            "reason": "",
            "notes": [],
            "metrics": {
                "max_batch": batch,
                "tok_s_aggregate": 30.0 * batch,
                "tok_s_user": 30.0,
                "kv_select_pct_ttft": 0.1,
            },
            "config": {
                "model": {"name": "m"},
                "hardware": {"name": "h"},
                "workload": {"prompt_len": 31744, "output_len": 1024},
                "kv_policy": {"name": name, "budget": budget, "window": 0},
            },
        }
        (d / "result.json").write_text(json.dumps(rec))
    assert kvplot.main([str(tmp_path)]) == 0
    assert (tmp_path / "kv_tradeoff.png").stat().st_size > 0
    assert (tmp_path / "kv_tradeoff.csv").read_text().count("\n") == 5
    assert kvplot.main([str(tmp_path / "0" / "nothing")]) == 2


def test_a_policy_needs_only_check_cached_tokens_and_kernel_params():
    """The interface functions a module leaves out are the full cache's (docs/kv_policies.md, "How a
    policy enters the model")."""
    import types

    from decodelab.components.kv_policy import Policy

    mod = types.ModuleType("recent_prompt")
    mod.check = lambda pol, model: []
    mod.cached_tokens = lambda pol, prompt_len, generated, model=None: min(prompt_len, 4) + generated
    mod.kernel_params = lambda pol, model=None: {"prompt_cap": 4.0, "total_cap": 0.0, "read_cap": 0.0}
    p = Policy(mod)
    assert p.name == "recent_prompt" and p.cached_tokens(None, 10, 2) == 6
    assert p.slot_layout(None) == "growing" and p.slot_capacity(None) == 0.0
    assert p.read_tokens(None, None, 6.0) == 6.0 and p.decode_overhead_bytes(None, None, 6.0) == 0.0
    assert p.prefill_overhead(None, None, 10) == cost.NO_COST
