"""Numpy forward pass of a llama-architecture GGUF model (SmolLM2-135M): RMSNorm, RoPE on adjacent
pairs (llama.cpp's layout of the Q/K rows), grouped-query attention, SwiGLU, tied embeddings.

Prefill is dense numpy/BLAS, chunked over queries; it either attends causally to everything
(every policy whose prefill is exact: full, SnapKV, PyramidKV, SnapStream, H2O, Quest) or to
sinks + a recent window (StreamingLLM, which streams the prompt through its bounded cache too).
It returns the KV cache (post-RoPE keys), the logits of the last prompt token, the last queries
of every layer (SnapKV's observation window) and the attention every key received from all
prompt queries (H2O's accumulated score). Decode is batched over policy variants: the dense
layers run once for all variants, attention runs in the Numba kernel
(decodelab.fidelity.attention_kernel) over each variant's kept tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

import numpy as np

from decodelab.fidelity.weights import Weights
from decodelab.fidelity import attention_kernel as K


@dataclass
class Prefill:
    ids: np.ndarray  # [P] prompt tokens
    k: np.ndarray  # [L, Hkv, P, D] post-RoPE keys
    v: np.ndarray  # [L, Hkv, P, D]
    logits: np.ndarray  # [vocab] logits after the last prompt token
    q_obs: np.ndarray  # [L, H, obs, D] queries of the last `obs` prompt tokens
    colsum: Optional[np.ndarray] = None  # [L, H, P] attention received
    snapshots: Dict[int, np.ndarray] = field(default_factory=dict)  # n -> colsum from queries < n
    sinks: int = 0
    window: int = 0  # 0: dense causal prefill


def window_scores(q_obs: np.ndarray, k: np.ndarray) -> np.ndarray:
    """SnapKV's scores for one layer: softmax attention of the last w prompt queries (q_obs
    [H, w, D], positions P - w .. P - 1, causal) over the prompt keys (k [Hkv, P, D]), summed over
    the window. Returns [H, P - w] (the keys before the window, the ones selection chooses from)."""
    H, w, D = q_obs.shape
    Hkv, P = k.shape[:2]
    G = H // Hkv
    s = (q_obs.reshape(Hkv, G * w, D) @ k.transpose(0, 2, 1)).astype(np.float64) / np.sqrt(D)
    qpos = np.tile(np.arange(P - w, P), G)[:, None]
    s[:, np.arange(P)[None, :] > qpos] = -np.inf
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return s.reshape(Hkv, G, w, P).sum(2).reshape(H, P)[:, : P - w]


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


class Model:
    def __init__(self, w: Weights):
        self.w = w
        self.H, self.Hkv, self.D = w.n_heads, w.n_kv_heads, w.head_dim
        self.G = self.H // self.Hkv
        self.inv_freq = w.rope_theta ** (-np.arange(0, self.D, 2, dtype=np.float64) / self.D)

    # ----------------------------------------------------------------- pieces
    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x [T, heads, D] rotated at absolute positions `pos` [T] (pairs 2i, 2i+1)."""
        a = pos[:, None].astype(np.float64) * self.inv_freq[None, :]
        c, s = np.cos(a).astype(np.float32)[:, None, :], np.sin(a).astype(np.float32)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def qkv(self, l: int, x: np.ndarray, pos: np.ndarray):
        w, H, Hkv, D = self.w, self.H, self.Hkv, self.D
        t = rms_norm(x, w.attn_norm[l], w.norm_eps) @ w.wqkv[l]
        q = self.rope(t[:, : H * D].reshape(-1, H, D), pos)
        k = self.rope(t[:, H * D : (H + Hkv) * D].reshape(-1, Hkv, D), pos)
        return q, k, t[:, (H + Hkv) * D :].reshape(-1, Hkv, D)

    def mlp(self, l: int, x: np.ndarray) -> np.ndarray:
        w = self.w
        gu = rms_norm(x, w.ffn_norm[l], w.norm_eps) @ w.wgu[l]
        g, u = gu[:, : w.ffn_dim], gu[:, w.ffn_dim :]
        return (g / (1.0 + np.exp(-g)) * u) @ w.wd[l]

    def logits(self, x: np.ndarray) -> np.ndarray:
        return rms_norm(x, self.w.out_norm, self.w.norm_eps) @ self.w.embed.T

    # ----------------------------------------------------------------- prefill
    def _attend(self, q, k, v, a, b, sinks, window, colsum):
        """Queries at positions [a, b) (q [b-a, H, D]) over keys [Hkv, >=b, D]; adds the attention
        each key received, per query head, to colsum [H, P] when given."""
        Hkv, G, D, C = self.Hkv, self.G, self.D, b - a
        qa = (
            (q * np.float32(1.0 / np.sqrt(D)))
            .reshape(C, Hkv, G, D)
            .transpose(1, 2, 0, 3)
            .reshape(Hkv, G * C, D)
        )
        qi = np.tile(np.arange(a, b), G)[:, None]
        if window <= 0 or b <= sinks + window:
            keys = None
            s = qa @ k[:, :b].transpose(0, 2, 1)
            kv = v[:, :b]
        else:  # sinks + the window: only keys some query of the chunk can see
            lo = max(sinks, a - window + 1)
            keys = np.concatenate([np.arange(sinks), np.arange(lo, b)])
            s = qa @ k[:, keys].transpose(0, 2, 1)
            kv = v[:, keys]
        # the mask bites only in the columns of keys after a (causal) or that fall out of the window
        kk = np.arange(b) if keys is None else keys
        bad = kk > a
        if window > 0:
            bad |= (kk >= sinks) & (kk <= b - 1 - window)
        cols = np.flatnonzero(bad)
        if len(cols):
            j = kk[cols][None, :]
            ok = j <= qi
            if window > 0:
                ok &= (j < sinks) | (j > qi - window)
            s[:, :, cols] = np.where(ok[None], s[:, :, cols], -np.inf)
        mx = s.max(-1, keepdims=True)
        np.subtract(s, mx, out=s)
        np.exp(s, out=s)
        inv = 1.0 / s.sum(-1)  # [Hkv, G*C]
        o = (s @ kv) * inv[..., None]
        if colsum is not None:  # per query head, over the chunk
            got = np.einsum("hgc,hgcn->hgn", inv.reshape(Hkv, G, C), s.reshape(Hkv, G, C, -1))
            if keys is None:
                colsum[:, :b] += got.reshape(Hkv * G, -1)
            else:
                colsum[:, keys] += got.reshape(Hkv * G, -1)
        return o.reshape(Hkv, G, C, D).transpose(2, 0, 1, 3).reshape(C, Hkv * G, D)

    def prefill(
        self,
        ids: Sequence[int],
        sinks: int = 0,
        window: int = 0,
        obs: int = 32,
        colsum: bool = False,
        past: Optional[Prefill] = None,
        snapshots: Sequence[int] = (),
        chunk: int = 256,
    ) -> Prefill:
        """Run the prompt `ids`. window > 0: each query attends to the first `sinks` tokens and the
        `window` most recent ones (itself included). `past`: a prefill of the same mask whose
        first tokens equal ids[:n0] (n0 = the longest common prefix, and a key of
        past.snapshots when colsum is wanted); its KV is reused and only ids[n0:] is computed.
        `snapshots`: positions n at which to keep the accumulated attention of queries < n."""
        w, L, H, Hkv, D = self.w, self.w.n_layers, self.H, self.Hkv, self.D
        ids = np.asarray(ids, np.int64)
        P = len(ids)
        obs = max(1, min(obs, P))
        n0 = 0
        if past is not None:
            if (past.sinks, past.window) != (sinks, window):
                raise ValueError("past prefill used another attention mask")
            m = min(P - 1, len(past.ids))
            n0 = min(int(np.argmin(np.append(past.ids[:m] == ids[:m], False))), P - min(obs, P))
            if colsum:
                n0 = max([s for s in past.snapshots if s <= n0], default=0)
        k = np.empty((L, Hkv, P, D), np.float32)
        v = np.empty((L, Hkv, P, D), np.float32)
        cs = np.zeros((L, H, P), np.float32) if colsum else None
        if n0:
            k[:, :, :n0], v[:, :, :n0] = past.k[:, :, :n0], past.v[:, :, :n0]
            if colsum:
                cs[:, :, :n0] = past.snapshots[n0]
        snaps = sorted({s for s in snapshots if n0 < s <= P})
        snap_out = {s: np.zeros((L, H, s), np.float32) for s in snaps} if colsum else {}
        bounds = sorted(set(range(n0, P, chunk)) | set(snaps) | {P})
        pos = np.arange(n0, P)
        x = w.embed[ids[n0:]]
        q_obs = np.empty((L, H, obs, D), np.float32)
        for l in range(L):
            q, kk, vv = self.qkv(l, x, pos)
            k[l, :, n0:], v[l, :, n0:] = kk.transpose(1, 0, 2), vv.transpose(1, 0, 2)
            o = np.empty((P - n0, H, D), np.float32)
            for a, b in zip(bounds[:-1], bounds[1:]):
                o[a - n0 : b - n0] = self._attend(
                    q[a - n0 : b - n0], k[l], v[l], a, b, sinks, window, cs[l] if colsum else None
                )
                if b in snap_out:
                    snap_out[b][l] = cs[l, :, :b]
            q_obs[l] = q[P - n0 - obs :].transpose(1, 0, 2)
            x = x + o.reshape(P - n0, H * D) @ w.wo[l]
            x = x + self.mlp(l, x)
        return Prefill(
            ids=ids,
            k=k,
            v=v,
            logits=self.logits(x[-1:])[0],
            q_obs=q_obs,
            colsum=cs,
            snapshots=snap_out,
            sinks=sinks,
            window=window,
        )

    # ----------------------------------------------------------------- decode
    def decode(
        self,
        groups: Sequence[Prefill],
        grp: np.ndarray,
        arrays: Dict[str, np.ndarray],
        first: np.ndarray,
        steps: int,
        forced: Optional[np.ndarray] = None,
        needle: tuple = (0, 0),
    ) -> Dict[str, np.ndarray]:
        """Decode `steps` tokens for B policy variants at once. Variant b reads the prompt KV of
        groups[grp[b]] (all prefills of one prompt); `arrays`: policies.stack(); first [B]: the
        first input token (the prefill's prediction, or the text's next token). forced [steps]:
        teacher forcing (input token t is forced[t]) instead of greedy decoding.
        Returns tokens [B, steps] (inputs fed), logprobs [B, steps, vocab] of forced[t + 1] when
        forcing (else empty), argmax [B, steps], metrics [B, L, H, 4] averaged over steps,
        held [B, steps + 1] (tokens held per KV head after prefill and after each step),
        needle_kept [B, L, H] (needle tokens kept right after prefill, fraction)."""
        L, H, Hkv, D = self.w.n_layers, self.H, self.Hkv, self.D
        B, P = len(grp), groups[0].k.shape[2]
        if any(g.k.shape[2] != P for g in groups):
            raise ValueError("all prefills of one decode must share the prompt")
        N = P + steps
        kp = np.stack([g.k for g in groups])
        vp = np.stack([g.v for g in groups])
        kd = np.zeros((B, L, Hkv, steps, D), np.float32)
        vd = np.zeros_like(kd)
        state = np.zeros((B, L, H, N), np.int8)
        score = np.zeros((B, L, H, N), np.float32)
        held = np.zeros((B, steps + 1))
        snap: Dict[tuple, np.ndarray] = {}  # SnapKV window scores, once per prefill and window
        for b in range(B):
            g, ip = groups[grp[b]], arrays["iparams"][b]
            kind, obs = ip[K.P_KIND], min(int(ip[K.P_OBS]), P)
            if kind == K.H2O:
                if g.colsum is None:
                    raise ValueError("H2O needs the prefill's accumulated attention (colsum=True)")
                score[b, :, :, :P] = sc = g.colsum
            elif kind in (K.SNAPKV, K.SNAPSTREAM):
                if (grp[b], obs) not in snap:
                    snap[(grp[b], obs)] = np.stack(
                        [window_scores(g.q_obs[l][:, g.q_obs.shape[2] - obs :], g.k[l]) for l in range(L)]
                    )
                sc = snap[(grp[b], obs)]
            else:
                sc = np.zeros((L, H, 1))
            K.select_prompt(
                state[b], ip, arrays["layer_budgets"][b], arrays["sel_of_head"][b], sc.astype(np.float64), P
            )
            held[b, 0] = K.held_tokens(state[b], P, Hkv)
        lo, hi = needle
        needle_kept = (state[:, :, :, lo:hi] > 0).mean(-1) if hi > lo else np.zeros((B, L, H))
        needle_arr = np.array([lo, hi], np.int64)
        metrics = np.zeros((B, L, H, 4))
        out = np.empty((B, H, D), np.float32)
        tokens = np.zeros((B, steps), np.int64)
        argmax = np.zeros((B, steps), np.int64)
        logprobs = np.zeros((B, steps), np.float64) if forced is not None else np.zeros((B, 0))
        tok = np.asarray(first, np.int64).copy()
        with _one_blas_thread():  # small GEMMs: BLAS threads only add synchronisation
            self._decode_loop(
                steps,
                forced,
                tok,
                tokens,
                argmax,
                logprobs,
                held,
                grp,
                arrays,
                kp,
                vp,
                kd,
                vd,
                state,
                score,
                needle_arr,
                out,
                metrics,
            )
        metrics /= max(steps, 1)
        return {
            "tokens": tokens,
            "argmax": argmax,
            "logprobs": logprobs,
            "metrics": metrics,
            "held": held,
            "needle_kept": needle_kept,
        }

    def _decode_loop(
        self,
        steps,
        forced,
        tok,
        tokens,
        argmax,
        logprobs,
        held,
        grp,
        arrays,
        kp,
        vp,
        kd,
        vd,
        state,
        score,
        needle_arr,
        out,
        metrics,
    ):
        w, L, H, Hkv, D = self.w, self.w.n_layers, self.H, self.Hkv, self.D
        B, P = len(grp), kp.shape[3]
        for t in range(steps):
            if forced is not None:
                tok[:] = forced[t]
            tokens[:, t] = tok
            x = w.embed[tok]
            pos = np.full(B, P + t)
            for l in range(L):
                q, k, v = self.qkv(l, x, pos)
                K.decode_layer(
                    l,
                    t,
                    q,
                    k,
                    v,
                    kp,
                    vp,
                    grp,
                    kd,
                    vd,
                    state,
                    score,
                    arrays["iparams"],
                    arrays["hh"],
                    arrays["sel_of_head"],
                    needle_arr,
                    out,
                    metrics,
                )
                x = x + out.reshape(B, H * D) @ w.wo[l]
                x = x + self.mlp(l, x)
            lg = self.logits(x).astype(np.float64)
            argmax[:, t] = lg.argmax(-1)
            if forced is not None and t + 1 < len(forced):
                m = lg.max(-1, keepdims=True)
                lse = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[:, 0]
                logprobs[:, t] = lg[:, forced[t + 1]] - lse
            tok[:] = argmax[:, t]
            for b in range(B):
                held[b, t + 1] = K.held_tokens(state[b], P + t + 1, Hkv)


def _one_blas_thread():
    """Limit BLAS to one thread (threadpoolctl) where available; otherwise a no-op."""
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
