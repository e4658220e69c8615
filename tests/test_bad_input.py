"""Every bad input is one line: a table of malformed inputs across every config group, every
subcommand, user YAML files and trace CSVs. For each: exit status 2, exactly one `error:` line on
stderr naming the field or file (and the allowed values, with a "did you mean" for near misses),
no traceback, and nothing recorded as ok.

The inputs run in this process (decodelab.apps.cli.main with argv, output captured); a few run
the installed console script in a subprocess, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import CONF, decodelab, run_in_process
from decodelab.apps.cli import COMMANDS

# --------------------------------------------------------------------------- files the inputs use


def _model_yaml(**fields) -> str:
    base = yaml.safe_load((CONF / "model" / "llama3_1_8b.yaml").read_text())
    base.update(fields)
    return yaml.safe_dump(base, sort_keys=False)


def _hardware_yaml(**fields) -> str:
    base = yaml.safe_load((CONF / "hardware" / "h100_sxm.yaml").read_text())
    base.update(fields)
    return yaml.safe_dump(base, sort_keys=False)


TRACE_HEADER = "arrival_s,prompt_len,output_len\n"

FILES = {
    # user config directory (hydra.searchpath / --config-dir)
    "uc/model/typo.yaml": _model_yaml(name="typo", n_kv_head=8),
    "uc/model/badtype.yaml": _model_yaml(name="badtype", d_model="4k"),
    "uc/model/badbool.yaml": _model_yaml(name="badbool", qkv_bias="maybe"),
    "uc/model/broken.yaml": "name: broken\nn_layers: [1, 2\n  d_model: : 3\n",
    "uc/model/tabs.yaml": "name: tabs\n\tn_layers: 2\n",
    "uc/hardware/typo_hw.yaml": _hardware_yaml(name="typo_hw", tensor_paralel=2),
    "uc/hardware/badtype_hw.yaml": _hardware_yaml(name="badtype_hw", n_chips="eight"),
    "uc/kv_policy/typo_kv.yaml": "name: snapkv\nbudgett: 1024\n",
    "uc/kv_policy/badtype_kv.yaml": "name: snapkv\nbudget: lots\n",
    "uc/workload/typo_wl.yaml": "name: decode\nbatchsize: 4\n",
    "uc/optimizations/broken_opt.yaml": "cuda_graphs: [true\n",
    "uc/engine/badtype_engine.yaml": "name: vllm\nmax_batch: many\n",
    # sweep and search-space files
    "badsweep.yaml": "hydra:\n  sweeper:\n    params: [1, 2\n   x: : y\n",
    "typosweep.yaml": "defaults:\n  - config\n  - _self_\nhydra:\n  sweeper:\n    params:\n      workload.batchsize: 1,2\n",
    "badspace.yaml": "params: [1, 2\n  x: : y\n",
    "listspace.yaml": "- 1\n- 2\n",
    "keyspace.yaml": "params:\n  workload.batch_size: range(1,4)\nobjectivs: [tok_s_aggregate]\n",
    # trace CSVs
    "neg_arrival.csv": TRACE_HEADER + "0,100,10\n-1,100,10\n",
    "zero_prompt.csv": TRACE_HEADER + "0,100,10\n1,0,10\n",
    "neg_prompt.csv": TRACE_HEADER + "0,-100,10\n",
    "zero_output.csv": TRACE_HEADER + "0,100,0\n",
    "neg_output.csv": TRACE_HEADER + "0,100,-5\n",
    "frac_prompt.csv": TRACE_HEADER + "0,100.5,10\n",
    "text_prompt.csv": TRACE_HEADER + "0,many,10\n",
    "nan_arrival.csv": TRACE_HEADER + "nan,100,10\n",
    "no_column.csv": "arrival_s,prompt_len\n0,100\n",
    "no_rows.csv": TRACE_HEADER,
    # result files
    "res_list/a/result.json": "[1, 2]",
    "res_trunc/a/result.json": '{"status": "ok", "metr',
    "res_string/a/result.json": '"ok"',
    "res_badmetric/a/result.json": json.dumps(
        {"status": "ok", "reason": "", "notes": [], "metrics": {"tpot_ms": "fast"}, "config": {}}
    ),
    "kv_trunc/a/result.json": '{"status": "ok", "metr',
    "kv_list/a/result.json": "[]",
    "empty_dir/.keep": "",
    # issue 40: inputs that gave a traceback or were silently accepted
    "afile": "not a directory\n",
    "uc/hardware/empty_hw.yaml": "",
    "uc/hardware/inf_hw.yaml": _hardware_yaml(name="inf_hw", peak_tflops_bf16=float("inf")),
    "uc/model/cyc.yaml": "defaults:\n  - cyc\nname: cyc\n",
    "uc/model/foo.yaml": _model_yaml(name="llama3_1_8b"),
    "uc/model/mamba_dense.yaml": _model_yaml(name="mamba_dense", state_bytes_per_layer=4096),
    "uc/model/topk.yaml": _model_yaml(name="topk", experts_per_token=4),
    "uc/model/empty_model.yaml": "",
    "uc/model/dupkey.yaml": _model_yaml(name="dupkey") + "n_layers: 3\n",
    "uc/model/envm.yaml": _model_yaml(name="envm", d_model="${oc.env:DECODELAB_UNSET_X}"),
    "uc/workload/nan_wl.yaml": "defaults:\n  - open_loop\n  - _self_\narrival_rate: .nan\n",
    "claim_metric.yaml": "defaults:\n  - config\n  - _self_\nhydra:\n  sweeper:\n    params:\n"
    "      model: llama3_2_1b\nclaim:\n  id: U1\n  figures:\n    - {name: f, metric: tok_s_usr, published: 1}\n",
    "bigsweep.yaml": "defaults:\n  - config\n  - _self_\nhydra:\n  sweeper:\n    params:\n"
    "      workload.batch_size: range(1,100001)\n      workload.prompt_len: range(1,100001)\n",
}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


# --------------------------------------------------------------------------- the table

# (argv, regexes the one error line must match). {D}: the work directory. Near misses must say
# "did you mean"; every line names the field or the file and what is allowed.
MEAN = r"did you mean '{}'"
SP = "hydra.searchpath=[file://{D}/uc]"
OFF = "tracking=off"

GROUP_OPTIONS = [
    ("model=gpt5", ["model=gpt5", "no such option", "llama3_1_8b"]),
    ("model=llama3_1_8", ["model=llama3_1_8", MEAN.format("llama3_1_8b"), "deepseek_r1"]),
    ("model=Llama3_1_70b", [MEAN.format("llama3_1_70b")]),
    ("hardware=tpu_v5", ["hardware=tpu_v5", "h100_sxm, h200_sxm, l40s, rtx_pro_6000_server, sn40l_node8"]),
    ("hardware=h100sxm", [MEAN.format("h100_sxm"), "dgx_a100"]),
    ("hardware=sn40l_rack", [MEAN.format("sn40l_rack16")]),
    ("kv_policy=lru", ["kv_policy=lru", "snapstream"]),
    ("kv_policy=snapkvv", [MEAN.format("snapkv")]),
    ("kv_policy=streamingllm", [MEAN.format("streaming_llm")]),
    ("optimizations=turbo", ["optimizations=turbo", "all, default, none"]),
    ("optimizations=defualt", [MEAN.format("default")]),
    ("workload=bogus", ["workload=bogus", "closed_loop"]),
    ("workload=closed_lop", [MEAN.format("closed_loop")]),
    ("engine=tensorrt", ["engine=tensorrt", "vllm"]),
    ("engine=vlm", [MEAN.format("vllm")]),
    ("tracking=mysql", ["tracking=mysql", "off, server, sqlite"]),
    ("tracking=sqlit", [MEAN.format("sqlite")]),
    ("speculative=eagle", ["speculative=eagle", "draft, mtp, none"]),
    ("coe=samba_co", [MEAN.format("samba_coe")]),
    ("model@speculative.draft=tiny", ["model=tiny", "llama3_2_1b"]),
]

WRONG_TYPES = [
    (f"workload.batch_size={v}", [f"workload.batch_size={v}", "expected an integer"])
    for v in ("nan", "inf", "-inf", "2.5", "abc", "1e12", "1e3", "[1,2]", "{a:1}", "''")
] + [
    ("workload.prompt_len=4k", ["workload.prompt_len=4k", "integer"]),
    ("workload.output_len=inf", ["workload.output_len=inf", "integer"]),
    ("workload.concurrency=1.5", ["workload.concurrency=1.5", "integer"]),
    ("workload.n_requests=many", ["workload.n_requests=many", "integer"]),
    ("workload.seed=0.5", ["workload.seed=0.5", "integer"]),
    ("workload.batch_fill=maybe", ["workload.batch_fill=maybe", "true or false"]),
    ("hardware.tensor_parallel=1.5", ["hardware.tensor_parallel=1.5", "integer"]),
    ("hardware.n_chips=eight", ["hardware.n_chips=eight", "integer"]),
    ("kv_policy.budget=abc", ["kv_policy.budget=abc", "integer"]),
    ("kv_policy.sinks=nan", ["kv_policy.sinks=nan", "integer"]),
    ("model.n_layers=nan", ["model.n_layers=nan", "integer"]),
    ("model.qkv_bias=perhaps", ["model.qkv_bias=perhaps", "true or false"]),
    ("optimizations.kernel_looping=maybe", ["optimizations.kernel_looping=maybe", "true or false"]),
    ("optimizations.cuda_graphs=enabled", ["optimizations.cuda_graphs=enabled", "true or false"]),
    ("optimizations.schedule_offloading=2.5", ["optimizations.schedule_offloading=2.5", "integer"]),
    ("engine.max_batch=lots", ["engine.max_batch=lots", "integer"]),
    ("engine.mixed_steps=sometimes", ["engine.mixed_steps=sometimes", "true or false"]),
    ("speculative.k=1.5", ["speculative.k=1.5", "integer"]),
    ("tracking.enabled=perhaps", ["tracking.enabled=perhaps", "true or false"]),
    ("quiet=loud", ["quiet=loud", "true or false"]),
]

MISSPELLED = [
    ("workload.batchsize=4", ["workload.batchsize", MEAN.format("batch_size"), "prompt_len"]),
    ("worklaod.batch_size=4", ["worklaod", MEAN.format("workload"), "hardware"]),
    ("tracking.enable=false", ["tracking.enable", MEAN.format("enabled"), "experiment"]),
    ("model.n_kv_head=8", ["model.n_kv_head", MEAN.format("n_kv_heads")]),
    ("hardware.tensorparallel=2", ["hardware.tensorparallel", MEAN.format("tensor_parallel")]),
    ("kv_policy.budgett=10", ["kv_policy.budgett", MEAN.format("budget")]),
    ("optimizations.kernel_loop=true", ["optimizations.kernel_loop", MEAN.format("kernel_looping")]),
    ("engine.max_batchsize=8", ["engine.max_batchsize", MEAN.format("max_batch")]),
    ("speculative.acceptence=0.9", ["speculative.acceptence", MEAN.format("acceptance")]),
    ("qiet=true", ["qiet", MEAN.format("quiet")]),
    ("workload.zzz=1", ["workload.zzz", "no such field", "batch_size"]),
]

SYNTAX = [
    ("workload.batch_size=[", ["workload.batch_size=[", "not a valid override", "KEY=VALUE"]),
    ("model=llama3_1_8b,llama3_1_70b", ["model=llama3_1_8b,llama3_1_70b", "-m"]),
    ("workload.batch_size=1,2", ["workload.batch_size=1,2", "-m"]),
    ("workload.batch_size=range(1,3)", ["workload.batch_size=range", "-m"]),
]

RANGES = [  # compose, but the values are out of range: one line from the design checks
    ("workload.batch_size=-1", ["workload.batch_size=-1", "> 0"]),
    ("workload.batch_size=0", ["workload.batch_size=0"]),
    ("workload.prompt_len=0", ["workload.prompt_len=0"]),
    ("workload.output_len=-3", ["workload.output_len=-3"]),
    ("workload.weight_dtype=fp3", ["workload.weight_dtype", "fp8"]),
    ("workload.kind=bogus", ["workload.kind", "closed_loop"]),
    ("hardware.tensor_parallel=0", ["hardware.tensor_parallel=0"]),
    ("kv_policy=snapkv kv_policy.budget=-5", ["kv_policy.budget=-5"]),
    ("optimizations.fusion=bogus", ["optimizations.fusion", "layer"]),
    ("optimizations.orchestration=bogus", ["optimizations.orchestration", "hardware"]),
    ("workload=closed_loop workload.concurrency=0", ["workload.concurrency=0"]),
    ("workload=open_loop workload.arrival_rate=0", ["workload.arrival_rate=0"]),
    (
        "model=deepseek_r1 hardware=sn40l_rack16 kv_policy=snapstream kv_policy.budget=10000000",
        ["kv_policy.budget=10000000", "max_context"],
    ),
]

FLAGS = [
    ("--config-dir /nonexistent/conf", ["--config-dir /nonexistent/conf", "no such directory"]),
    ("--config-name nope", ["--config-name nope", "configs: config"]),
    ("--config-name confg", [MEAN.format("config")]),
    ("--bogus", ["--bogus", "decodelab --help"]),
    ("swep model=llama3_1_8b", [MEAN.format("sweep")]),
    ("compre", [MEAN.format("compare")]),
]

MULTIRUN = [
    ("-m model=llama3_1_8b,gpt5", ["model=gpt5", "llama3_1_8b"]),
    ("-m hardware=h100_sxm,h100sxm", [MEAN.format("h100_sxm")]),
    ("-m workload.batch_size=1,nan", ["workload.batch_size=nan", "integer"]),
    ("-m workload.batch_size=1,2.5", ["workload.batch_size=2.5", "integer"]),
    ("-m workload.batchsize=1,2", ["workload.batchsize", MEAN.format("batch_size")]),
    ("-m worklaod.batch_size=1,2", ["worklaod", MEAN.format("workload")]),
    ("-m tracking.enable=false model=llama3_2_1b,llama3_2_3b", [MEAN.format("enabled")]),
    ("-m optimizations.kernel_looping=true,maybe", ["kernel_looping=maybe", "true or false"]),
    ("-m hydra/launcher=joblib workload.batch_size=1,abc", ["workload.batch_size=abc"]),
    ("-m kv_policy=full,lru", ["kv_policy=lru", "snapstream"]),
    ("-m workload.batch_size=[", ["workload.batch_size=[", "not a valid override"]),
    ("-m --config-dir {D}/nothing model=a,b", ["--config-dir", "no such directory"]),
]

USER_YAML = [
    (f"{SP} model=typo", ["uc/model/typo.yaml", "model.n_kv_head", MEAN.format("n_kv_heads")]),
    (f"{SP} model=badtype", ["uc/model/badtype.yaml", "model.d_model=4k", "integer"]),
    (f"{SP} model=badbool", ["uc/model/badbool.yaml", "model.qkv_bias", "true or false"]),
    (f"{SP} model=broken", ["uc/model/broken.yaml line", "broken YAML"]),
    (f"{SP} model=tabs", ["uc/model/tabs.yaml", "broken YAML"]),
    (f"{SP} hardware=typo_hw", ["uc/hardware/typo_hw.yaml", MEAN.format("tensor_parallel")]),
    (f"{SP} hardware=badtype_hw", ["uc/hardware/badtype_hw.yaml", "hardware.n_chips", "integer"]),
    (f"{SP} kv_policy=typo_kv", ["uc/kv_policy/typo_kv.yaml", MEAN.format("budget")]),
    (f"{SP} kv_policy=badtype_kv", ["uc/kv_policy/badtype_kv.yaml", "kv_policy.budget", "integer"]),
    (f"{SP} workload=typo_wl", ["uc/workload/typo_wl.yaml", MEAN.format("batch_size")]),
    (f"{SP} optimizations=broken_opt", ["uc/optimizations/broken_opt.yaml", "broken YAML"]),
    (f"{SP} engine=badtype_engine", ["uc/engine/badtype_engine.yaml", "engine.max_batch", "integer"]),
    ("--config-dir {D}/uc model=typo", ["uc/model/typo.yaml", MEAN.format("n_kv_heads")]),
    (f"-m {SP} model=llama3_2_1b,badtype", ["uc/model/badtype.yaml", "model.d_model"]),
    (f"-m {SP} model=broken,llama3_2_1b", ["uc/model/broken.yaml", "broken YAML"]),
    (f"{SP} model=typ", [MEAN.format("typo"), "badtype"]),
]

TRACES = [
    (f"workload=trace workload.trace={{D}}/{name}", [name, *expect])
    for name, expect in [
        ("neg_arrival.csv", ["arrival_s", ">= 0", "row 2"]),
        ("zero_prompt.csv", ["prompt_len", ">= 1", "row 2"]),
        ("neg_prompt.csv", ["prompt_len", ">= 1"]),
        ("zero_output.csv", ["output_len", ">= 1"]),
        ("neg_output.csv", ["output_len", ">= 1"]),
        ("frac_prompt.csv", ["prompt_len", "integer"]),
        ("text_prompt.csv", ["prompt_len", "many"]),
        ("nan_arrival.csv", ["arrival_s", "number"]),
        ("no_column.csv", ["output_len"]),
        ("no_rows.csv", ["rows"]),
        ("missing.csv", ["no such file"]),
    ]
]

SUBCOMMANDS = [
    ("sweep workload.batch_size=1,nan", ["workload.batch_size=nan", "integer"]),
    ("sweep model=gpt5", ["model=gpt5", "llama3_1_8b"]),
    ("sweep worklaod.batch_size=1,2", [MEAN.format("workload")]),
    ("sweep workload.batch_size=[", ["not a valid override"]),
    ("sweep {D}/badsweep.yaml", ["badsweep.yaml line", "broken YAML"]),
    ("sweep {D}/typosweep.yaml", ["workload.batchsize", MEAN.format("batch_size")]),
    ("sweep no_such_sweep", ["no_such_sweep", "c2_kernel_looping"]),
    ("sweep -j -3 model=llama3_2_1b", ["-j", "integer >= 1"]),
    ("sweep -j 0 model=llama3_2_1b", ["-j", "integer >= 1"]),
    ("sweep -j two model=llama3_2_1b", ["-j", "integer >= 1"]),
    ("sweep --top x", ["--top", "int"]),
    ("sweep tracking=off,sqlite model=llama3_2_1b", ["tracking", "one value"]),
    ("grid model=gpt5", ["model=gpt5", "llama3_1_8b"]),
    ("grid worklaod.batch_size=1,2", [MEAN.format("workload")]),
    ("grid workload.batch_size=1,nan", ["workload.batch_size=nan", "integer"]),
    ("grid no_such_sweep", ["no_such_sweep", "c2_kernel_looping"]),
    ("grid -j 0 model=llama3_2_1b", ["-j", "integer >= 1"]),
    ("grid tracking=off,sqlite model=llama3_2_1b", ["tracking", "one value"]),
    ("search {D}/badspace.yaml", ["badspace.yaml line", "broken YAML"]),
    ("search {D}/listspace.yaml", ["listspace.yaml", "mapping"]),
    ("search {D}/keyspace.yaml", ["objectivs", "objectives"]),
    ("search no_such_space", ["no_such_space"]),
    ("slo --tpot-ms 50 workload=open_loop model=gpt5", ["model=gpt5", "llama3_1_8b"]),
    ("slo --tpot-ms 50 --pct 95 workload=open_loop", ["--pct=95", "50, 90, 99"]),
    ("slo --tpot-ms -1 workload=open_loop", ["--tpot-ms=-1.0", "> 0"]),
    ("slo --tpot-ms 50 --tol 2 workload=open_loop", ["--tol=2.0", "(0, 1)"]),
    ("slo workload=open_loop", ["--ttft-ms", "at least one SLO"]),
    ("slo --tpot-ms 50 model=llama3_2_1b", ["workload.kind=static", "workload=open_loop"]),
    ("slo --tpot-ms 50 workload=open_loop workload.trace=x.csv", ["workload.trace=x.csv", "Poisson"]),
    ("slo --tpot-ms x", ["--tpot-ms", "float"]),
    ("sync {D}/nothing_here", ["nothing_here", "exist"]),
    ("sync {D}/res_list", ["res_list/a/result.json", "list"]),
    ("sync {D}/res_trunc", ["res_trunc/a/result.json", "unreadable"]),
    ("sync {D}/res_string", ["res_string/a/result.json", "str"]),
    ("sync {D}/res_badmetric", ["res_badmetric/a/result.json", "tpot_ms"]),
    ("sync tracking.bogus=1", ["tracking.bogus", "uri"]),
    ("sync model.name=x", ["model", "tracking.KEY=VALUE"]),
    ("sync --bogus", ["--bogus"]),
    ("kvplot {D}/kv_trunc", ["kv_trunc/a/result.json", "re-run"]),
    ("kvplot {D}/kv_list", ["kv_list/a/result.json"]),
    ("kvplot {D}/empty_dir", ["no ok result.json"]),
    ("kvplot {D}/nothing_here", ["nothing_here", "no such directory"]),
    ("compare tracking.bogus=1", ["tracking.bogus", "uri"]),
    ("compare --max many", ["--max", "int"]),
    ("compare tracking.uri=sqlite:///{D}/none/mlflow.db", ["none/mlflow.db", "no MLflow store"]),
    ("claims C99", ["C99"]),
    ("claims --bogus", ["--bogus"]),
    ("bench workload.batch_size=-1", ["workload.batch_size=-1"]),
    ("bench worklaod.batch_size=2", [MEAN.format("workload")]),
    ("coe-plot --bogus", ["--bogus"]),
    ("fidelity --bogus", ["--bogus"]),
    ("validate --bogus", ["--bogus"]),
]

# issue 40: the tracebacks (an output path under a file, a defaults cycle, an empty YAML, a
# deleted or null group, an unset environment variable, a claim naming an unknown metric)
TRACEBACKS = [
    ("hydra.run.dir={D}/afile/run", ["afile/run", "is a file, not a directory"]),
    ("-m hydra.sweep.dir={D}/afile/m workload.batch_size=1,2", ["afile/m", "is a file"]),
    ("sweep hydra.sweep.dir={D}/afile/s model=llama3_2_1b", ["afile/s", "is a file"]),
    ("grid hydra.sweep.dir={D}/afile/g workload.batch_size=1,2", ["afile/g", "is a file"]),
    ("slo --tpot-ms 50 workload=open_loop hydra.sweep.dir={D}/afile/o", ["afile/o", "is a file"]),
    (f"{SP} model=cyc", ["uc/model/cyc.yaml", "includes itself"]),
    (f"-m {SP} model=cyc,llama3_2_1b", ["uc/model/cyc.yaml", "includes itself"]),
    (f"{SP} hardware=empty_hw", ["uc/hardware/empty_hw.yaml", "hardware.name", "required"]),
    (f"{SP} model=empty_model", ["uc/model/empty_model.yaml", "required"]),
    ("~model", ["model is required", "model=OPTION", "llama3_1_8b"]),
    ("~hardware", ["hardware is required", "h100_sxm"]),
    ("model=null", ["model=null", "option name", "llama3_1_8b"]),
    ("hardware=null", ["hardware=null", "option name", "h100_sxm"]),
    ("workload.prompt_len=${oc.env:DECODELAB_UNSET_VAR}", ["DECODELAB_UNSET_VAR", "not set"]),
    ("sweep workload.prompt_len=${oc.env:DECODELAB_UNSET_VAR}", ["DECODELAB_UNSET_VAR", "not set"]),
    (f"{SP} model=envm", ["model.d_model", "DECODELAB_UNSET_X", "not set"]),
    (
        "claims {D}/claim_metric.yaml --no-track",
        ["claim_metric.yaml", "tok_s_usr", MEAN.format("tok_s_user")],
    ),
]

NONFINITE = [  # inf and nan refused wherever a number is read
    (f"{k}={v}", [f"{k}={v}", "not a finite number"])
    for k, v in [
        ("hardware.peak_tflops_bf16", "inf"),
        ("hardware.peak_tflops_bf16", "-inf"),
        ("hardware.peak_tflops_bf16", "nan"),
        ("hardware.memory.hbm.bandwidth_gb_s", "inf"),
        ("hardware.memory.hbm.capacity_gib", "nan"),
        ("hardware.bw_eff_max", "nan"),
        ("hardware.link_bw_gb_s", "inf"),
        ("hardware.launch_us", "inf"),
        ("hardware.price_per_chip_hour", "nan"),
        ("speculative.acceptance", "nan"),
    ]
] + [
    ("workload=open_loop workload.arrival_rate=inf", ["workload.arrival_rate=inf", "finite"]),
    ("workload=open_loop workload.arrival_rate=nan", ["workload.arrival_rate=nan", "finite"]),
    ("kv_policy=pyramidkv kv_policy.pyramid_beta=nan", ["kv_policy.pyramid_beta=nan", "finite"]),
    ("-m hardware.peak_tflops_bf16=100,inf", ["hardware.peak_tflops_bf16=inf", "finite"]),
    ("sweep hardware.peak_tflops_bf16=100,inf", ["hardware.peak_tflops_bf16=inf", "finite"]),
    ("grid hardware.peak_tflops_bf16=100,nan", ["hardware.peak_tflops_bf16=nan", "finite"]),
    (f"{SP} hardware=inf_hw", ["hardware.peak_tflops_bf16", "finite"]),
    (f"{SP} workload=nan_wl", ["workload.arrival_rate", "finite"]),
]

SILENT = [  # were accepted without a word
    ("+foo=bar", ["+foo:", "not a key of the config", "workload"]),
    ("+worklod.batch_size=2", ["+worklod", MEAN.format("workload")]),
    ("sweep +foo=1,2", ["+foo:", "not a key"]),
    ("-m +foo=1,2", ["+foo:", "not a key"]),
    (f"{SP} model=foo", ["uc/model/foo.yaml", "name: llama3_1_8b", "foo"]),
    (f"grid {SP} model=foo", ["uc/model/foo.yaml", "name: llama3_1_8b"]),
    (f"{SP} model=mamba_dense", ["model.state_bytes_per_layer=4096", "arch=hybrid"]),
    (f"{SP} model=topk", ["model.experts_per_token=4", "n_experts=0"]),
    ("model=mixtral_8x7b model.experts_per_token=9", ["model.experts_per_token=9", "n_experts=8"]),
    (f"{SP} model=dupkey", ["dupkey.yaml", "n_layers"]),
]

COUNTS = [  # a sweep is counted (a product, nothing listed) before it expands
    (
        "-m workload.batch_size=range(1,100001) workload.prompt_len=range(1,100001)",
        ["10,000,000,000 designs", "DECODELAB_MAX_DESIGNS"],
    ),
    (
        "sweep workload.batch_size=range(1,100001) workload.prompt_len=range(1,100001)",
        ["10,000,000,000", "--max-designs"],
    ),
    (
        "grid workload.batch_size=range(1,100001) workload.prompt_len=range(1,100001)",
        ["10,000,000,000", "--max-designs"],
    ),
    (
        "slo --tpot-ms 50 workload=open_loop workload.seed=range(0,100000) workload.n_requests=range(1,100001)",
        ["10,000,000,000"],
    ),
    ("sweep {D}/bigsweep.yaml", ["10,000,000,000 designs", "limit of 1,000,000"]),
    ("sweep --max-designs 3 workload.batch_size=1,2,4,8", ["4 designs", "limit of 3"]),
    ("grid --max-designs 1 workload.batch_size=1,2", ["2 designs", "limit of 1"]),
    ("sweep --max-designs 0 model=llama3_2_1b", ["--max-designs", "integer >= 1"]),
    ("grid --max-designs x model=llama3_2_1b", ["--max-designs", "integer >= 1"]),
]

DOMAIN = [  # compose, but out of range: one line from the design checks
    ("hardware.n_chips=-8 hardware.tensor_parallel=1", ["hardware.n_chips=-8", "> 0"]),
    ("hardware.peak_tflops_bf16=0", ["hardware.peak_tflops_bf16=0", "> 0"]),
    ("hardware.bw_eff_max=1.5", ["hardware.bw_eff_max=1.5", "(0, 1]"]),
    ("hardware.execution=tpu", ["hardware.execution", "gpu, dataflow"]),
    ("hardware.tensor_parallel=16", ["tensor_parallel=16", "n_chips"]),
    ("hardware.launch_us=-1", ["hardware.launch_us=-1", ">= 0"]),
    ("hardware.memory.hbm.capacity_gib=0", ["hardware.memory.hbm", "capacity_gib > 0"]),
    ("model.n_layers=0", ["model.n_layers=0", "> 0"]),
    ("model.n_heads=-4", ["model.n_heads=-4", "> 0"]),
    ("model.ffn_act=relu", ["model.ffn_act", "swiglu"]),
    ("model.arch=mamba", ["model.arch", "dense"]),
    ("model.n_kv_heads=5", ["model.n_kv_heads=5", "does not divide"]),
    ("workload.kv_dtype=fp2", ["workload.kv_dtype", "fp8"]),
    ("workload.act_dtype=int3", ["workload.act_dtype", "bf16"]),
    ("optimizations.schedule_offloading=0", ["optimizations.schedule_offloading=0", ">= 1"]),
    ("validate --csv {D}/missing.csv", ["missing.csv", "not a file"]),
    ("validate -j 0", ["-j", "integer >= 1"]),
    ("validate --launch bogus", ["--launch", "bogus"]),
    ("claims {D}/missing_claims.yaml", ["missing_claims.yaml", "no such sweep file"]),
    ("claims {D}/badsweep.yaml", ["badsweep.yaml", "not a claim sweep"]),
    ("kvplot --bogus", ["DIR", "required"]),
    ("bench --bogus", ["--bogus"]),
    ("fit-hardware --bogus", ["OPERATOR_DIR_OR_CSV", "required"]),
]

CASES = (
    TRACEBACKS
    + NONFINITE
    + SILENT
    + COUNTS
    + DOMAIN
    + GROUP_OPTIONS
    + WRONG_TYPES
    + MISSPELLED
    + SYNTAX
    + RANGES
    + FLAGS
    + MULTIRUN
    + USER_YAML
    + TRACES
    + SUBCOMMANDS
)
HYDRA_APP_FIELDS = ("model", "hardware", "workload", "kv_policy", "optimizations", "engine")


def test_the_table_is_large_enough():
    assert len(CASES) >= 100, len(CASES)
    assert len({c[0] for c in CASES}) == len(CASES)  # no input twice


def check(code: int, out: str, err: str, patterns, where: Path) -> None:
    text = f"exit {code}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
    assert "Traceback" not in out + err, text
    assert code == 2, text
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, text
    assert all(ln.startswith("error:") or not ln.strip() for ln in err.splitlines()), text
    for pat in patterns:
        assert pat in lines[0], f"{pat!r} not in {lines[0]!r}"
    for res in where.rglob("result.json"):  # nothing recorded as ok
        if "res_" in str(res) or "kv_" in str(res):
            continue
        assert json.loads(res.read_text())["status"] != "ok", res


@pytest.mark.parametrize("args, patterns", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(work, tmp_path, args, patterns):
    argv = [a.replace("{D}", str(work)) for a in args.split()]
    if (argv[0] not in COMMANDS or argv[0] in ("sweep", "grid")) and "tracking" not in args:
        argv.append(OFF)  # the Hydra app and sweeps: a store would be made before a late error
    code, out, err = run_in_process(tmp_path, argv)
    check(code, out, err, [p.replace("{D}", str(work)) for p in patterns], tmp_path)
    assert not (tmp_path / "outputs" / "mlflow.db").exists()  # nothing recorded
    assert not (tmp_path / "compare.csv").exists()


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize(
    "args, patterns",
    [
        (["model=gpt5"], ["model=gpt5", "llama3_1_8b"]),
        (["-m", "hydra/launcher=joblib", "workload.batch_size=1,nan"], ["workload.batch_size=nan"]),
        (["--config-dir", "/nonexistent", "model=llama3_2_1b"], ["--config-dir /nonexistent"]),
        (["sync", "{D}/res_list"], ["res_list/a/result.json"]),
    ],
    ids=["group", "multirun-joblib", "config-dir", "sync-list"],
)
def test_bad_input_from_the_console_script(work, tmp_path, args, patterns):
    """The same through `python -m decodelab.apps.cli` in a subprocess (SQLite tracking on)."""
    res = decodelab(tmp_path, *[a.replace("{D}", str(work)) for a in args], process=True)
    check(res.rc, res.out, res.err, [p.replace("{D}", str(work)) for p in patterns], tmp_path)
    assert not list((tmp_path / "outputs").rglob("result.json")) if (tmp_path / "outputs").exists() else True


@pytest.mark.slow
def test_sync_skips_a_bad_result_and_uploads_the_rest(work, tmp_path):
    """A result.json holding a list is named and skipped; the good one beside it is uploaded."""
    good = tmp_path / "runs"
    code, out, err = run_in_process(
        tmp_path, ["model=llama3_2_1b", "tracking=off", f"hydra.run.dir={good / 'ok'}"]
    )
    assert code == 0, err
    (good / "bad").mkdir()
    (good / "bad" / "result.json").write_text("[1]")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    code, out, err = run_in_process(
        tmp_path, ["sync", str(good), f"tracking.uri={uri}", "tracking.enabled=true"]
    )
    assert code == 2 and "1 uploaded" in out, out + err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert str(good / "bad" / "result.json") in line
    assert (good / "ok" / "mlflow_run_id").is_file()


# --------------------------------------------------------------------------- the Python API

API = [  # (function, overrides, keyword arguments, what the one-line ConfigError names)
    ("evaluate", ("model=gpt5",), {}, ["model=gpt5", "llama3_1_8b"]),
    ("evaluate", ("worklaod.batch_size=2",), {}, [MEAN.format("workload")]),
    ("sweep", ("model=llama3_2_1b",), {"jobs": 0}, ["jobs=0", "integer >= 1"]),
    ("sweep", ("model=llama3_2_1b",), {"jobs": 2.5}, ["jobs=2.5", "integer >= 1"]),
    ("grid", ("model=llama3_2_1b",), {"jobs": -1}, ["jobs=-1", "integer >= 1"]),
    ("slo", ("workload=open_loop",), {"jobs": 0, "tpot_ms": 50}, ["jobs=0"]),
    ("sweep", ("model=llama3_2_1b",), {"children": "bogus"}, ["children='bogus'", "pareto"]),
    ("sweep", ("model=llama3_2_1b",), {"backend": "spark"}, ["backend='spark'", "local, dask"]),
    ("sweep", ("model=gpt5",), {}, ["model=gpt5", "llama3_1_8b"]),
    ("sweep", ("hardware.peak_tflops_bf16=1,inf",), {}, ["hardware.peak_tflops_bf16=inf", "finite"]),
    (
        "sweep",
        ("workload.batch_size=range(1,100001)", "workload.prompt_len=range(1,100001)"),
        {},
        ["10,000,000,000"],
    ),
    ("grid", ("workload.batch_size=1,2",), {"max_designs": 0}, ["max_designs=0", ">= 1"]),
    ("grid", ("workload.batch_size=1,2,3",), {"max_designs": 2}, ["3 designs", "limit of 2"]),
    ("load_results", ("{D}/no_such_dir",), {}, ["no_such_dir", "no such file or directory"]),
    ("load_results", ("{D}/empty_dir",), {}, ["empty_dir", "no results"]),
]


@pytest.mark.parametrize("fn, args, kwargs, patterns", API, ids=[f"{c[0]}-{i}" for i, c in enumerate(API)])
def test_the_api_raises_one_config_error(work, tmp_path, monkeypatch, fn, args, kwargs, patterns):
    """The same inputs through the Python API: one decodelab.ConfigError, one line, nothing run."""
    import decodelab

    monkeypatch.chdir(tmp_path)
    with pytest.raises(decodelab.ConfigError) as e:
        getattr(decodelab, fn)(*[a.replace("{D}", str(work)) for a in args], **kwargs)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1, msg
    for pat in patterns:
        assert pat.replace("{D}", str(work)) in msg, msg
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_is_counted_as_hydra_expands_it():
    """sweepfile.check_count (a product of per-axis counts, range() by arithmetic) equals the
    number of jobs Hydra's basic sweeper lists."""
    from decodelab.config.sweepfile import check_count
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = ["a=range(1,10,3)", "b=range(0,1,0.25)", "c=x,y", "a=range(2,7)", "d=5", "e=choice(1,2,3)"]
    parsed = OverridesParser.create().parse_overrides(args)
    assert check_count(parsed) == len(BasicSweeper.split_arguments(parsed, None)[0]) == 5 * 4 * 2 * 3
