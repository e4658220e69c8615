"""`decodelab validate -j N` (framework/runs/validation_predict.py): the designs of the CSVs spread over
local worker processes give the same table as one process, in the CSV's row order, and a config that
does not compose is still one `error:` line. A design is built once and each row's values set on it; a row
whose values size the KV pool otherwise runs the design built with them."""

import pandas as pd
import pytest
from decodelab.runs.validation import run_validation, run_validations

HEAD = "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
# three designs (two engines, two TP degrees), rows of one design not adjacent
ROWS = [
    "Qwen/Qwen3-0.6B,trtllm,1.0.0rc3,bf16,1,512,32,4,50,5\n",
    "Qwen/Qwen3-0.6B,vllm,0.12.0,bf16,1,512,32,4,50,5\n",
    "Qwen/Qwen3-0.6B,trtllm,1.0.0rc3,bf16,2,512,32,4,50,5\n",
    "Qwen/Qwen3-0.6B,trtllm,1.0.0rc3,bf16,1,1024,32,8,50,5\n",
    "Qwen/Qwen3-0.6B,vllm,0.12.0,bf16,1,256,16,2,50,5\n",
]


@pytest.fixture
def csvs(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(HEAD + "".join(ROWS))
    b.write_text(HEAD + "".join(ROWS[:2]))
    return a, b


@pytest.mark.slow
def test_workers_give_the_table_of_one_process(csvs):
    a, b = csvs
    one = run_validations([a, b], jobs=1)
    two = run_validations([a, b], jobs=2)
    assert [len(d) for d in two] == [5, 2]
    for x, y in zip(one, two):
        pd.testing.assert_frame_equal(x, y)
    # the CSV's order, whatever order the designs finish in
    assert list(two[0].isl) == [512, 512, 512, 1024, 256]
    assert list(two[0].engine_config) == ["default", "vllm", "default", "default", "vllm"]
    assert (two[0].status == "ok").all() and (two[0].tpot_pred > 0).all()
    # one CSV on its own is the same as in the pass over both
    pd.testing.assert_frame_equal(run_validation(b), one[1])


def test_a_worker_holding_a_sweep_context_validates_and_keeps_it(csvs):
    """A worker process keeps a sweep's Hydra context between chunks (config/composition.py); a
    validate chunk in the same process sets it aside for its own and restores it."""
    from decodelab.config import compose as C
    from decodelab.runs.validation import read_rows
    from decodelab.runs.validation_predict import _in_worker
    from hydra.core.global_hydra import GlobalHydra

    _, items = read_rows(csvs[1])
    with C.context():
        outer = GlobalHydra.instance().hydra
        got = _in_worker("token", items, [], False, "auto")
        assert GlobalHydra.instance().hydra is outer
    assert [n for n, _ in got] == [1, 2] and all(r["status"] == "ok" for _, r in got)
    assert not GlobalHydra.instance().is_initialized()


def test_a_rows_engine_values_size_its_own_kv_pool():
    """vLLM's start-up profile samples min(max_num_batched_tokens, max_num_seqs) rows (core/profile_reserve.py):
    Qwen3-0.6B on one H100 under engine=vllm (8192 tokens, 1024 sequences, 28 B per vocabulary entry) keeps
    8192 x 1024 x 2 + 1024 x 151,936 x 28 = 4,373,086,208 B; a row launched with --max-num-seqs 4 keeps the forward's
    8192 x (18,432 + 1024 x 2) = 167,772,160 B, so its pool is 4,205,314,048 B larger (kv_mem_basis total)."""
    from decodelab.config import compose as C
    from decodelab.modes.serving.simulate import serving_designs
    from decodelab.runs.validation_predict import designs_for_row, pool_values
    from omegaconf import OmegaConf

    cfg = C.compose(["tracking=off", "model=qwen3_0_6b", "engine=vllm", "workload=closed_loop"])
    OmegaConf.set_readonly(cfg, False)
    designs = serving_designs(cfg)
    key, cache = ("k", pool_values(cfg, designs[0])), {}
    assert pool_values(cfg, designs[0]) == (8192, 1024)
    assert designs_for_row(cache, key, cfg, designs) is designs and not cache
    OmegaConf.update(cfg, "engine.max_batch", 4)  # as validate sets a row's values (set_row_values)
    row = designs_for_row(cache, key, cfg, designs)
    pool = {n: d[0].memory["kv_pool_bytes"] for n, d in (("design", designs), ("row", row))}
    assert pool["row"] - pool["design"] == 4_205_314_048
    assert pool["row"] == serving_designs(cfg)[0].memory["kv_pool_bytes"]
    assert designs_for_row(cache, key, cfg, designs) is row  # built once per values


@pytest.mark.slow
def test_a_bad_override_in_workers_is_one_error_line(csvs, tmp_path):
    from conftest import cli

    a, _ = csvs
    with pytest.raises(ValueError, match="engine.nope"):
        run_validation(a, ["engine.nope=1"], jobs=2)
    out = cli(tmp_path, "validate", "--csv", str(a), "--no-track", "-j", "2", "engine.nope=1")
    assert out.returncode == 2 and out.stderr.count("error:") == 1 and "nope" in out.stderr
    bad = cli(tmp_path, "validate", "--csv", str(a), "--no-track", "-j", "0")
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "worker count" in bad.stderr


@pytest.mark.benchmark
def test_benchmark_validate_all_shipped_rows(tmp_path, record_property):
    """Issue 13's benchmark: `decodelab validate --no-track --all` (the 396 shipped rows, default
    workers) in <= 15 s on the 2-core development machine (run alone: pytest -m benchmark -n 0)."""
    import time

    from conftest import cli

    t0 = time.perf_counter()
    out = cli(tmp_path, "validate", "--no-track", "--all", process=True)
    took = time.perf_counter() - t0
    record_property("validate_all_s", took)
    assert out.returncode == 0, out.stderr
    assert "over 42 rows" in out.stdout and "over 354 rows" in out.stdout
    assert took <= 15.0, f"validate --all took {took:.1f} s"
