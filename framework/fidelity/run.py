"""`decodelab fidelity [--ci] [overrides]`: run a grid of KV policies x budgets on the passkey task
(lengths x needle depths) and the text task, print a summary, write results and plots under
`out_dir`, and log one MLflow run per policy and budget (metrics `fidelity_*`) under a parent run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from decodelab.fidelity import policies as pol_mod
from decodelab.fidelity import tasks
from decodelab.fidelity import weights
from decodelab.fidelity.model import Model
from decodelab.errors import ConfigError
from decodelab.components.kv_policy import KV_POLICIES
from decodelab.core.schema import KVPolicyConfig

METRICS = ("recall", "relerr", "read_tokens", "needle_read")
_MODELS: Dict[str, tuple] = {}


def load_model(model_file: str = "", fetch: bool = True):
    """(Model, tokenizer), loaded once per process."""
    path = weights.locate(model_file, allow_fetch=fetch)
    if str(path) not in _MODELS:
        try:
            w = weights.load(path)
        except (ValueError, KeyError, OSError, EOFError) as e:  # not a (complete) GGUF file
            raise weights.ModelUnavailable(f"{path}: not a readable GGUF ({type(e).__name__}: {e})") from None
        _MODELS[str(path)] = (Model(w), weights.tokenizer(w.meta["tokenizer"]))
    return _MODELS[str(path)]


def build_variants(cfg, compose) -> Tuple[List[pol_mod.Variant], object]:
    """One Variant per policy and budget, each from its conf/kv_policy YAML composed with the
    main config by `compose(overrides)` (so the KV-policy schema types it; the caller supplies
    it: decodelab.config.compose), the budget written into its fields and checked by the
    performance component's own `check`. Returns (variants, model config)."""
    out, errors, model = [], [], None
    names = list(dict.fromkeys(["full"] + list(cfg.policies)))  # full: the reference
    for alias in names:
        name = cfg.aliases.get(alias, alias)
        extra = list(cfg.policy_overrides.get(alias, []))
        for b in [0] if name == "full" or not cfg.budgets else list(cfg.budgets):
            try:
                c = compose([f"kv_policy={name}", f"model={cfg.model}", "tracking=off", *extra])
            except Exception as e:  # unknown option or field
                errors.append(f"policies: {alias} ({type(e).__name__}: {str(e).splitlines()[0]})")
                break
            model, pol = c.model, c.kv_policy
            pol_mod.apply_budget(pol, int(b))
            bad = _component_check(pol, model)
            if bad:
                errors += [f"{e} ({alias} at budget {b})" if b else f"{e} ({alias})" for e in bad]
                continue
            try:
                out.append(pol_mod.variant(pol, model, int(b), cfg.streaming_prefill, alias))
            except ValueError as e:
                errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(dict.fromkeys(errors)))
    return out, model


def _component_check(pol, model) -> List[str]:
    """The performance component's own validation of the policy (one line per problem)."""
    comp = KV_POLICIES.get(pol.name)
    if comp is None or not hasattr(comp, "check"):
        return []
    return list(comp.check(pol, model))


def memory_tokens(v: pol_mod.Variant, model, prompt: int, generated: int, measured: float) -> float:
    """KV tokens per KV head the policy needs, by the performance component's own accounting
    (cached_tokens, Quest's page metadata included); the measured count where it has none.
    Errors of the component propagate: a silent fallback would make the accounting test
    (measured == cached_tokens) compare the measurement with itself."""
    from omegaconf import OmegaConf

    comp = KV_POLICIES.get(v.policy)
    if comp is None or not hasattr(comp, "cached_tokens"):
        return measured
    pol = OmegaConf.merge(OmegaConf.structured(KVPolicyConfig), v.fields)
    return float(comp.cached_tokens(pol, prompt, generated, model))


@dataclass
class Results:
    rows: List[dict] = field(default_factory=list)  # one per variant and sample
    per_head: Dict[str, List[np.ndarray]] = field(default_factory=dict)  # label -> [L, H, 5] arrays
    seconds: Dict[str, float] = field(default_factory=dict)


def _prefills(model, ids, masks, obs, colsum, past=None, snapshots=()):
    return [
        model.prefill(
            ids,
            sinks=s,
            window=w,
            obs=obs,
            colsum=colsum and (s, w) == (0, 0),
            past=None if past is None else past[(s, w)],
            snapshots=snapshots,
        )
        for (s, w) in masks
    ]


def run_passkey(model, tok, variants, mcfg, cfg, res: Results, progress=None) -> None:
    arrays = pol_mod.stack(variants)
    masks = sorted({v.prefill_mask for v in variants})
    grp = np.array([masks.index(v.prefill_mask) for v in variants])
    obs = max([1] + [int(v.iparams[pol_mod.K.P_OBS]) for v in variants])
    need_cs = any(v.policy == "h2o" for v in variants)
    for seed in cfg.seeds:
        hs = tasks.Haystack(tok, seed, max(cfg.lengths), cfg.digits)
        samples = [hs.sample(L, d) for L in cfg.lengths for d in cfg.depths]
        cuts = sorted({min(s.shared_prefix, len(s.tokens) - obs) for s in samples})
        t0 = time.perf_counter()
        longest = max(samples, key=lambda s: s.shared_prefix)
        past = (
            dict(
                zip(masks, _prefills(model, longest.tokens[: cuts[-1]], masks, obs, need_cs, snapshots=cuts))
            )
            if cuts[-1] > obs
            else None
        )
        res.seconds["prefill"] = res.seconds.get("prefill", 0.0) + time.perf_counter() - t0
        for s in samples:
            t0 = time.perf_counter()
            groups = _prefills(model, s.tokens, masks, obs, need_cs, past)
            t1 = time.perf_counter()
            first = np.array([groups[g].logits.argmax() for g in grp])
            r = model.decode(groups, grp, arrays, first, steps=cfg.digits, needle=s.needle_span)
            res.seconds["prefill"] = res.seconds.get("prefill", 0.0) + t1 - t0
            res.seconds["decode"] = res.seconds.get("decode", 0.0) + time.perf_counter() - t1
            P, T = len(s.tokens), cfg.digits
            for b, v in enumerate(variants):
                text = tok.decode([int(first[b])] + [int(x) for x in r["argmax"][b]])
                sc = tasks.score_answer(text, s.answer)
                held = float(r["held"][b, -1])
                m = r["metrics"][b]
                res.rows.append(
                    {
                        "task": "passkey",
                        "seed": seed,
                        "length": s.length,
                        "prompt_tokens": P,
                        "depth": s.depth,
                        "label": v.label,
                        "policy": v.name,
                        "component": v.policy,
                        "budget": v.budget,
                        "exact": sc["exact"],
                        "digits": sc["digits"],
                        "answer": s.answer,
                        "output": text,
                        "kv_tokens": held,
                        "memory_tokens": memory_tokens(v, mcfg, P, T, held),
                        "full_tokens": P + T,
                        **{k: float(m[..., i].mean()) for i, k in enumerate(METRICS)},
                        "needle_kept": float(r["needle_kept"][b].mean()),
                    }
                )
                res.rows[-1]["memory_saved"] = 1.0 - res.rows[-1]["memory_tokens"] / (P + T)
                res.per_head.setdefault(v.label, []).append(
                    np.concatenate([m, r["needle_kept"][b][..., None]], axis=-1)
                )
            if progress:
                progress(f"passkey seed {seed} length {s.length} depth {s.depth:g}")


def text_ids(tok, cfg) -> np.ndarray:
    """Token ids of the text task's text; ConfigError if it is missing or too short."""
    try:
        ids = np.array(tok.encode(tasks.project_text(cfg.text.file)).ids, np.int64)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    C, E = int(cfg.text.context), int(cfg.text.eval_tokens)
    if C < 1 or E < 1 or len(ids) < C + E + 1:
        raise ConfigError(
            f"text.context + text.eval_tokens = {C} + {E}: both >= 1 and at most "
            f"{len(ids) - 1} tokens (the text's length)"
        )
    return ids


def run_text(model, tok, variants, mcfg, cfg, res: Results, progress=None) -> None:
    ids = text_ids(tok, cfg)
    C, E = int(cfg.text.context), int(cfg.text.eval_tokens)
    arrays = pol_mod.stack(variants)
    masks = sorted({v.prefill_mask for v in variants})
    grp = np.array([masks.index(v.prefill_mask) for v in variants])
    obs = max([1] + [int(v.iparams[pol_mod.K.P_OBS]) for v in variants])
    t0 = time.perf_counter()
    groups = _prefills(model, ids[:C], masks, obs, any(v.policy == "h2o" for v in variants))
    r = model.decode(
        groups, grp, arrays, ids[C : C + 1].repeat(len(variants)), steps=E, forced=ids[C : C + E + 1]
    )
    res.seconds["text"] = time.perf_counter() - t0
    full = [b for b, v in enumerate(variants) if v.policy == "full"][0]
    for b, v in enumerate(variants):
        lg = groups[grp[b]].logits.astype(np.float64)
        lp0 = lg[ids[C]] - (lg.max() + np.log(np.exp(lg - lg.max()).sum()))
        nll = -np.concatenate([[lp0], r["logprobs"][b, : E - 1]]).mean()
        held = float(r["held"][b, -1])
        res.rows.append(
            {
                "task": "text",
                "label": v.label,
                "policy": v.name,
                "component": v.policy,
                "budget": v.budget,
                "prompt_tokens": C,
                "nll": float(nll),
                "ppl": float(np.exp(nll)),
                "agreement": float((r["argmax"][b] == r["argmax"][full]).mean()),
                "kv_tokens": held,
                "memory_tokens": memory_tokens(v, mcfg, C, E, held),
                "full_tokens": C + E,
                **{k: float(r["metrics"][b][..., i].mean()) for i, k in enumerate(METRICS)},
            }
        )
        res.rows[-1]["memory_saved"] = 1.0 - res.rows[-1]["memory_tokens"] / (C + E)
    if progress:
        progress("text")


def run(cfg, compose, progress=None) -> Tuple[Results, List[pol_mod.Variant]]:
    """Run the grid of a composed fidelity config; `compose(overrides)` composes the main config
    (build_variants). Raises ConfigError on bad input and weights.ModelUnavailable when the
    GGUF cannot be had."""
    bad = [f"lengths: {L} must be in [128, 8192] tokens" for L in cfg.lengths if not 128 <= L <= 8192]
    bad += [f"depths: {d} must be in [0, 1]" for d in cfg.depths if not 0.0 <= d <= 1.0]
    bad += [f"budgets: {b} must be >= 0" for b in cfg.budgets if b < 0]
    bad += [f"seeds: {s} must be >= 0" for s in cfg.seeds if s < 0]
    if not 1 <= cfg.digits <= 18:
        bad.append(f"digits: {cfg.digits} must be in [1, 18] (pass key digits)")
    if not (cfg.lengths and cfg.depths and cfg.seeds) and not cfg.text.enabled:
        bad.append("nothing to run: lengths, depths or seeds is empty and text.enabled=false")
    if bad:
        raise ConfigError("\n".join(bad))
    variants, mcfg = build_variants(cfg, compose)
    res = Results()
    t0 = time.perf_counter()
    model, tok = load_model(cfg.model_file, cfg.fetch)
    res.seconds["load"] = time.perf_counter() - t0
    w = model.w
    shape = (w.n_layers, w.n_heads, w.n_kv_heads, w.head_dim)
    if shape != (mcfg.n_layers, mcfg.n_heads, mcfg.n_kv_heads, mcfg.head_dim):
        raise ConfigError(
            f"model={cfg.model}: shape {(mcfg.n_layers, mcfg.n_heads, mcfg.n_kv_heads, mcfg.head_dim)}"
            f" differs from the GGUF's {shape}"
        )
    if max(cfg.lengths, default=0) > w.context:
        raise ConfigError(f"lengths: {max(cfg.lengths)} exceeds the model's context {w.context}")
    if cfg.text.enabled:
        text_ids(tok, cfg)  # bad text settings fail before the passkey grid runs
        if cfg.text.context + cfg.text.eval_tokens > w.context:
            raise ConfigError(
                f"text.context + text.eval_tokens = {cfg.text.context + cfg.text.eval_tokens}"
                f" exceeds the model's context {w.context}"
            )
    if cfg.lengths and cfg.depths:
        run_passkey(model, tok, variants, mcfg, cfg, res, progress)
    if cfg.text.enabled:
        run_text(model, tok, variants, mcfg, cfg, res, progress)
    res.seconds["total"] = time.perf_counter() - t0
    return res, variants


def summary(res: Results):
    """One row per policy and budget: passkey accuracy, memory saved, proxy and text metrics."""
    import pandas as pd

    df = pd.DataFrame(res.rows)
    keys = ["label", "policy", "budget"]
    out = None
    pk = df[df.task == "passkey"] if "task" in df else df.iloc[:0]
    if len(pk):
        out = (
            pk.groupby(keys, sort=False)
            .agg(
                passkey_acc=("exact", "mean"),
                passkey_digits=("digits", "mean"),
                memory_saved=("memory_saved", "mean"),
                kv_tokens=("kv_tokens", "mean"),
                recall=("recall", "mean"),
                relerr=("relerr", "mean"),
                read_tokens=("read_tokens", "mean"),
                needle_read=("needle_read", "mean"),
                needle_kept=("needle_kept", "mean"),
            )
            .reset_index()
        )
    tx = df[df.task == "text"] if "task" in df else df.iloc[:0]
    if len(tx):
        t = tx[keys + ["ppl", "agreement", "memory_saved", "recall", "relerr"]].rename(
            columns={"memory_saved": "text_memory_saved", "recall": "text_recall", "relerr": "text_relerr"}
        )
        full_ppl = float(t[t.policy == "full"].ppl.iloc[0])
        t = t.assign(ppl_ratio=t.ppl / full_ppl)
        out = t if out is None else out.merge(t, on=keys, how="left")
    return out
