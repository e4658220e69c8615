"""Typed schemas of every config group, as plain dataclasses (decodelab.config.schema registers
them in Hydra's ConfigStore).

The primary config (`conf/config.yaml`) lists `decodelab_schema` first in its defaults, so
every group file is merged into a typed node: an unknown field or a wrong type fails at
composition. Group files therefore hold only numbers and names.

Units are in the field names: `_gib` = 2**30 bytes, `_gb_s` = 1e9 bytes/s, `_us` = microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from decodelab.core.schema_oplaw import OpFitConfig, OpTablesConfig
from decodelab.core.schema_engine import EngineConfig
from decodelab.core.schema_model import ModelConfig


@dataclass
class MemoryTier:
    """One memory tier of a chip, keyed by its name in `hardware.memory` (sram | hbm | ddr | host)."""

    capacity_gib: float = MISSING  # per chip
    bandwidth_gb_s: float = MISSING  # per chip, peak


TIER_ORDER = ("sram", "hbm", "ddr", "host")  # nearest first: the order of kernel arrays


def memory_tiers(hw) -> list:
    """The chip's memory tiers as objects with `name`, `capacity_gib`, `bandwidth_gb_s`, in
    TIER_ORDER (unknown names last, as given: the validation rejects them)."""
    mem = hw.memory
    names = [n for n in TIER_ORDER if n in mem] + [n for n in mem if n not in TIER_ORDER]
    return [
        SimpleNamespace(name=n, capacity_gib=mem[n].capacity_gib, bandwidth_gb_s=mem[n].bandwidth_gb_s)
        for n in names
    ]


@dataclass
class HardwareConfig:
    """One system: `n_chips` identical chips. All rates are per chip."""

    name: str = MISSING
    execution: str = MISSING  # execution model: gpu | dataflow
    n_chips: int = 1
    tensor_parallel: int = 1  # chips one model replica is sharded over
    mla_mapping: str = "replicated"  # MLA attention across the tp chips: replicated | context |
    # data (components/models/mla_map.py)
    moe_mapping: str = "tp"  # routed experts across the tp chips: tp (split) | ep (whole experts)
    # | a2a (ep with all-to-all dispatch); moe_ep: expert-parallel groups of ep / a2a, each expert's
    # columns split over the tp / moe_ep chips of its group (0 = tp groups of one chip;
    # components/models/experts.py)
    moe_ep: int = 0
    # Data-parallel attention (components/models/attn_dp.py): the tp chips run attention in this
    # many groups of tp / attention_dp chips, each for its own sequences; FFN/MoE over all tp chips
    attention_dp: int = 1
    # Pipeline parallelism (framework/core/pipeline.py, docs/model.md, "Parallelism beyond tensor
    # parallelism"): the decoder layers split over this many stages, each a group of tensor_parallel
    # chips (tp x pp chips a replica)
    pipeline_parallel: int = 1
    pp_link_bw_gb_s: float = 0.0  # inter-stage link per chip, one direction; 0 = link_bw_gb_s
    p2p_latency_us: float = -1.0  # one stage-to-stage send; < 0 = collective_latency_us
    peak_tflops_bf16: float = MISSING
    peak_tflops_fp8: float = 0.0  # 0: no FP8 units, FP8 runs at the BF16 rate
    memory: Dict[str, MemoryTier] = field(default_factory=dict)  # tiers by name
    # Interconnect used by tensor-parallel collectives
    link_bw_gb_s: float = 0.0  # per chip, one direction
    collective_latency_us: float = 0.0
    # The network between NVLink domains (core/parallel.py collective_link): chips one NVLink domain
    # joins (0 = all of them), the scale-out bandwidth per chip and direction (its NIC) and the latency
    # of a small collective between domains, one chip each (a collective across domains adds it to
    # twice collective_latency_us, the phases within each domain)
    nvlink_domain: int = 0
    scale_out_bw_gb_s: float = 0.0
    scale_out_latency_us: float = 0.0
    host_link_gb_s: float = 0.0  # host <-> chip copies
    backing_copy_gb_s: float = (
        0.0  # bulk copies backing tier (first ddr/host tier) -> HBM (expert switching); 0 = none
    )
    # Achieved fraction of peak as a function of an operator's size:
    # eff(x) = eff_max * x / (x + x_half)
    bw_eff_max: float = 1.0
    bw_half_mb: float = 0.0  # bytes moved (MB) at which half of bw_eff_max is reached
    compute_eff_max: float = 1.0
    compute_half_gflop: float = 0.0
    attn_compute_eff_max: float = 0.0  # attention (query, key) FLOPs: fraction of peak; 0 = compute_eff_max
    # Sustained clocks (core/kernel.py sustained): compute-bound time of a step beyond
    # sustained_after_ms runs at this fraction of the burst rate the operator tables and
    # efficiencies were measured at (a power governor lowering the clock); 1 = none
    sustained_compute_ratio: float = 1.0
    sustained_after_ms: float = 0.0
    # Per kernel call overheads
    launch_us: float = 0.0  # host/software launch of one kernel call
    sync_us: float = 0.0  # synchronisation at a kernel boundary
    fill_drain_us: float = 0.0  # pipeline fill + drain of one call (dataflow)
    route_fill_us: float = 0.0  # dataflow: pipeline drain + refill at an MoE routing decision
    hw_launch_us: float = 0.0  # launch cost when the chip's own orchestrator launches
    repeat_launch_us: float = -1.0  # dataflow, software: launch of a repeated identical fused
    # layer call (program already loaded); < 0 = launch_us
    sample_interval_us: float = 0.0  # dataflow: gap between consecutive samples leaving a fused
    # layer (batch barrier: (B - 1) x this per layer)
    loop_buffer_slots: int = 0  # dataflow BatchStreaming: samples the loop buffer holds
    host_step_us: float = 0.0  # host scheduling per decode step (sampling, bookkeeping)
    # Operator cost law: roofline (the efficiencies above for every op) | fitted (per-shape
    # laws of `op_fit` for the GEMM, attention and collective ops they cover; gpu execution)
    op_model: str = "roofline"
    op_fit: OpFitConfig = field(default_factory=OpFitConfig)
    op_tables: OpTablesConfig = field(default_factory=OpTablesConfig)  # measured tables (opcost/gemm.py)
    source: str = ""
    # FP4 units, power and price (framework/core/cost.py, docs/model.md "Cost and energy")
    peak_tflops_fp4: float = 0.0  # 0: no FP4 units, FP4 weights are dequantized (FP8 or BF16 rate)
    tdp_w: float = 0.0  # board power at full load, per chip (0: energy not reported)
    idle_w: float = 0.0  # power of a powered, waiting chip
    price_per_chip_hour: float = 0.0  # any currency; 0: cost per token not reported


@dataclass
class KVPolicyConfig:
    """KV-cache policy (components/kv_policy/, docs/kv_policies.md). Token counts are per
    sequence and per KV head (per layer for MLA's shared latent)."""

    name: str = "full"
    sinks: int = 0  # attention-sink tokens kept (StreamingLLM, SnapStream)
    window: int = 0  # recent tokens kept: StreamingLLM window, H2O recent, SnapStream ring
    budget: int = 0  # prompt tokens kept: SnapKV/PyramidKV (mean per layer), H2O heavy
    # hitters, SnapStream top-K; Quest: tokens read per step
    params: Dict[str, Any] = field(default_factory=dict)
    obs_window: int = 0  # SnapKV-style scoring: the last w prompt queries score the prompt
    budget_includes_window: bool = True  # SnapKV: budget = top-(budget - w) + the w window tokens
    pooling: str = "avg"  # avg | max | none: 1-D pooling of the scores before top-k
    pool_kernel: int = 1
    granularity: str = "kv_head"  # query_head | kv_head | layer: who shares one selection
    pyramid_beta: float = 0.0  # PyramidKV: last layer keeps budget / beta (first 2*budget - that)
    page_size: int = 0  # Quest: tokens per page
    top_k_pages: int = 0  # Quest: pages read per step (budget = top_k_pages * page_size)
    dense_layers: int = 0  # Quest: first layers read the whole cache


@dataclass
class OptimizationsConfig:
    """Execution options. Each names the cost term it changes (see docs/model.md, "Operators and
    kernel calls")."""

    name: str = "baseline"
    cuda_graphs: bool = False  # GPU: removes per-kernel launch, keeps sync
    fusion: str = "auto"  # auto | none | layer  (dataflow: one call per decoder layer)
    orchestration: str = "auto"  # auto (hardware where the chip can) | software | hardware
    kernel_looping: bool = False  # dataflow: fill/drain/launch once per token, not per layer
    schedule_offloading: int = 1  # dataflow: M decode steps per host round trip (1 = off)
    batch_streaming: bool = False  # dataflow + kernel_looping: samples enter layer n+1 without
    # waiting for the whole batch (loop buffer)


@dataclass
class SpecPairConfig:
    """Acceptance of one (target, draft) pair: one value per pair for every figure it appears in
    (conf/speculative/draft.yaml `pairs`, keyed `<target>__<draft>`; components/speculative.py)."""

    acceptance: float = 0.0  # i.i.d.-equivalent per-token acceptance alpha (0: not given)
    ar: Dict[str, float] = field(default_factory=dict)  # measured AR(k) by "k<k>", e.g. {k8: 0.633}
    source: str = ""


@dataclass
class SpeculativeConfig:
    """Speculative decoding: a draft proposes k tokens, the target verifies k+1 in one pass."""

    enabled: bool = False
    method: str = "draft"  # draft (a separate draft model) | mtp (target's MTP heads)
    k: int = 4  # lookahead: tokens drafted per round
    acceptance: float = 0.8  # per-token acceptance probability alpha (i.i.d. model)
    ar: float = 0.0  # > 0: the Dataflow paper's AR = (a + 1) / (k + 1), used instead
    # pairs: the pair's own value (pairs[<target>__<draft>]) when the table has the pair, else
    # acceptance / ar above; config: always acceptance / ar above (what-ifs)
    acceptance_from: str = "pairs"
    pairs: Dict[str, SpecPairConfig] = field(default_factory=dict)
    # Draft placement: the draft's own tensor-parallel degree (0 = auto: the target's, or the
    # largest degree below it that divides the draft's heads) and how many copies of it run side
    # by side (each drafts batch / copies sequences on its own draft_tp chips)
    draft_tp: int = 0
    draft_copies: int = 1
    draft: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class LengthDistConfig:
    """A request-length distribution (framework/modes/serving/workload.py). The centre is the
    workload's prompt_len / output_len."""

    kind: str = "fixed"  # fixed | uniform | lognormal | trace (lengths from the trace file)
    low: int = 0  # uniform: [low, high]; lognormal: clip bounds (0 = 1 / max_context)
    high: int = 0
    sigma: float = 0.0  # lognormal: std-dev of log(length); mean length = prompt_len/output_len


@dataclass
class WorkloadConfig:
    name: str = "decode"
    batch_size: int = 1
    prompt_len: int = 4096
    output_len: int = 128
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    static_graph: bool = False  # true: batch and KV slot from the model's static graph menu (the
    # smallest max sequence >= prompt + output; the largest batch compiled for it)
    kv_placement: str = "hbm"  # hbm: KV in HBM only (else infeasible) | spill_ddr: the rest
    # in DDR, read at DDR bandwidth (components/placement.py)
    pp_microbatches: int = 0  # pipeline parallelism: micro-batches a step's batch is split into
    # (0 = hardware.pipeline_parallel; core/pipeline.py)
    batch_fill: bool = False  # true: batch_size = max_batch, the most sequences whose KV
    # (at the policy's slot size) fits in HBM next to the weights
    # Serving (framework/modes/serving/simulate.py); kind=static is the single static batch above.
    kind: str = "static"  # static | closed_loop | open_loop
    concurrency: int = 1  # closed_loop: clients, each sends its next request when the last ends
    n_requests: int = 0  # requests simulated (0: 10 x concurrency closed loop, 1000 open loop)
    arrival_rate: float = 0.0  # open_loop: Poisson arrivals per second (ignored with a trace)
    trace: str = ""  # open_loop: CSV of arrival_s, prompt_len, output_len
    think_ms: float = 0.0  # closed_loop: client delay between a response and its next request
    # bytes of prompt text per prompt token, what the engine's tokenizer reads (engine.frontend):
    # English prose 3.9; prompts of random vocabulary ids (benchmark_serving's random dataset) the
    # vocabulary's mean token length, ~6.5 (sources: conf/workload/closed_loop.yaml)
    prompt_bytes_per_token: float = 3.9
    # closed_loop benchmark client (aiperf / genai-perf, docs/validation.md, "How a row runs"):
    # warm-up requests run first and are excluded from the metrics; warmup_drain: the client waits
    # until they all end and then releases `concurrency` requests at once (aiperf), so the measured
    # phase starts from an idle engine; false: the measured requests follow the warm-up in the same closed loop.
    warmup_requests: int = 0
    warmup_drain: bool = True
    prompt_dist: LengthDistConfig = field(default_factory=LengthDistConfig)
    output_dist: LengthDistConfig = field(default_factory=LengthDistConfig)
    seed: int = 0


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str = "sqlite:///outputs/mlflow.db"
    artifact_root: str = "outputs/mlartifacts"
    experiment: str = "decodelab"
    plots: bool = True
    step_csv: bool = True
    resume: bool = True  # multiruns and `decodelab sweep` skip designs already recorded
    # single runs: record in MLflow from a detached `decodelab sync` process, so the command
    # returns before MLflow loads (~2 s). null = auto: only when stdout is a terminal
    background: Optional[bool] = None


@dataclass
class CoEConfig:
    """Composition of Experts (Samba-CoE, SN40L paper Sec. II and VI-C; components/coe.py,
    framework/modes/coe.py): a router picks one expert per prompt, then each (prompt, expert) pair
    runs in turn, copying the expert into HBM unless it is resident."""

    enabled: bool = False
    n_experts: int = 150
    expert: ModelConfig = field(default_factory=ModelConfig)
    router: ModelConfig = field(default_factory=ModelConfig)
    routing: str = "uniform"  # uniform | zipf | list
    zipf_s: float = 1.0  # routing=zipf: P(expert i) ~ 1 / (i + 1)^s
    weights: List[float] = field(default_factory=list)  # routing=list: relative use of each expert
    batch_size: int = 8  # prompts per batch; the router runs once per batch
    prompt_len: int = 512  # tokens per prompt
    output_len: int = 20  # output tokens per prompt
    hbm_cache: str = "batch"  # batch (HBM holds the batch's experts) | lru (all free HBM, LRU)
    n_batches: int = 64  # batches simulated after warm-up
    seed: int = 0


@dataclass
class DisaggPoolConfig:
    """One pool of a disaggregated deployment (framework/modes/serving/disagg.py): `instances`
    copies of one engine, each sharded over `tensor_parallel` chips of `hardware` (null: the
    run's `hardware`; pick another with `+hardware@disagg.<pool>.hardware=<name>`)."""

    hardware: Optional[HardwareConfig] = None
    tensor_parallel: int = 1  # chips of one instance (as hardware.tensor_parallel)
    instances: int = 1
    # The instance's parallel split beyond tensor_parallel, as hardware's fields of the same names:
    # data-parallel attention groups (each its own scheduler and share of the requests) and the
    # routed experts' mapping and expert-parallel groups ("" = the run's hardware.moe_mapping and
    # moe_ep; with a mapping set, moe_ep is the pool's)
    attention_dp: int = 1
    moe_mapping: str = ""
    moe_ep: int = 0
    # Sequences one attention group of an instance holds at once (engine.max_batch of the pool's
    # engine; 0 = the engine's), e.g. a decode batch cap
    max_batch: int = 0
    # Engine fields set for this pool's instances only (e.g. {overlap: false, max_tokens_per_step: 9692})
    engine: Dict[str, Any] = field(default_factory=dict)


@dataclass
class KVLinkConfig:
    """The link a request's KV crosses from its prefill instance to its decode instance: every
    GPU of a pool has its own NIC, so the ranks of a pool move their shards in parallel."""

    bw_gb_s: float = 50.0  # per chip, one direction
    latency_us: float = 0.0  # per transfer (setup + first byte)
    source: str = ""


@dataclass
class DisaggConfig:
    """Disaggregated prefill/decode serving (docs/model.md, "Disaggregated serving"): a prefill
    pool runs the prompts, the KV crosses `kv_link`, a decode pool generates. enabled=false
    (conf/disagg/none.yaml): one pool of `hardware` runs both phases, as without this group."""

    name: str = "none"
    enabled: bool = False
    routing: str = "round_robin"  # request k -> instance k mod instances, in each pool
    prefill: DisaggPoolConfig = field(default_factory=DisaggPoolConfig)
    decode: DisaggPoolConfig = field(default_factory=DisaggPoolConfig)
    kv_link: KVLinkConfig = field(default_factory=KVLinkConfig)
    source: str = ""


@dataclass
class DecodelabConfig:
    model: ModelConfig = MISSING
    hardware: HardwareConfig = MISSING
    kv_policy: KVPolicyConfig = MISSING
    optimizations: OptimizationsConfig = MISSING
    workload: WorkloadConfig = MISSING
    tracking: TrackingConfig = MISSING
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    coe: CoEConfig = field(default_factory=CoEConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    disagg: DisaggConfig = field(default_factory=DisaggConfig)
    quiet: bool = False
    claim: Dict[str, Any] = field(default_factory=dict)  # set by sweeps/ files that pin a claim
