"""Strategies by name: adding one is a module and a line in STRATEGIES."""

from __future__ import annotations

from collections.abc import Callable

from dlscale.errors import ConfigError
from dlscale.strategies.allreduce import AllreduceStrategy
from dlscale.strategies.base import Strategy
from dlscale.strategies.decentralized import GradientAllreduceStrategy, NeighborAllreduceStrategy

STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "allreduce": AllreduceStrategy,
    "gradient_allreduce": GradientAllreduceStrategy,
    "neighbor_allreduce": NeighborAllreduceStrategy,
    "hierarchical_neighbor_allreduce": lambda world_size, **options: NeighborAllreduceStrategy(
        world_size, hierarchical=True, **options),
}


def build_strategy(name: str, world_size: int, **options) -> Strategy:
    if name not in STRATEGIES:
        raise ConfigError(f"unknown --dist-optimizer {name!r}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name](world_size=world_size, **options)
