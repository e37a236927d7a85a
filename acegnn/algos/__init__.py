"""Learners and the training loop."""
from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig, TDTargets
from acegnn.algos.trainer import Trainer, TrainConfig, load_checkpoint

__all__ = ["ACEDQN", "ACEDQNConfig", "TDTargets", "Trainer", "TrainConfig", "load_checkpoint"]
