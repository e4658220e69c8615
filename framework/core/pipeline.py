"""Pipeline parallelism in the kernel (`hardware.pipeline_parallel`, docs/model.md, "Parallelism
beyond tensor parallelism"): a step of one tensor-parallel group's operator list, composed over `pp`
pipeline stages and `m` micro-batches. Plain numbers only (the kernel calls it from
`kernel.step_core`; it knows nothing of models, components or configs).

The kernel costs one micro-batch through the whole operator list on one TP group; `t_call[c]` is
the time call c took in it and `stage[c]` where the call runs (Stage.LAYER: spread over the
stages by their decoder layers; Stage.PRE: the first stage only; Stage.POST: the last only).
Stage s holds n_s of the L decoder layers (`layer_split`), so its time per micro-batch is
    t_s = n_s / L * T_layer + [s = 0] T_pre + [s = pp - 1] T_post
and the slowest stage t_max = max over the first, the busiest middle and the last stage.
One micro-batch crosses the pipeline in T + (pp - 1) t_p2p (T = T_pre + T_layer + T_post, the
time of the whole list; t_p2p the activation transfer between stages). A step advances every
sequence of the batch by its query tokens:
- one-shot (a batch of prompts prefilled from an empty pipeline, GPipe, Huang et al. 2019):
      (m - 1) t_max + T + (pp - 1) t_p2p    (= (m + pp - 1) T / pp balanced, no transfer),
  idle fraction of a stage (pp - 1) / (m + pp - 1) (the GPipe bubble);
- steady state (decode: micro-batch i's next token enters stage 0 as soon as its last token left
  the last stage, while the other m - 1 micro-batches occupy the stages):
      max(m t_max, T + (pp - 1) t_p2p)
  each sequence's token still crosses every stage (its latency is the whole traversal); the
  pipeline only overlaps different micro-batches.
Every stage works m T / pp on average in the step (the kernel's causes scaled by m / pp); the
rest of the step is idle: the part the transfers add goes to `collectives`, the bubble and the
stage imbalance to `fill_drain` (pipeline fill and drain). The host's per-step time is kept once.
"""

from __future__ import annotations

import math

from numba import njit

from decodelab.kernel_layout import Layout

Stage = Layout("Stage", "LAYER", "PRE", "POST")  # the codes of call_cost[c, Call.STAGE]


def layer_split(n_layers: int, pp: int):
    """Decoder layers of the first stage, the busiest middle stage and the last stage, as vLLM's
    `get_pp_indices` splits them (vllm/distributed/utils.py): L // pp each, the L % pp left over
    one each to the stages before the last (the last stage holds the LM head), from stage pp - 2
    down. Returns (n_first, n_mid, n_last); n_mid = 0 with fewer than 3 stages."""
    base, rem = divmod(n_layers, pp)
    if pp <= 1:
        return n_layers, 0, 0
    n_first = base + (1 if rem == pp - 1 else 0)
    n_mid = (base + (1 if rem >= 1 else 0)) if pp > 2 else 0
    return n_first, n_mid, base


def microbatches(seqs: float, m: float):
    """(share, count): the largest of `m` micro-batches holds ceil(seqs / m) of the step's
    sequences (share of the step = that / seqs); ceil(seqs / that) micro-batches are non-empty."""
    s = max(1.0, math.ceil(seqs - 1e-9))
    per = math.ceil(s / max(m, 1.0) - 1e-9)
    return per / s, math.ceil(s / per - 1e-9)


microbatches_nb = njit(cache=True)(microbatches)


@njit(cache=True)
def compose(
    out_row, t_call, stage, n_layers, n_first, n_mid, n_last, pp, m, p2p, one_shot, k_host, k_coll, k_fill
):
    """Turn out_row (seconds by cause of one micro-batch through the whole list) into the step of
    `m` micro-batches over `pp` stages (module docstring); t_call[c], stage[c] as there."""
    t_pre = 0.0
    t_layer = 0.0
    t_post = 0.0
    for c in range(t_call.shape[0]):
        if stage[c] == Stage.PRE:
            t_pre += t_call[c]
        elif stage[c] == Stage.POST:
            t_post += t_call[c]
        else:
            t_layer += t_call[c]
    tau = t_layer / n_layers
    t_max = max(n_first * tau + t_pre, n_mid * tau, n_last * tau + t_post)
    whole = t_pre + t_layer + t_post
    cross = whole + (pp - 1.0) * p2p
    if one_shot:
        step = (m - 1.0) * t_max + cross
        bare = (m - 1.0) * t_max + whole
    else:
        step = max(m * t_max, cross)
        bare = max(m * t_max, whole)
    share = m / pp
    host = out_row[k_host]
    for k in range(out_row.shape[0]):
        out_row[k] *= share
    out_row[k_host] = host
    busy = share * whole
    out_row[k_coll] += step - bare
    out_row[k_fill] += bare - busy
