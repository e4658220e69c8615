"""The two ways a design does not become a result: bad input (`ConfigError`, the user must change
the config; one line per problem naming the field and the allowed values) and a valid design
that cannot run (`Infeasible`: does not fit memory, does not shard; recorded as a result with its
reason). The bottom layer: every other layer, components included, may raise them."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad input: the user must change the config. One line per problem."""


class Infeasible(Exception):
    """A valid design that cannot run (does not fit, does not shard). Recorded as a result."""
