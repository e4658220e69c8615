"""Typed schema of the serving engine (`engine`: framework/modes/serving/scheduler.py, and its sampler,
framework/opcost/sampler.py); part of decodelab.core.schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class EngineSamplerConfig:
    """How an engine samples the next token when the request names no sampling parameters (the
    benchmark clients of the shipped rows send none). `model_defaults`: the engine then samples
    with the model's `generation_defaults` (its checkpoint's generation_config.json; vLLM's
    `generation_config: auto`), else greedily. `topk_topp`: the path a top-k / top-p request takes,
    `kernel` (a fused sampling kernel: costed as one pass over the FP32 logits, as a greedy step) or
    `sort` (a full sort of the batch x vocabulary logits and the masking passes around it, vLLM
    0.12's PyTorch path: costed by hardware.op_fit.sampler.sort)."""

    model_defaults: bool = False
    topk_topp: str = "kernel"


@dataclass
class EngineDpAttentionConfig:
    """What the engine changes in each group's settings under data-parallel attention (a serving
    run with hardware.attention_dp > 1, or an MLA model under mla_mapping=data, simulates one
    group: core/parallel.py serving_groups). `split_budget`: the prefill chunk and the step's token
    budget are the file's // groups; `reserve_gib` + `reserve_gib_per_group` x groups: more KV
    reserve per GPU (kv_mem_basis reserve); `admit_scale`: admit_ratio and admit_ratio_min x this."""

    split_budget: bool = False
    reserve_gib: float = 0.0
    reserve_gib_per_group: float = 0.0
    admit_scale: float = 1.0
    # TensorRT-LLM's attention_dp_config (llmapi/llm_args.py AttentionDpConfig: enable_balance false,
    # timeout_iters 50, batching_wait_iters 10): with `balance`, new prompts are prefilled only when
    # every group has one, after `balance_wait_iters` more iterations, or when `balance_timeout_iters`
    # iterations have passed since the last release (modes/serving/recv.py balance_rounds).
    balance: bool = False
    balance_timeout_iters: int = 50
    balance_wait_iters: int = 10


@dataclass
class EngineMtpConfig:
    """Speculative decoding inside the serving engine with the model's own multi-token-prediction
    module as the draft (framework/modes/serving/mtp.py; a model without one runs without it): each
    step verifies a decoding sequence's last token and `k` drafted ones and emits the accepted ones
    (tokens per step from model.mtp_acceptance). `k`: TensorRT-LLM speculative_config
    num_nextn_predict_layers, SGLang --speculative-num-steps; 0 = off. `k_attention_dp`: the k a
    launch uses under data-parallel attention instead (0 = k)."""

    k: int = 0
    k_attention_dp: int = 0


@dataclass
class EngineFrontendConfig:
    """The engine's serving front end on the path of every request (modes/serving/frontend.py): the
    HTTP server, prompt tokenization, the hand-over to the scheduler process and, for the first
    token, detokenization and streaming. A request reaches the scheduler `request_ms` + its prompt's
    text (prompt tokens x workload.prompt_bytes_per_token) / `tokenize_mb_s` after the client sends
    it; TTFT and end-to-end latency are timed from the send, as the benchmark client times them.
    request_ms 0: no fixed cost; tokenize_mb_s 0: tokenization not modelled. tokenize_serial: the
    server tokenizes one prompt after another, so a prompt sent while others are being tokenized
    waits for them (requests whose send is known in advance: an open loop's, a closed loop's first)."""

    request_ms: float = 0.0
    tokenize_mb_s: float = 0.0
    tokenize_serial: bool = False


@dataclass
class EngineConfig:
    """Serving-engine behaviour (framework/modes/serving/scheduler.py); used when workload.kind != static,
    but for the kernel fields (fused_add_norm, separate_rope), which every mode's forward pass takes."""

    name: str = "default"
    max_batch: int = 2048  # sequences in flight
    max_tokens_per_step: int = 8192  # token budget of one step (decode tokens + prefill chunks)
    chunk_size: int = 0  # prefill chunk per sequence and step (0: whole prompt in one step)
    order: str = "fcfs"  # fcfs | sjf (shortest prompt first)
    mixed_steps: bool = True  # fuse prefill chunks and decode tokens in one step
    graphs_decode_only: bool = True  # GPU: CUDA graphs replay decode-only steps; others launch eagerly
    batch_buckets: List[int] = field(default_factory=list)  # compiled batch sizes ([] = dynamic)
    # A decode batch larger than the largest bucket: eager (GPU engines run it without a CUDA graph,
    # unpadded, like a step with prefill work) | cap (static graphs: at most that many sequences run)
    graph_overflow: str = "eager"
    on_kv_full: str = "queue"  # queue (reserve a request's whole KV at admission) | preempt
    kv_mem_fraction: float = 0.9  # share of the HBM left after weights given to the KV pool
    kv_mem_basis: str = "free"  # free: of the HBM the weights leave | total: of the whole HBM, minus weights
    # | reserve: the HBM minus weights minus kv_reserve_gib + kv_reserve_gib_per_gpu x (tp x pp) (SGLang)
    # Models with linear layers (Gated DeltaNet, Mamba-2: components/models/linear_attn.py): the sequences'
    # conv + recurrent states live in a pool of their own taken from the KV pool: > 0, SGLang's
    # mamba_full_memory_ratio (state pool / KV pool = this); 0, one state per sequence the engine may run
    # (max_batch, held from start-up: TensorRT-LLM's MambaHybridCacheManager) unless state_in_kv_pool
    state_pool_ratio: float = 0.0
    # The states are blocks of the KV pool itself, taken by each sequence the engine holds and freed with
    # it (vLLM V1's hybrid KV cache manager): a sequence's pool share is its KV plus its state
    state_in_kv_pool: bool = False
    kv_reserve_gib: float = 0.0
    kv_reserve_gib_per_gpu: float = 0.0
    # The engine's start-up memory profile (core/profile_reserve.py; kv_mem_basis free and total):
    # before sizing the KV pool it runs one forward pass of max_tokens_per_step dummy tokens (and,
    # if profile_sampler_bytes > 0, samples min(max_tokens_per_step, max_batch) rows with top-k /
    # top-p), and the peak of those activations is not given to the pool. profile_sampler_bytes:
    # bytes held per vocabulary entry of a sampled row at the sampler's peak.
    profile_reserve: bool = False
    profile_sampler_bytes: float = 0.0
    kv_block_tokens: int = 32  # KV allocated in blocks of this many tokens
    # The activations MXFP4 expert weights (gpt-oss) run with, which picks the measured MoE kernel
    # (opcost/moe.py): w4a16 (BF16) | w4a8 (MXFP8; TensorRT-LLM's default MoE backends on Blackwell)
    moe_mxfp4: str = "w4a16"
    # The MoE backend (TensorRT-LLM's moe_config.backend), which picks the measured MoE kernel where a
    # table times several (opcost/moe_blocks.py KERNELS): trtllm (TRTLLM-gen) | cutlass | deepgemm | triton (vLLM's
    # and SGLang's Triton fused MoE) | marlin (vLLM's Marlin W4A16 MoE) | "" (every kernel the table holds, their
    # median);
    # moe_backend_attention_dp: the backend under attention DP
    # ("" = moe_backend), as InferenceX's DeepSeek NVFP4 scripts switch TRTLLM to CUTLASS;
    # moe_backend_fp8_block: the backend of block-scaled FP8 weights where a launch sets another one for
    # them ("" = the above), as InferenceX's TensorRT-LLM 1.1 DeepSeek FP8 scripts DEEPGEMM, vLLM 0.19's fp8
    # oracle on SM100 trtllm (FlashInfer TRTLLM-gen) and a launch that removed FlashInfer triton
    moe_backend: str = ""
    moe_backend_attention_dp: str = ""
    moe_backend_fp8_block: str = ""
    # The kernel of block-scaled FP8 dense GEMMs (opcost/gemm.py): "" (the engine's own, its table's:
    # DeepGEMM in SGLang's) | trtllm (TensorRT-LLM's small-M path, which SGLang runs on Blackwell as
    # FlashInfer's TRTLLM-gen GEMM where a launch turns DeepGEMM off; the chip's table,
    # hardware.op_tables.gemm)
    gemm_backend_fp8_block: str = ""
    # KV of sliding-window layers (hybrid models: model.layer_pattern, model.sliding_window), what a
    # sliding layer's token takes from the pool: window (only the last `sliding_window` tokens are
    # kept: vLLM's hybrid KV-cache manager) | full (as a full-attention layer's) | ratio (a pool of
    # swa_full_tokens_ratio x the full layers' tokens: SGLang's SWA pool). Decode and prefill
    # attention read and compute over the window in every case (modes/serving/parts.py).
    swa_kv: str = "window"
    swa_full_tokens_ratio: float = 0.8
    # Host (CPU) work of the engine's scheduler loop, per iteration: host_iter_us + host_per_req_us
    # x sequences in the step (scheduling, input preparation, sampling, output handling). Without
    # `overlap` the GPU idles for all of it every step; with an overlap scheduler (the CPU prepares
    # step n+1 while the GPU runs step n) only the part exceeding the step's GPU time is exposed.
    # host_iter_us null: the hardware's host_step_us (the static-decode host cost), per step, no overlap.
    overlap: bool = False
    # The overlap scheduler's one-step lookahead: the CPU schedules step n+1 when the GPU starts
    # step n, so a request arriving while step n runs first enters step n+2 (TensorRT-LLM
    # PyExecutor._executor_loop_overlap; SGLang event_loop_overlap). Only with `overlap`.
    lookahead: bool = False
    host_iter_us: Optional[float] = None
    host_per_req_us: float = 0.0
    # Host time the engine's eager forward spends per kernel call (framework dispatch: Python module
    # code, op dispatch, launch) in a step that replays no CUDA graph (GPU steps with prefill work
    # under graphs_decode_only; every step with optimizations.cuda_graphs=false). The step's
    # kernel calls x this is host work of that step, like host_iter_us: with `overlap` only the
    # part over the GPU step is exposed, without it the part over the forward's own GPU time.
    # null: each call's dispatch is hardware.launch_us. Static decode with cuda_graphs=false uses the same
    # figure (components/execution/gpu.py eager_dispatch_us): the step lasts max(dispatch, its kernels).
    eager_launch_us: Optional[float] = None
    # Kernels the host launches for one call of an op in such a step, where the engine's op launches several
    # (components/execution/gpu.py eager_kernels): keys are op names, `moe_block` (the head call of a
    # routed-expert block) and `shared_experts` (the kernels of a layer's shared expert that the block's ops
    # cost, launched beside them); values >= 1, unlisted ops 1. {} = one kernel per call.
    eager_kernels: Dict[str, float] = field(default_factory=dict)
    # The kernels of the engine's decoder layer (components/models/dense.py), in every mode (its
    # forward pass) of a GPU design (a dataflow chip's are its execution model's): fused_add_norm,
    # the residual add after the MLP runs inside the next layer's input RMSNorm (one kernel per
    # layer fewer than the Kernel Looping paper's ~10); separate_rope, RoPE is a kernel of its own
    # after the q/k norm rather than inside the attention call (or a fused q/k-norm + RoPE kernel).
    # GQA/MHA attention; MLA keeps its own RoPE.
    fused_add_norm: bool = False
    separate_rope: bool = False
    # The launch turns on the engine's all-reduce + residual add + RMSNorm kernel (SGLang
    # --enable-flashinfer-allreduce-fusion, vLLM's pass_config fuse_allreduce_rms): under tensor
    # parallelism without data-parallel attention each layer's norms ride in its all-reduces, as where
    # the model's engine code always fuses them (model.allreduce_norm_engines; components/models/dense.py).
    allreduce_norm: bool = False
    # Synchronisation at every kernel boundary of a GPU step beyond what the cost source holds (a
    # fitted law's in-graph t0, a table's time, or hardware.sync_us): a stack whose kernels do not
    # overlap each launch with the previous kernel's tail pays it at every one of its ~10 kernels
    # per layer (components/execution/gpu.py). 0 in every measured engine's file; conf/engine/trtllm_2024.yaml.
    boundary_sync_us: float = 0.0
    # Admission reserve (framework/modes/serving/admission.py; SGLang's new_token_ratio): a request
    # is admitted only if its prompt + min(output, admit_clip_tokens) fits the free KV minus
    # ratio x the clipped output the running sequences still expect; the ratio starts at
    # admit_ratio, decays to admit_ratio_min over admit_ratio_decay_steps decode steps, is
    # re-estimated after a preemption with admit_retract_steps. 0 = off. Needs on_kv_full=preempt.
    admit_ratio: float = 0.0
    admit_ratio_min: float = 0.0
    admit_ratio_decay_steps: int = 600
    admit_clip_tokens: int = 4096
    admit_retract_steps: int = 20
    # SGLang's --scheduler-recv-interval (framework/modes/serving/recv.py): the scheduler reads new
    # requests only on a polling round, when the summed weights of the steps since the last poll
    # reach it (1 per decode step, 1000 per step with prefill work); an engine that ran no step polls
    # at once. 1 = every round (SGLang's default; every other engine).
    recv_interval: int = 1
    # TensorRT-LLM's batch waiting (framework/modes/serving/recv.py batch_held): a step that would run
    # prompts next to decoding sequences leaves them out until batch_wait_timeout_iters such steps have
    # been held or its tokens reach batch_wait_max_tokens_ratio x max_tokens_per_step; no wait under
    # attention DP. 0 and 0.0 = off (TensorRT-LLM's defaults; either at 0 stops every wait).
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # Which measured engine this file describes (decodelab validate maps a CSV's engine and
    # engine_version columns to it): family (trtllm | vllm | sglang | ...) and versions ([] = any).
    family: str = ""
    versions: List[str] = field(default_factory=list)
    # The release this design runs ("" = none named): its kernel tables are those of the release the
    # chip file lists nearest it (hardware.op_tables.by_version; opcost/versions.py); validate sets it
    # from a row's engine_version
    version: str = ""
    sampler: EngineSamplerConfig = field(default_factory=EngineSamplerConfig)  # opcost/sampler.py
    dp_attention: EngineDpAttentionConfig = field(default_factory=EngineDpAttentionConfig)
    mtp: EngineMtpConfig = field(default_factory=EngineMtpConfig)  # modes/serving/mtp.py
    frontend: EngineFrontendConfig = field(default_factory=EngineFrontendConfig)  # modes/serving/frontend.py
