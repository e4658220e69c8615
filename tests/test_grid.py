"""`decodelab grid` (framework/core/grid.py, core/grid_kernel.py, runs/grid.py): the array path
gives the per-design path's results -- status, reason, notes and every metric -- on a 1,000-design
sample of mixed models (dense, MoE, MLA, sliding window), chips (GPU roofline, GPU fitted laws,
dataflow), KV policies, KV spill to DDR and infeasible designs; the closed-form decode sums equal
the row-by-row walk; designs it cannot express take the per-design path and say so."""

from __future__ import annotations

import numpy as np
import pytest
from decodelab.config import plan as P
from decodelab.config.grid import make_grid, overrides_of
from decodelab.core import grid_kernel, kv_costs
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.modes.dispatch import evaluate
from decodelab.output.table import read_table
from decodelab.runs.grid import run_grid

MIXED = [
    "model=llama3_1_8b,mixtral_8x7b,deepseek_r1,gpt_oss_120b",
    "hardware=dgx_a100,sn40l_rack16,dgx_h100",
    "kv_policy=h2o,quest,streaming_llm",  # selection at prefill; pages; caps
    "hardware.memory.hbm.bandwidth_gb_s=1500,3000",
    "workload.batch_size=1,32",
    "workload.prompt_len=1024,30000,300000",  # 300000: longer than every model's context
    "workload.output_len=64,300",
    "workload.kv_placement=hbm,spill_ddr",
    "tracking.enabled=false",
]


def close(a: float, b: float, scale: float) -> bool:
    """Equal to 1e-12 of the value, or of its metric family's total (a split by cause can be
    a difference of nearly equal times, e.g. `excess`)."""
    if np.isnan(a) or np.isnan(b):
        return np.isnan(a) and np.isnan(b)
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b), scale)


def scale_of(metrics: dict, key: str) -> float:
    for family in ("tpot", "ttft"):
        if key.startswith(family + "_"):
            return abs(metrics.get(family + "_ms", 0.0))
    return 0.0


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    d = tmp_path_factory.mktemp("grid")
    grid = make_grid(None, MIXED + [f"hydra.sweep.dir={d}"])
    # the per-design path first: run_grid then finds each choice composed (one Hydra context)
    jobs = sorted(int(j) for j in np.random.default_rng(16).choice(grid.n_jobs, 1000, replace=False))
    composer = P.composer(grid.source)
    refs = {
        job: evaluate(composer.config(overrides_of(grid, job), reuse=True), keep_steps=False) for job in jobs
    }
    out = run_grid(grid, jobs=1, progress=False)
    return grid, out, read_table(out.path).set_index("job").sort_index(), refs


@pytest.mark.slow
def test_grid_matches_the_per_design_path_on_1000_designs(mixed):
    grid, out, table, refs = mixed
    assert grid.n_jobs == 1728 and len(table) == 1728 and out.path.name == "results.parquet"
    statuses, worst = {}, 0.0
    meta = {"status", "reason", "notes", "path", "path_reason", "rows_costed", "code_version"}
    metric_cols = [c for c in table.columns if c not in meta | {a.key for a in grid.axes}]
    for job, ref in refs.items():
        row = table.loc[job]
        statuses[ref.status] = statuses.get(ref.status, 0) + 1
        assert row["status"] == ref.status, (job, ref.reason, row["reason"])
        assert row["reason"] == ref.reason
        assert row["path"] == "array"
        if ref.status != "ok":
            continue
        assert row["notes"] == "; ".join(ref.notes)
        have = {k for k in metric_cols if not np.isnan(row[k])}
        assert have == set(ref.metrics), job
        for k, v in ref.metrics.items():
            assert close(row[k], v, scale_of(ref.metrics, k)), (job, k, row[k], v)
            if v:
                worst = max(worst, abs(row[k] - v) / abs(v))
    assert len(refs) == 1000 and statuses.get("ok", 0) > 300 and statuses.get("infeasible", 0) > 100, statuses
    print(f"1000 designs: {statuses}; worst relative difference {worst:.1e}")


def test_the_decode_walk_is_cheaper_where_exact(mixed):
    _, out, table, _ = mixed
    ok = table[table.status == "ok"]
    closed = ok["rows_costed"] < ok["workload.output_len"]
    roofline = ok["hardware"] == "sn40l_rack16"
    assert closed[roofline].mean() > 0.5  # most roofline-law designs summed in closed form
    # fitted decode-attention law: walked row by row (dgx_a100 since its own tables, 2026-11-29: walked where its
    # costs need it, the grid matching the per-design path either way)
    fitted = ok["hardware"] == "dgx_h100"
    assert (ok.loc[fitted, "rows_costed"] == ok.loc[fitted, "workload.output_len"]).all()
    assert ok.loc[roofline, "rows_costed"].sum() < 0.5 * ok.loc[roofline, "workload.output_len"].sum()
    assert out.rows_costed < ok["workload.output_len"].sum()


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=llama3_1_8b", "hardware=dgx_a100", "hardware.op_model=roofline"],  # a GPU on the roofline law
        # decode steps of 512 sequences: ~7 ms of compute-bound GEMMs a step, past the H100's
        # sustained-clock onset (5 ms) on every row
        [
            "model=llama3_1_8b",
            "hardware=h100_sxm",
            "hardware.op_model=roofline",
            "workload.batch_size=512",
            "workload.prompt_len=100",
        ],
        ["model=mixtral_8x7b", "hardware=sn40l_rack16", "kv_policy=streaming_llm", "workload.output_len=900"],
        ["model=gpt_oss_120b", "hardware=sn40l_node8", "workload.prompt_len=200", "workload.output_len=400"],
        [
            "model=llama3_1_70b",
            "hardware=sn40l_rack16",
            "workload.kv_placement=spill_ddr",
            "workload.batch_size=64",
            "workload.prompt_len=60000",
        ],
    ],
)
def test_closed_form_sums_equal_the_row_by_row_walk(overrides):
    from decodelab.config import compose as C
    from decodelab.core.tree import freeze
    from omegaconf import OmegaConf

    cfg = freeze(OmegaConf.to_container(C.compose(overrides), resolve=True))
    d = build(cfg)
    w = cfg.workload
    steps = kv_costs.attended_rows(K.request_steps(w.batch_size, w.prompt_len, w.output_len), w.prompt_len, d)
    bws = np.array([d.tier_bw, d.tier_bw * 0.37, d.tier_bw * 3.1])
    args = (d.op_call, d.op_w, d.op_lin, d.call_rep, d.call_cost, bws, d.kv_frac, d.hw, steps)
    pre_c, dec_c, rows_c = grid_kernel.decode_grid(*args, False)
    pre_w, dec_w, rows_w = grid_kernel.decode_grid(*args, True)
    np.testing.assert_array_equal(pre_c, pre_w)
    np.testing.assert_allclose(dec_c, dec_w, rtol=1e-12, atol=1e-12 * dec_w.sum(1).max())
    ref = K.simulate(*d.arrays(), steps)  # the kernel's own walk at the design's bandwidths
    np.testing.assert_allclose(dec_w[0], ref[1:].sum(0), rtol=1e-13, atol=0)
    assert (rows_w == w.output_len).all()


def test_designs_the_arrays_cannot_express_take_the_per_design_path(tmp_path):
    grid = make_grid(
        None,
        [
            "model=llama3_1_8b",
            "hardware=sn40l_rack16",
            "speculative.enabled=false,true",
            "workload.batch_size=1,4",
            "tracking.enabled=false",
            f"hydra.sweep.dir={tmp_path}",
        ],
    )
    out = run_grid(grid, jobs=1, progress=False)
    t = read_table(out.path).set_index("job").sort_index()
    assert out.per_design == {"speculative decoding": 2}
    assert list(t["path"]) == ["array", "array", "per-design", "per-design"]
    composer = P.composer(grid.source)
    for job in range(4):
        cfg, _, _, _ = P.prepare(composer, overrides_of(grid, job))
        ref = evaluate(cfg, keep_steps=False)
        assert t.loc[job, "status"] == ref.status == "ok"
        for k, v in ref.metrics.items():
            assert close(t.loc[job, k], v, scale_of(ref.metrics, k)), (job, k)
    P.reset()


def _tree(pid: int) -> dict:
    """{pid: (resident bytes, CPU seconds)} of a process and all its descendants (Linux /proc)."""
    import os

    kids: dict = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(p))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = {}, [pid]
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    while todo:
        q = todo.pop()
        todo.extend(kids.get(q, []))
        try:
            with open(f"/proc/{q}/statm") as f:
                rss = int(f.read().split()[1]) * page
            with open(f"/proc/{q}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[q] = (rss, (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError, IndexError):
            continue
    return out


def run_measured(cwd, *args: str):
    """`decodelab ARGS` in cwd: (process, stdout, stderr, wall seconds, peak RSS of its process
    tree, CPU seconds of the tree, sampled every 0.2 s)."""
    import os
    import subprocess
    import sys
    import time

    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", COLUMNS="200")
    t0 = time.monotonic()
    with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
        p = subprocess.Popen(
            [sys.executable, "-m", "decodelab.apps.cli", *args], cwd=cwd, env=env, stdout=out, stderr=err
        )
        peak, cpu = 0, {}
        while p.poll() is None:
            tree = _tree(p.pid)
            peak = max(peak, sum(r for r, _ in tree.values()))
            cpu.update({q: c for q, (_, c) in tree.items()})
            time.sleep(0.2)
    wall = time.monotonic() - t0
    text = (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text()
    return p, *text, wall, peak, sum(cpu.values())


@pytest.mark.slow
def test_decodelab_grid_writes_one_table_and_one_mlflow_parent(tmp_path):
    from mlflow.tracking import MlflowClient

    p, out, _, _, _, _ = run_measured(
        tmp_path,
        "grid",
        "model=llama3_2_1b,llama3_1_8b",
        "hardware=sn40l_node8",
        "hardware.memory.hbm.bandwidth_gb_s=1000,2000,4000",
        "workload.batch_size=1,8",
        "-j",
        "1",
        "-q",
    )
    assert p.returncode == 0, out
    assert "12 designs" in out and "12 evaluated as arrays" in out
    table = read_table(next((tmp_path / "outputs").rglob("results.parquet")))
    assert len(table) == 12 and set(table["status"]) == {"ok"} and set(table["path"]) == {"array"}
    c = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = c.search_runs([c.get_experiment_by_name("decodelab").experiment_id])
    assert len(runs) == 1 and runs[0].data.metrics["n_ok"] == 12
    assert {f.path for f in c.list_artifacts(runs[0].info.run_id)} == {"results.parquet"}


@pytest.mark.benchmark
def test_benchmark_one_million_designs(tmp_path):
    """`decodelab grid scale/grid_1m -j 2` (docs/sweeps.md, "Benchmarks"): reports wall time, designs/s, CPU
    seconds and the peak memory of the process tree; asserts the results, never the clock."""
    import pyarrow.parquet as pq

    p, out, _, wall, peak, cpu = run_measured(tmp_path, "grid", "scale/grid_1m", "-j", "2", "-q")
    print(out)
    print(
        f"1,000,000 designs: {wall:.1f} s wall ({1e6 / wall:,.0f} designs/s), {cpu:.1f} CPU s "
        f"over the process tree, peak RSS {peak / 2**30:.2f} GiB"
    )
    assert p.returncode == 0, out
    path = next((tmp_path / "outputs" / "multirun").rglob("results.parquet"))
    assert pq.ParquetFile(path).metadata.num_rows == 1_000_000


@pytest.mark.slow
def test_decodelab_grid_bad_input_is_one_error_line(tmp_path):
    p, out, err, _, _, _ = run_measured(tmp_path, "grid", "model=llama3_1_8b,no_such_model", "-q")
    assert p.returncode == 2 and out == "" and err.startswith("error: model=no_such_model: no such option"), (
        err
    )
    p, out, err, _, _, _ = run_measured(tmp_path, "grid", "workload.no_such_field=1,2", "-q")
    assert p.returncode == 2 and out == "" and len(err.splitlines()) == 1 and "no_such_field" in err, err


def test_only_a_reference_to_the_swept_key_or_a_node_above_it_blocks_the_array_path():
    """A resolver that reads one hardware field (the TensorRT-LLM engine file's moe_mxfp4 reads
    hardware.peak_tflops_fp4) leaves a sweep of another hardware field on the array path; a
    reference to the swept field, to a node above it, or a relative one that resolves to it does not."""
    from decodelab.config.fields import interpolated as _interpolated

    key = "hardware.memory.hbm.bandwidth_gb_s"
    assert not _interpolated({"engine": {"m": "${below:${hardware.peak_tflops_fp4},1,a,b}"}}, key)
    assert _interpolated({"engine": {"m": "${below:${hardware.memory.hbm.bandwidth_gb_s},1,a,b}"}}, key)
    assert _interpolated({"x": "${hardware.memory}"}, key) and _interpolated({"x": "${hardware}"}, key)
    mem = {"hardware": {"memory": {"hbm": {"bandwidth_gb_s": 1, "copy": "${.bandwidth_gb_s}"}}}}
    assert _interpolated(mem, key)
    assert not _interpolated({"hardware": {"memory": {"hbm": {"c": "${.capacity_gib}"}}}}, key)
