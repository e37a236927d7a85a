"""Learners, their registry, and the training loop.

A learner class names its own config dataclasses (``config_class`` for the ``algo``
section, ``model_class`` for ``model``) and is registered here under the names configs
use as ``algo.name``.
"""
from typing import Union

from acegnn.algos.ace_ctde import ACECTDE, ACECTDEConfig
from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig, TDTargets
from acegnn.algos.ace_ppo import ACEPPO, ACEPPOConfig
from acegnn.algos.checkpoint import load_checkpoint
from acegnn.algos.collector import Collector, Step
from acegnn.algos.on_policy import OnPolicyTrainer
from acegnn.algos.trainer import Learner, Trainer, TrainConfig
from acegnn.algos.value_decomposition import METHODS, ValueDecomposition
from acegnn.utils.registry import Registry

#: ``algo.name`` -> the learner class.
LEARNERS: Registry = Registry("algo")


def register_learner(name: str, learner: Union[str, type], replace: bool = False) -> None:
    """Make a learner available to configs as ``algo.name: <name>``.

    Args:
        name (str): The config name (also the default of its config's ``name``).
        learner (type or str): The learner class, or its ``"module:Class"`` path. It has
            ``config_class`` and ``model_class`` attributes (its config dataclasses) and
            is built as ``learner(schema, algo_cfg, model_cfg, device, example=batch)``.
        replace (bool, optional): Replace an entry of the same name.
    """
    LEARNERS.register(name, learner, replace=replace)


register_learner("ace_dqn", ACEDQN)
register_learner("ace_ppo", ACEPPO)
register_learner("ace_ctde", ACECTDE)
for _method in METHODS:
    register_learner(_method, ValueDecomposition)

__all__ = ["ACECTDE", "ACECTDEConfig", "ACEDQN", "ACEDQNConfig", "ACEPPO", "ACEPPOConfig",
           "Collector", "LEARNERS", "Learner", "OnPolicyTrainer", "Step", "TDTargets",
           "Trainer", "TrainConfig", "ValueDecomposition", "load_checkpoint",
           "register_learner"]
