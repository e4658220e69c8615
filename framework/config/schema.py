"""Registers the typed schemas (decodelab.core.schema) in Hydra's ConfigStore as
`decodelab_schema`, the first entry of conf/config.yaml's defaults. Importing this module is what
makes a composed config typed."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from decodelab.core.schema import DecodelabConfig
from decodelab.fidelity.config import FidelityConfig


def register() -> None:
    ConfigStore.instance().store(name="decodelab_schema", node=DecodelabConfig)
    ConfigStore.instance().store(name="fidelity_schema", node=FidelityConfig)


register()
