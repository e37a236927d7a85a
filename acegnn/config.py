"""Experiment configuration: YAML + ``key=value`` overrides -> typed dataclasses.

OmegaConf is used here only; the rest of the package receives dataclasses. Each
component's config dataclass lives beside the component; the registries below map the
``name`` keys of the YAML to them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
from acegnn.algos.trainer import TrainConfig
from acegnn.algos.value_decomposition import (METHODS, ValueDecomposition,
                                              ValueDecompositionConfig)
from acegnn.envs.spiders_fly_task import SpidersFlyConfig
from acegnn.nn.ace import ModelConfig

ENVS: Dict[str, type] = {"spiders_fly": SpidersFlyConfig}
ALGOS: Dict[str, type] = {"ace_dqn": ACEDQNConfig, **{m: ValueDecompositionConfig for m in METHODS}}
LEARNERS: Dict[str, type] = {"ace_dqn": ACEDQN, **{m: ValueDecomposition for m in METHODS}}


@dataclass
class RunConfig:
    dir: str = "runs"
    """Parent directory of run directories."""
    name: Optional[str] = None
    """Run directory name (default: <env>_<algo>_seed<seed>_<time>)."""


@dataclass
class ExperimentConfig:
    seed: int = 0
    """Seed of the network initialisation, environments, exploration and replay."""
    env: Any = field(default_factory=SpidersFlyConfig)
    algo: Any = field(default_factory=ACEDQNConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    run: RunConfig = field(default_factory=RunConfig)


def _valid_keys(node: Any, prefix: str = "") -> list:
    keys = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            keys += _valid_keys(value, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def _registered(registry: Dict[str, type], raw: Any, section: str) -> type:
    name = OmegaConf.select(raw, f"{section}.name", default=None)
    name = next(iter(registry)) if name is None else name
    if name not in registry:
        raise ValueError(f"unknown {section}.name '{name}' (choose from {sorted(registry)})")
    return registry[name]


def load_config(path: Optional[str] = None, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML file and ``key=value`` overrides into an :class:`ExperimentConfig`.

    Raises:
        ValueError: on an unknown key (the valid keys are listed), a value of the wrong
            type, or an unknown env/algo name.
    """
    try:
        raw = OmegaConf.merge(OmegaConf.load(path) if path else OmegaConf.create(),
                              OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as e:
        raise ValueError(f"cannot read the config: {e}") from None
    except FileNotFoundError:
        raise ValueError(f"config file not found: {path}") from None
    default = ExperimentConfig(env=_registered(ENVS, raw, "env")(),
                               algo=_registered(ALGOS, raw, "algo")())
    try:
        merged = OmegaConf.merge(OmegaConf.structured(default), raw)
        cfg = OmegaConf.to_object(merged)
    except ValueError as e:  # a component's own check (__post_init__)
        raise ValueError(f"invalid config: {e}") from None
    except OmegaConfBaseException as e:
        msg = str(e).splitlines()[0]
        raise ValueError(f"invalid config: {msg}\nvalid keys: {', '.join(_valid_keys(default))}") from None
    _refuse_unused_model_keys(cfg)
    return cfg


def _refuse_unused_model_keys(cfg: ExperimentConfig) -> None:
    """A model key the chosen learner does not read must keep its default: a changed
    value would silently do nothing (e.g. ``model.conv=gatv2`` with ``algo.name=vdn``)."""
    unused, default = getattr(LEARNERS[cfg.algo.name], "unused_model_keys", ()), ModelConfig()
    changed = [f"model.{k}={getattr(cfg.model, k)!r}" for k in unused
               if getattr(cfg.model, k) != getattr(default, k)]
    if changed:
        raise ValueError(f"invalid config: {', '.join(changed)} has no effect on "
                         f"algo.name={cfg.algo.name} (it does not read "
                         f"{', '.join('model.' + k for k in unused)}); remove it")


def to_dict(cfg: ExperimentConfig) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_dict(d: dict) -> ExperimentConfig:
    """Rebuild a config saved with :func:`to_dict` (e.g. from a checkpoint)."""
    raw = OmegaConf.create(d)
    default = ExperimentConfig(env=_registered(ENVS, raw, "env")(),
                               algo=_registered(ALGOS, raw, "algo")())
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(default), raw))


def make_task(cfg: ExperimentConfig):
    """The training task of an experiment."""
    return cfg.env.make(cfg.seed)


def make_learner(cfg: ExperimentConfig, task):
    """The learner of an experiment (network initialised from ``cfg.seed``)."""
    example = task.graphs(task.observe())
    schema = task.schema
    import torch

    torch.manual_seed(cfg.seed)
    return LEARNERS[cfg.algo.name](schema, cfg.algo, cfg.model, cfg.train.device,
                                   example=example)
