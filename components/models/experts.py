"""Mixture-of-experts FFN of a decoder layer (used by layers.py): the gate (router GEMM), the
top-k routing decision, the chosen experts' weights and the shared experts. Tensor parallel
`tp`: every expert's FFN columns are split `tp` ways (docs/model.md, "MoE decode step").

- Weights read per step: a step whose batch holds n tokens reads the weights of the experts
  those tokens activate. With top-k routing of each token to k of E experts, uniform and
  independent across tokens, an expert is missed by one token with probability 1 - k/E, so the
  expected number of distinct experts is E (1 - (1 - k/E)^n) (= k at n = 1, -> E for large n);
  shared experts are always read; every expert is stored (Op.resident_bytes).
- `first_dense_layers` layers use the dense FFN (ffn_dim), leading or interleaved: only their count
  matters; `ffn_free_layers` have none (Nemotron-H's attention blocks). All decoder-layer ops
  repeat n_layers times (a fused dataflow call covers one decoder layer), so the FFN ops carry the
  layer average (n_dense * dense + n_moe * moe) / n_layers, which is exact summed over the layers.
- The routing decision (`route`, one per MoE layer: scores -> top-k, e.g. DeepSeek-V3's
  sigmoid + group-limited top-8) is a data-dependent control point: which expert weights the
  rest of the layer reads is known only once it has run (Op.route_point). On a GPU it is one
  more kernel per MoE layer (vLLM / SGLang run a top-k kernel between the router GEMM and the
  grouped expert GEMM). On a dataflow chip the expert weight stream cannot be prefetched across
  it: the layer's pipeline drains at the decision and refills with the chosen experts, paid per
  MoE layer even inside a looped layer kernel (components/execution/dataflow.py,
  `hardware.route_fill_us`).
- Expert placement across the tp chips (`hardware.moe_mapping`): `tp` (default) splits every
  expert's columns tp ways, so a chip reads 1/tp of each activated expert: perfectly balanced.
  `ep` (expert parallelism; SGLang/vLLM `--enable-expert-parallel` / `--ep-size`) gives each chip
  E/tp whole experts; with attention tensor-parallel every chip already holds every token's
  hidden state, so the experts' outputs are reduced across chips as under `tp` (same all-reduce)
  and no all-to-all is needed; but the step waits for the chip whose experts the batch hits
  most: it reads E[max over chips of the distinct experts hit there] whole experts. Each of a
  chip's E/tp experts is hit with probability p = 1 - (1 - k/E)^n, so its count is taken as
  Binomial(E/tp, p) (exact mean) and the chips as independent:
  E[max] = sum_{j>=1} (1 - F(j - 1)^tp). Shared experts stay split tp ways.
  `a2a` (expert parallelism with all-to-all dispatch and combine; DeepSeek-V3 report Sec. 3.4,
  DeepEP, SGLang `--enable-dp-attention --moe-a2a-backend deepep`): the experts placed as under
  `ep`, but the tokens are not on every chip: data-parallel attention (`mla_mapping=data`) left
  each chip its own ceil(B/tp) sequences, so each token's hidden state is sent to every other
  chip holding one of its k experts (dispatch) and the partial outputs sent back (combine), in
  place of the all-gather and reduce-scatter around the MoE FFN (`a2a_bytes`). DeepEP sends a
  token once per destination chip, not once per expert: of the tp - 1 other chips, each holding
  E/tp experts, a token's k distinct experts (uniform) miss one with probability
  C(E - E/tp, k) / C(E, k), so it goes to (tp - 1) (1 - C(E - E/tp, k) / C(E, k)) chips.
- Experts split both ways (`hardware.moe_ep` = g, a divisor of tp, with moe_mapping=ep): the
  experts are placed over g expert-parallel groups of tp/g chips (E/g whole experts per group) and
  each expert's FFN columns are split over the tp/g chips of its group (moe_tp = tp/g, moe_ep = g;
  TensorRT-LLM's MoE mapping moe_tp_size x moe_ep_size = tp_size, its fused MoE op called with
  tp_size and ep_size, tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py). A chip of the
  busiest group reads that group's distinct experts hit, 1/(tp/g) of each: in units of 1/tp of an
  expert, g x E[max over the g groups] (the `ep` count with g groups in place of tp chips). The
  collectives stay those of the attention: every chip holds every token under tensor-parallel
  attention and the partial outputs (a column slice of some experts) are all-reduced over the tp
  chips; under data-parallel attention the tokens are all-gathered before and reduce-scattered
  after (fused_moe_cutlass.py: allgather, fused_moe, reducescatter when attention DP is on).
  g = tp is `ep`, g = 1 is `tp`; an all-to-all (`a2a`) of a split expert is not modelled.
"""

from __future__ import annotations

import math
from typing import List

from decodelab.components.ops import Op

MOE_MAPPINGS = ("tp", "ep", "a2a")


def expected_experts(n_experts: int, k: int, tokens: float) -> float:
    """Expected distinct experts activated by `tokens` tokens, each routed to k of n_experts
    (uniform, independent): E (1 - (1 - k/E)^tokens)."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - k / n_experts) ** max(tokens, 0.0))


def busiest_chip_experts(n_experts: int, k: int, tokens: float, chips: int) -> float:
    """Expected distinct experts hit on the busiest of `chips` chips holding n_experts/chips
    whole experts each (expert parallelism): per-chip count Binomial(E/chips, p),
    p = 1 - (1 - k/E)^tokens, chips independent."""
    if n_experts <= 0 or chips <= 1:
        return expected_experts(n_experts, k, tokens)
    per = n_experts // chips
    p = 1.0 - (1.0 - k / n_experts) ** max(tokens, 0.0)
    pmf = [math.comb(per, j) * p**j * (1.0 - p) ** (per - j) for j in range(per + 1)]
    cdf, total = 0.0, 0.0
    for j in range(1, per + 1):
        cdf += pmf[j - 1]  # F(j - 1)
        total += 1.0 - min(cdf, 1.0) ** chips
    return total


def a2a_bytes(m, tp: int, batch: float, act_bytes: float) -> float:
    """Bytes one chip sends per step token in one all-to-all (dispatch, or combine) of an MoE
    layer under `moe_mapping=a2a`: the busiest chip's ceil(B/tp) tokens of the step's B, each to
    the other chips holding one of its experts, d activations each (module docstring)."""
    if tp <= 1 or m.n_experts <= 0:
        return 0.0
    e, k, per = m.n_experts, m.experts_per_token, m.n_experts // tp
    miss = 1.0
    for i in range(k):  # C(E - E/tp, k) / C(E, k)
        miss *= max(e - per - i, 0) / (e - i)
    b = max(1, int(math.ceil(batch)))
    share = math.ceil(b / tp) / b
    return share * (tp - 1) * (1.0 - miss) * routed_hidden(m) * act_bytes


def routed_hidden(m) -> int:
    """Width of the routed experts' input and output: model.moe_latent_dim under a latent MoE
    (Nemotron 3 Super: the token projected d -> latent before its experts), else d_model."""
    return getattr(m, "moe_latent_dim", 0) or m.d_model


def ep_groups(tp: int, moe_mapping: str, moe_ep: int = 0) -> int:
    """Expert-parallel groups the routed experts are placed over (module docstring): 1 under
    moe_mapping=tp; under ep / a2a `moe_ep` groups of tp / moe_ep chips (0: every chip its own)."""
    if moe_mapping not in ("ep", "a2a") or tp <= 1:
        return 1
    return moe_ep if moe_ep > 0 else tp


def n_moe_layers(m) -> int:
    return max(n_ffn_layers(m) - m.first_dense_layers, 0) if m.n_experts > 0 else 0


def n_ffn_layers(m) -> int:
    """Layers with an FFN block (dense or MoE): all but model.ffn_free_layers (Nemotron-H's attention blocks)."""
    return m.n_layers - getattr(m, "ffn_free_layers", 0)


def route_op(m, act_bytes: float) -> Op:
    """The routing decision of one MoE layer: ~4 FLOPs per expert score (activation, bias,
    compare) per token; reads the E scores, writes k (index, weight) pairs. ffn_ops gives it the
    layer's routed-expert block as a tail (Op.moe_block): inside the block's measured time where the
    engine's MoE table timed the routing with it (framework/opcost/moe.py route_price)."""
    e, k = m.n_experts, m.experts_per_token
    return Op(
        "route",
        "elementwise",
        repeat=n_moe_layers(m),
        flops_per_token=4.0 * e,
        act_bytes_per_token=e * act_bytes + k * (4.0 + act_bytes),
        route_point=True,
    )


def experts_units(spec: tuple, tokens: float) -> float:
    """Experts (in units of 1/tp of an expert per chip) whose weights a step of `tokens` tokens
    reads, for an op's `experts_read` spec (always, per_unit, experts, k, ep_chips): with
    g = ep_chips expert-parallel groups, a chip of the busiest group reads that group's distinct
    experts hit, tp/g chips sharing each (g x E[max] units; ep_groups)."""
    _, _, e, k, chips = spec
    if chips > 1:
        return chips * busiest_chip_experts(int(e), int(k), tokens, int(chips))
    return expected_experts(int(e), int(k), tokens)


def weight_read(spec: tuple, tokens: float) -> float:
    """Weight bytes per chip an MoE expert op reads in a step of `tokens` tokens (spec: its
    `experts_read`): what every step reads (the dense layers' share, the shared experts) plus the
    activated routed experts'."""
    return spec[0] + spec[1] * experts_units(spec, tokens)


def shared_gate(m, f_moe: float, w_bytes: float, act_bytes: float) -> List[Op]:
    """The shared expert's sigmoid gate (model.shared_expert_gate: hidden -> 1, Qwen2-MoE / Qwen3-Next /
    Qwen3.5), scaling its output: a d-wide GEMV, then 4 FLOPs an output element; none without it."""
    if not (getattr(m, "shared_expert_gate", False) and m.n_shared_experts):
        return []
    d = m.d_model
    return [
        Op(
            "shared_expert_gate",
            "gemm",
            repeat=m.n_layers,
            weight_bytes=f_moe * d * w_bytes,
            flops_per_token=f_moe * 6.0 * d,
            act_bytes_per_token=f_moe * 3.0 * d * act_bytes,
        )
    ]


def routing_ops(m, f_moe: float, w_bytes: float, act_bytes: float) -> List[Op]:
    """The router GEMM (hidden -> experts' scores), the shared expert's gate and the routing decision of
    the MoE layers (layer average `f_moe`)."""
    d, e = m.d_model, m.n_experts
    router = Op(
        "router",
        "gemm",
        repeat=m.n_layers,
        weight_bytes=f_moe * d * e * w_bytes,
        flops_per_token=f_moe * 2.0 * d * e,
        act_bytes_per_token=f_moe * (d + e) * act_bytes,
    )
    return [router, *shared_gate(m, f_moe, w_bytes, act_bytes), route_op(m, act_bytes)]


def ffn_ops(
    m, tp, w_bytes, act_bytes, tokens, moe_mapping: str = "tp", moe_ep: int = 0, dense_w_bytes: float = 0.0
) -> List[Op]:
    """FFN ops averaged over the layers (dense first layers, MoE layers), with the routing
    decision of the MoE layers after the router GEMM; routed experts placed by `moe_mapping` over
    `moe_ep` expert-parallel groups (ep_groups). `w_bytes`: a routed expert's weight bytes per parameter;
    `dense_w_bytes` (0: the same) those of the rest, the router, the dense layers' FFN, the shared experts
    and a latent MoE's projections, where the checkpoint quantizes only the routed experts
    (model.expert_only_dtypes: gpt-oss's router, Kimi's dense first layer and shared expert stay BF16)."""
    d, L, hid = m.d_model, float(m.n_layers), routed_hidden(m)
    dwb = dense_w_bytes or w_bytes
    latent = hid != d
    n_up = 2 if m.ffn_act == "swiglu" else 1
    n_moe = n_moe_layers(m)
    f_moe, f_dense = n_moe / L, (n_ffn_layers(m) - n_moe) / L
    ffn = m.ffn_dim / tp
    ops = []
    if n_moe:
        fe = m.expert_ffn_dim / tp
        k, e = m.experts_per_token, m.n_experts
        s = 0 if latent else m.n_shared_experts  # a latent MoE's shared expert runs at d: latent_ops
        # routed experts whose weights a step reads, in units of 1/tp of an expert per chip
        ep_chips = ep_groups(tp, moe_mapping, moe_ep)
        read = experts_units((0.0, 0.0, e, k, ep_chips), tokens)
        ops = routing_ops(m, f_moe, dwb, act_bytes)
    else:
        fe = k = s = e = read = ep_chips = 0

    def mixed(name, per_dense_w, per_expert_w, dense_tok_flops, expert_tok_flops, act_in, act_out):
        # always read: the dense layers' and the shared experts' weights (their own bytes); then the routed
        always = (f_dense * per_dense_w + f_moe * s * per_expert_w) * dwb
        spec = (always, f_moe * per_expert_w * w_bytes, e, k, ep_chips)
        return Op(
            name,
            "gemm",
            repeat=m.n_layers,
            experts_read=spec if n_moe else (),
            weight_bytes=always + f_moe * read * per_expert_w * w_bytes,
            resident_bytes=always + f_moe * e * per_expert_w * w_bytes,
            flops_per_token=f_dense * dense_tok_flops + f_moe * (k + s) * expert_tok_flops,
            act_bytes_per_token=act_in + act_out,
        )

    ab = act_bytes
    head_at = len(ops)
    io = (f_dense * d + f_moe * hid) * ab if latent else d * ab  # a token's input (output) of the FFN
    ops += [
        mixed(
            "gate_up_proj",
            d * n_up * ffn,
            hid * n_up * fe,
            2.0 * d * n_up * ffn,
            2.0 * hid * n_up * fe,
            io,
            (f_dense * n_up * ffn + f_moe * (k + s) * n_up * fe) * ab,
        ),
        Op(
            "activation",
            "elementwise",
            repeat=m.n_layers,
            flops_per_token=4.0 * (f_dense * ffn + f_moe * (k + s) * fe),
            act_bytes_per_token=(n_up + 1) * (f_dense * ffn + f_moe * (k + s) * fe) * ab,
        ),
        mixed(
            "down_proj",
            ffn * d,
            fe * hid,
            2.0 * ffn * d,
            2.0 * fe * hid,
            (f_dense * ffn + f_moe * (k + s) * fe) * ab,
            io,
        ),
    ]
    if n_moe:  # the routing decision (route_op) and the expert ops: the routed-expert block
        mark_block(ops[head_at - 1 :], m, (tp // ep_chips, ep_chips), hid, n_up * fe, f_moe, shared=s > 0)
    return ops + (latent_ops(m, tp, f_moe, dwb, act_bytes) if n_moe and latent else [])


def mark_block(
    ops: List[Op], m, split: tuple, hid: int, up_cols: float, f_moe: float, shared: bool = False
) -> None:
    """The routed-expert block a measured MoE table costs whole (framework/opcost/moe.py) on its ops (route,
    head, activation, down): shape (hidden, expert FFN, top-k, experts, moe_tp, moe_ep, MoE share), `split`
    each expert's columns over moe_tp chips and the experts over moe_ep groups; the head carries the routed
    FLOPs per token (`up_cols`: the gate/up columns of an expert on a chip) and the activation's share, and
    `shared`: the layer's shared expert is costed in these ops (Op.shared_expert)."""
    k, n_up = m.experts_per_token, 2 if m.ffn_act == "swiglu" else 1
    shape = (hid, m.expert_ffn_dim, k, m.n_experts, *split, f_moe)
    route, head, act, down = ops
    head.moe_block = ("head", *shape, f_moe * k * 2.0 * hid * up_cols, (n_up + 1) / n_up)
    head.shared_expert = shared
    act.moe_block = down.moe_block = route.moe_block = ("tail", *shape, 0.0, 0.0)


def latent_ops(m, tp: int, f_moe: float, w_bytes: float, ab: float) -> List[Op]:
    """A latent MoE's own ops (NemotronHMoE in vLLM and SGLang): fc1_latent_proj d -> latent and
    fc2_latent_proj latent -> d, replicated on every chip (ReplicatedLinear), and the shared expert, an
    MLP at d of n_shared_experts expert widths split tp ways; MoE layers only (f_moe, the layer average)."""
    d, lat, n_up = m.d_model, m.moe_latent_dim, (2 if m.ffn_act == "swiglu" else 1)
    sh = m.n_shared_experts * m.expert_ffn_dim / tp

    def gemm(name, k, n):
        return Op(name, "gemm", repeat=m.n_layers, weight_bytes=f_moe * k * n * w_bytes,
                  flops_per_token=f_moe * 2.0 * k * n, act_bytes_per_token=f_moe * (k + n) * ab)  # fmt: skip

    out = [gemm("latent_down", d, lat), gemm("latent_up", lat, d)]
    if sh:
        act = Op("shared_activation", "elementwise", repeat=m.n_layers, flops_per_token=f_moe * 4.0 * sh,
                 act_bytes_per_token=f_moe * (n_up + 1) * sh * ab)  # fmt: skip
        out += [gemm("shared_up", d, n_up * sh), act, gemm("shared_down", sh, d)]
    return out
