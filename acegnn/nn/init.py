"""Weight initialisation schemes shared by ACE and the baselines.

* ``torch``: PyTorch's default ``nn.Linear`` initialisation (uniform with bound
  ``1 / sqrt(fan_in)``). Every fc + ReLU then shrinks the variance of its input, so deep
  MLPs start with values that barely depend on the state (docs/spiders_fly_results.md,
  "Initialisation").
* ``he``: He (Kaiming) normal initialisation, ``std = sqrt(2 / fan_in)``, with zero bias,
  for every linear layer followed by a ReLU, which keeps the variance through the ReLU
  stack; other layers (the value and Q outputs, the hyper-networks' last layers) keep
  PyTorch's default.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

INITS = ("torch", "he")


@dataclass
class MLPConfig:
    """Width, depth and initialisation of a network of fc + ReLU layers; every learner's
    model config extends it."""

    hidden: int = 128
    """Embedding width."""
    layers: int = 1
    """Depth of every MLP (1: the paper's single fc + ReLU)."""
    init: str = "torch"
    """Initialisation of the layers that feed a ReLU: ``torch`` (PyTorch's default) or
    ``he`` (Kaiming normal, zero bias); see :mod:`acegnn.nn.init`."""

    def __post_init__(self) -> None:
        if self.hidden <= 0 or self.layers <= 0:
            raise ValueError(f"model.hidden and model.layers must be positive "
                             f"(got {self.hidden}, {self.layers})")
        if self.init not in INITS:
            raise ValueError(f"model.init must be one of {list(INITS)} (got {self.init!r})")


def init_relu_layers(module: nn.Module, scheme: str) -> nn.Module:
    """Re-initialise, in place, the linear layers of ``module`` that feed a ReLU.

    A linear layer counts as feeding a ReLU when it is directly followed by an
    ``nn.ReLU`` inside an ``nn.Sequential``. ``scheme="torch"`` leaves the module as
    built.

    Args:
        module (nn.Module): The network.
        scheme (str): ``"torch"`` or ``"he"``.

    Returns:
        The same module.
    """
    if scheme not in INITS:
        raise ValueError(f"unknown init scheme {scheme!r} (choose from {list(INITS)})")
    if scheme == "torch":
        return module
    for seq in module.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        layers = list(seq.children())
        for layer, after in zip(layers, layers[1:]):
            if isinstance(layer, nn.Linear) and isinstance(after, nn.ReLU):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
    return module
