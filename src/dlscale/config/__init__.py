"""Configuration: every section dataclass (sections.py; the data section in data.py, the bounds every section
shares in bounds.py) and the preset files (presets.py)."""

from dlscale.config.data import DataConfig
from dlscale.config.presets import load_config, load_presets, preset_files
from dlscale.config.sections import (
    PRECISIONS,
    BenchConfig,
    CheckpointConfig,
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
