"""Composer.config(job, reuse=True) (framework/config/composition.py) keeps one working copy per
choice of config groups and puts back only what the previous job's overrides touched: a value's
node where the base holds a value, the whole top-level node where the base holds a mapping or a
list there or lacks the key. Whatever the order of the jobs, each one's resolved config equals a
fresh copy's (reuse=False)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from decodelab.config.composition import Source, composer, reset

JOBS = [
    ["model=llama3_1_8b", "workload.batch_size=7"],  # a value
    ["model=llama3_1_8b", "hardware.memory.hbm.bandwidth_gb_s=1234"],  # nested; the batch back to the base's
    ["model=llama3_1_8b", "hardware.tensor_parallel=2", "hardware.n_chips=2"],  # a value others interpolate
    ["model=llama3_1_8b", "+workload.note_for_test=1"],  # a key the base lacks
    ["model=llama3_1_8b"],  # ... gone again
    ["model=llama3_1_8b", "+workload.a_for_test=1", "+workload.b_for_test=2"],  # two under one node
    ["model=llama3_1_8b", "workload.batch_size=9"],  # ... that node put back once
    ["model=llama3_1_8b", "~kv_policy.window"],  # a key deleted
    ["model=llama3_1_8b", "workload.batch_size=3"],  # ... back
    ["model=llama3_1_8b", "hardware.memory.hbm={bandwidth_gb_s: 100, capacity_gib: 8}"],  # a mapping set
    ["model=llama3_1_8b", "workload.batch_size=5"],
]


@pytest.fixture(scope="module")
def comp():
    yield composer(Source(None, "config"))
    reset()  # leave the Hydra context the composer opened: later tests in this process initialise their own


def test_each_job_of_a_working_copy_equals_a_fresh_copy(comp):
    for job in JOBS:
        try:
            fresh = OmegaConf.to_container(comp.config(job, reuse=False), resolve=True)
        except Exception:  # noqa: BLE001  (an override this config does not take: the working copy must not either)
            with pytest.raises(Exception):
                comp.config(job, reuse=True)
            continue
        reused = OmegaConf.to_container(comp.config(job, reuse=True), resolve=True)
        assert reused == fresh, job
