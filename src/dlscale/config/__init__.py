"""Configuration: every section dataclass (sections.py) and the preset files (presets.py)."""

from dlscale.config.presets import load_config, load_presets, preset_files
from dlscale.config.sections import (
    PRECISIONS,
    BenchConfig,
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ScheduleConfig,
    StrategyConfig,
    TrainConfig,
)

__all__ = [
    "PRECISIONS",
    "BenchConfig",
    "CheckpointConfig",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "ScheduleConfig",
    "StrategyConfig",
    "TrainConfig",
    "load_config",
    "load_presets",
    "preset_files",
]
