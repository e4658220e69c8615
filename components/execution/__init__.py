"""Execution models: how a machine turns an operator list into kernel calls and what each call
costs beyond its memory and compute time. Selected by `hardware.execution`."""

from decodelab.components.execution import dataflow, gpu

EXECUTION_MODELS = {"gpu": gpu, "dataflow": dataflow}
