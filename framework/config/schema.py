"""Registers the typed schemas (decodelab.core.schema) in Hydra's ConfigStore as
`decodelab_schema`, the first entry of conf/config.yaml's defaults. Importing this module is what
makes a composed config typed."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from decodelab.core.schema import DecodelabConfig
from decodelab.fidelity.config import FidelityConfig


def below(x, *steps):
    """`${below:x,t1,v1,t2,v2,...,v}`: v_i of the first threshold t_i with x < t_i, else v (an engine
    default that depends on the chip, e.g. SGLang's by GPU memory: conf/engine/sglang.yaml)."""
    if len(steps) % 2 != 1:
        raise ValueError(
            f"below:{x},{','.join(map(str, steps))} needs thresholds and values, then a last value"
        )
    for t, v in zip(steps[0:-1:2], steps[1:-1:2]):
        if float(x) < float(t):
            return v
    return steps[-1]


def contains(text, word, yes, no):
    """`${contains:text,word,a,b}`: a if `word` is in `text` (case-insensitive), else b (vLLM's
    defaults for an A100: conf/engine/vllm.yaml)."""
    return yes if str(word).lower() in str(text).lower() else no


def register() -> None:
    ConfigStore.instance().store(name="decodelab_schema", node=DecodelabConfig)
    ConfigStore.instance().store(name="fidelity_schema", node=FidelityConfig)
    OmegaConf.register_new_resolver("below", below, replace=True)
    OmegaConf.register_new_resolver("contains", contains, replace=True)


register()
