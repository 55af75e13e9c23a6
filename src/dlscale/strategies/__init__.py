"""Strategies by name: adding one is a module and a line in STRATEGIES."""

from __future__ import annotations

from collections.abc import Callable

from dlscale.config.sections import StrategyConfig
from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError, shown
from dlscale.strategies.allreduce import AllreduceStrategy
from dlscale.strategies.base import Strategy
from dlscale.strategies.gradient_allreduce import GradientAllreduceStrategy
from dlscale.strategies.neighbor_allreduce import (
    TOPOLOGIES,
    HierarchicalNeighborAllreduceStrategy,
    NeighborAllreduceStrategy,
)

STRATEGIES: dict[str, Callable[[StrategyConfig, DistEnv], Strategy]] = {
    "allreduce": AllreduceStrategy,
    "gradient_allreduce": GradientAllreduceStrategy,
    "neighbor_allreduce": NeighborAllreduceStrategy,
    "hierarchical_neighbor_allreduce": HierarchicalNeighborAllreduceStrategy,
}

__all__ = ["STRATEGIES", "TOPOLOGIES", "Strategy", "build_strategy"]


def build_strategy(cfg: StrategyConfig, env: DistEnv) -> Strategy:
    """The strategy cfg.dist_optimizer names, for this rank of the job."""
    if cfg.dist_optimizer not in STRATEGIES:
        raise ConfigError(f"unknown --dist-optimizer {shown(cfg.dist_optimizer)}; choose one of "
                          f"{', '.join(STRATEGIES)}")
    return STRATEGIES[cfg.dist_optimizer](cfg, env)
