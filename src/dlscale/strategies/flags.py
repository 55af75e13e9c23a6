"""The strategy flags that `bench` and `train` share (BlueFog's benchmark names them so)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from dlscale.config import StrategyConfig
from dlscale.strategies import STRATEGIES
from dlscale.strategies.decentralized import TOPOLOGIES


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dist-optimizer", choices=sorted(STRATEGIES), default=None,
                   help="allreduce (DDP, default), gradient_allreduce, neighbor_allreduce, "
                        "hierarchical_neighbor_allreduce")
    p.add_argument("--topology", choices=sorted(TOPOLOGIES), default=None,
                   help="graph of the neighbor strategies (exp2: exponential-2, BlueFog's default)")
    p.add_argument("--atc-style", action="store_true", default=None,
                   help="adapt-then-combine: step, then mix with neighbours (default: adapt-with-combine)")
    p.add_argument("--disable-dynamic-topology", action="store_true", default=None,
                   help="exchange with every neighbour each time instead of one rotating peer")
    p.add_argument("--num-steps-per-communication", type=int, default=None, metavar="N",
                   help="local steps between neighbour exchanges (1)")
    p.add_argument("--global-average-every", type=int, default=None, metavar="N",
                   help="average parameters over all ranks every N steps (0: never)")


def strategy_from_args(args: argparse.Namespace, base: StrategyConfig) -> StrategyConfig:
    """base with whatever strategy flags were given on the command line."""
    given = {
        "dist_optimizer": args.dist_optimizer,
        "topology": args.topology,
        "atc_style": args.atc_style,
        "dynamic_topology": None if args.disable_dynamic_topology is None else not args.disable_dynamic_topology,
        "num_steps_per_communication": args.num_steps_per_communication,
        "global_average_every": args.global_average_every,
    }
    return replace(base, **{k: v for k, v in given.items() if v is not None})
