"""The engine's sampler as a cost (framework/opcost/sampler.py, docs/model.md, "The engine's
sampler"): which requests take the sort path, the law's value worked by hand, the kernel and the
reference alike, the shipped law against its microbenchmark, a chip without the law, and bad input as
one error line each."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.checks import check_config
from decodelab.core.kernel import simulate
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError
from decodelab.kernel_layout import Law, Lin
from decodelab.opcost import sampler
from decodelab.paths import DATA_DIR

QWEN_VLLM = ("model=qwen3_32b", "engine=vllm", "hardware=h100_sxm", "workload=closed_loop")


def _sampling_row(d):
    i = next(j for j, op in enumerate(d.ops) if op.kind == "sample")
    return d.op_lin[i]


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (QWEN_VLLM, "sort"),  # generation_config top_p 0.95 on vLLM 0.12's PyTorch path
        (("model=llama3_1_8b", "engine=vllm", "hardware=h100_sxm"), "sort"),  # top_p 0.9
        (("model=llama2_7b", "engine=vllm", "hardware=h100_sxm"), ""),  # no defaults: greedy
        (QWEN_VLLM + ("model.generation_defaults.temperature=0",), ""),  # temperature 0: greedy
        (QWEN_VLLM + ("model.generation_defaults.top_p=1",), ""),  # top-k only: a top-k, no sort
        (QWEN_VLLM + ("engine.sampler.model_defaults=false",), ""),  # the engine ignores them
        (("model=qwen3_32b", "engine=default", "hardware=h100_sxm"), ""),  # a fused kernel
        (("model=qwen3_32b", "engine=sglang", "hardware=h100_sxm"), ""),  # 0.5.1: no model defaults
        (("model=qwen3_32b", "engine=sglang_0_5_8", "hardware=h100_sxm"), ""),  # defaults, FlashInfer kernel
        (("model=qwen3_32b", "engine=vllm_0_14", "hardware=h100_sxm"), "sort"),  # 0.12's sampler, async
        (("model=qwen3_32b", "engine=vllm_0_19", "hardware=h100_sxm"), ""),  # Triton kernel from 8 rows
    ],
)
def test_which_requests_take_the_sort_path(overrides, expected):
    assert sampler.path(compose_cfg(*overrides)) == expected


def test_the_law_by_hand_and_in_the_kernel():
    """Qwen3-32B (vocabulary 151,936) on an H100 under vLLM: t0 = 138.9 us; per sampled token
    0.1218 ns x 151936 = 18.506 us for the filter plus 46 B x 151936 / 3.35 TB/s = 2.086 us for the
    passes around it = 20.592 us. A decode step of 128 sequences: 138.9 + 128 x 20.592 =
    2774.7 us, which the kernel's columns give too."""
    cfg = compose_cfg(*QWEN_VLLM)
    law = sampler.law(sampler.path(cfg), cfg.hardware, cfg.model.vocab_size)
    assert law.t0 == pytest.approx(138.9e-6, rel=1e-12)
    assert law.s_per_tok == pytest.approx(0.1218e-9 * 151936 + 46 * 151936 / 3.35e12, rel=1e-12)
    assert law.s_per_tok * 1e6 == pytest.approx(20.592, abs=5e-4)
    assert float(sampler.time(law, 128)) * 1e6 == pytest.approx(2774.7, abs=0.1)
    row = _sampling_row(build(cfg))
    assert row[Lin.LAW] == Law.GEMM and row[Lin.G_TAB] == 0.0
    t = K._pnorm(row[Lin.G_AC] * 128, row[Lin.G_CM] + row[Lin.G_AM] * 128, row[Lin.G_P]) + row[Lin.T0]
    assert t * 1e6 == pytest.approx(2774.7, abs=0.1)
    # the kernel path: the sampling op keeps the roofline pass (no law columns)
    assert _sampling_row(build(compose_cfg(*QWEN_VLLM, "engine.sampler.topk_topp=kernel")))[Lin.LAW] == 0.0


def test_kernel_matches_reference_and_the_sort_costs_what_the_law_says():
    """Decode steps of 8 and 128 sequences: the kernel and the pure-Python reference agree with
    the sort path, and the step grows over the kernel path's by the law's time less what the kernel
    path charges for the op: one FP32 pass over the logits (0.18 us per sequence at the HBM peak)
    and its call boundary (hardware.sync_us, which the law's t0 replaces)."""
    steps = np.array([[1, 2048, 8, 1, 0], [1, 2048, 128, 1, 0]], dtype=float)  # q, ctx, seqs, out, prefill
    cfg = compose_cfg(*QWEN_VLLM)
    d = build(cfg)
    out = simulate(*d.arrays(), steps).sum(axis=1)
    ref = [sum(r.values()) for r in reference_simulate(d, cfg, steps)]
    assert out == pytest.approx(ref, rel=1e-9)
    plain_cfg = compose_cfg(*QWEN_VLLM, "engine.sampler.topk_topp=kernel")
    plain = simulate(*build(plain_cfg).arrays(), steps).sum(axis=1)
    law = sampler.law(sampler.path(cfg), cfg.hardware, cfg.model.vocab_size)
    for b, extra in zip((8, 128), out - plain):
        sort_t = float(sampler.time(law, b))
        one_pass = b * 151936 * 4 / 3.35e12  # at the HBM peak: the kernel path's lower bound
        assert sort_t - 3 * one_pass - 10e-6 < extra < sort_t


def test_the_shipped_law_is_the_fit_of_its_microbenchmark():
    """B200: vLLM PR #40376's PyTorch rows refit to the YAML's values (4 significant digits); the
    H100 and H200 files carry the same values as a lower bound."""
    path = DATA_DIR / "operators" / "b200_sxm_sampler_topk_topp_vllm_pytorch.csv"
    with open(path) as f:
        rows = [(float(r["batch"]), float(r["vocab"]), float(r["latency_ms"])) for r in csv.DictReader(f)]
    t0_us, ns, mape = sampler.fit(rows)
    assert len(rows) == 8 and mape == pytest.approx(4.86, abs=0.01)
    for chip in ("b200_sxm", "h100_sxm", "h200_sxm"):
        law = compose_cfg(f"hardware={chip}").hardware.op_fit.sampler["sort"]
        assert law.t0_us == pytest.approx(t0_us, rel=5e-4) and law.ns_per_elem == pytest.approx(ns, rel=5e-4)


def test_fit_never_gives_a_negative_t0():
    """Rows that a free line would cross below zero at no elements: t0 = 0, the slope alone
    (0.2 ns per element exactly when the rows are proportional)."""
    rows = [(b, 131072, 0.2e-6 * b * 131072 * (1.0 + 0.01 * (b > 64))) for b in (8, 64, 128, 256)]
    t0_us, ns, _ = sampler.fit(rows)
    assert t0_us == 0.0 and ns == pytest.approx(0.2, rel=0.01)


def test_fit_recovers_a_line_by_hand():
    """Rows on t = 0.1 ms + 0.2 ns per element exactly: t0 100 us, 0.2 ns, MAPE 0."""
    rows = [(b, v, 0.1 + 0.2e-6 * b * v) for b in (8, 64, 256) for v in (32768, 131072)]
    t0_us, ns, mape = sampler.fit(rows)
    assert (t0_us, ns, mape) == pytest.approx((100.0, 0.2, 0.0), abs=1e-9)


def test_a_borrowed_law_says_so_in_the_run_note():
    """The H100 (and a system of H100s) carries the B200's law as a lower bound: every design that
    uses it says so; the B200's own measurement adds no note."""
    for chip, noted in (("h100_sxm", True), ("dgx_h100", True), ("b200_sxm", False)):
        notes = build(compose_cfg(*QWEN_VLLM, f"hardware={chip}")).notes
        hits = [n for n in notes if "hardware.op_fit.sampler.sort, measured on a B200" in n]
        assert bool(hits) == noted, (chip, notes)
        assert not noted or "a lower bound on this chip" in hits[0]


def test_a_chip_without_the_law_notes_it_and_keeps_the_pass():
    cfg = compose_cfg(*QWEN_VLLM, "hardware=a100_sxm")
    d = build(cfg)
    assert _sampling_row(d)[Lin.LAW] == 0.0
    assert any("hardware.op_fit.sampler has no 'sort' law" in n for n in d.notes)


@pytest.mark.parametrize(
    "override, message",
    [
        ("engine.sampler.topk_topp=fast", "engine.sampler.topk_topp='fast' is not one of: kernel, sort"),
        ("+model.generation_defaults.top_q=0.9", "model.generation_defaults.top_q: the key must be one of"),
        ("model.generation_defaults.top_p=1.5", "model.generation_defaults.top_p=1.5 must be in (0, 1]"),
        ("hardware.op_fit.sampler.sort.t0_us=-1", "hardware.op_fit.sampler.sort.t0_us=-1.0 must be in"),
    ],
)
def test_bad_sampler_input_is_one_error_line(override, message):
    cfg = compose_cfg(*QWEN_VLLM, override)
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    assert message in str(e.value) and "\n" not in str(e.value).strip()


def test_a_law_for_an_unknown_path_is_one_error_line():
    """A hardware file whose op_fit.sampler names a path no engine takes."""
    from omegaconf import open_dict

    cfg = compose_cfg(*QWEN_VLLM)
    with open_dict(cfg.hardware.op_fit.sampler):
        cfg.hardware.op_fit.sampler["fast"] = cfg.hardware.op_fit.sampler["sort"]
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    assert "hardware.op_fit.sampler.fast: the key must be one of: sort" in str(e.value)


def test_fit_hardware_fits_a_sampler_csv(tmp_path):
    """`decodelab fit-hardware` on a sampler CSV (batch, vocab, latency_ms) prints the
    op_fit.sampler.sort law: rows on 50 us + 0.3 ns per element give exactly those values."""
    import subprocess
    import sys

    p = tmp_path / "sampler.csv"
    lines = ["batch,vocab,latency_ms"] + [
        f"{b},{v},{0.05 + 0.3e-6 * b * v}" for b in (1, 8, 32, 128) for v in (32768, 151936)
    ]
    p.write_text("\n".join(lines) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "decodelab", "fit-hardware", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "  sampler:\n    sort:" in r.stdout
    assert "t0_us: 50   #" in r.stdout and "ns_per_elem: 0.3   #" in r.stdout


def test_vllm_0_19_overlaps_its_host_work_and_drops_the_sort():
    """vLLM 0.19.0 (conf/engine/vllm_0_19.yaml): async scheduling (overlap with lookahead) and the
    Triton top-k / top-p kernel, so a Qwen3-32B decode step of 128 sequences costs less than under
    0.12.0's file by about the sort law's time (less the one pass the kernel path keeps); both read the same
    kernel tables (engine.version: 0.13.0, 0.14.0's tables)."""
    steps = np.array([[1, 2048, 128, 1, 0]], dtype=float)
    old = compose_cfg(*QWEN_VLLM)
    new = compose_cfg(
        "model=qwen3_32b",
        "engine=vllm_0_19",
        "engine.version=0.13.0",
        "hardware=h100_sxm",
        "workload=closed_loop",
    )
    assert (new.engine.overlap, new.engine.lookahead, new.engine.sampler.topk_topp) == (True, True, "kernel")
    t_old = simulate(*build(old).arrays(), steps).sum()
    t_new = simulate(*build(new).arrays(), steps).sum()
    law = sampler.law(sampler.path(old), old.hardware, old.model.vocab_size)
    assert t_old - t_new > 0.9 * float(sampler.time(law, 128))
