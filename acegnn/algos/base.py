"""What every value-based learner shares: config fields, optimiser, target network,
the gradient step and checkpoints."""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch

from acegnn.utils.compiled import check_compiled
from acegnn.utils.phases import phase

OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}
LOSSES = {"mse": F.mse_loss, "huber": F.smooth_l1_loss}


ZERO_TOL = 1e-6
"""A weight at most this large in magnitude counts as zero in :func:`zero_fraction`."""


@torch.no_grad()
def zero_fraction(module: nn.Module, tol: float = ZERO_TOL) -> float:
    """The fraction of ``module``'s parameter entries with ``|w| <= tol``: weights that
    weight decay has driven to zero where the loss gave them no gradient (a unit whose
    weights are all zero stays at zero). Logged per round as ``zero_weights``."""
    total = zeros = 0
    for p in module.parameters():
        total += p.numel()
        zeros += int((p.abs() <= tol).sum())
    return zeros / max(total, 1)


@dataclass
class OptimConfig:
    """What every learner's config holds: its name, the optimiser and the discount."""

    name: str = ""
    lr: float = 5e-4
    """Learning rate."""
    optimizer: str = "adam"
    """``adam`` or ``rmsprop``."""
    weight_decay: float = 0.0
    """L2 weight decay of the optimiser, added to the gradient before its scaling."""
    optimizer_eps: float = 1e-8
    """``eps`` of Adam or RMSprop, added to the root of the squared-gradient average
    (PyTorch's default 1e-8; the official ACE code's RMSprop: 1e-5). With weight decay, a
    weight the loss leaves without gradient shrinks by about ``lr`` per update while the
    decay term exceeds ``eps``, not by ``lr * weight_decay``: at 1e-8 such weights are
    zero within a few hundred updates (docs/optimizer.md)."""
    grad_clip: float = 10.0
    """Max gradient norm (0 turns clipping off)."""
    gamma: float = 0.99
    """Discount per environment step."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"algo.optimizer must be one of {sorted(OPTIMIZERS)} (got {self.optimizer!r})")
        if not self.lr > 0:
            raise ValueError(f"algo.lr must be positive (got {self.lr})")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"algo.gamma must be in [0, 1] (got {self.gamma})")
        for key in ("weight_decay", "grad_clip"):
            v = getattr(self, key)
            if not 0.0 <= v < float("inf"):
                raise ValueError(f"algo.{key} must be finite and >= 0 (got {v})")
        if not 0.0 < self.optimizer_eps < float("inf"):
            raise ValueError(f"algo.optimizer_eps must be finite and > 0 (got {self.optimizer_eps})")


@dataclass
class QLearningConfig(OptimConfig):
    """Hyper-parameters common to every value-based learner (defaults: the paper's
    Spiders table)."""

    nstep: int = 1
    """Environment steps of the return before the bootstrap: each replayed transition
    carries the discounted reward of up to ``nstep`` steps and bootstraps from the state
    after them with ``gamma ** nstep`` (the official code: 3 on SMAC). 1: one-step
    targets, as Eq. 1."""
    double_q: bool = False
    """Online network selects, target network evaluates."""
    target_theta: float = 0.02
    """Polyak momentum of the target network, applied after every update."""
    loss: str = "mse"
    """``mse`` or ``huber``."""
    lr_schedule: str = "constant"
    """``constant`` or ``cosine``: from ``lr`` down to ``lr_min`` over ``lr_decay_updates``
    gradient steps, then ``lr_min``."""
    lr_min: float = 0.0
    """Final learning rate of the cosine schedule."""
    lr_decay_updates: int = 0
    """Length of the cosine schedule in gradient steps (> 0 with ``cosine``)."""

    def learning_rate(self, update: int) -> float:
        """The learning rate of gradient step number ``update`` (0-based)."""
        if self.lr_schedule == "constant":
            return self.lr
        frac = min(update / self.lr_decay_updates, 1.0)
        return self.lr_min + 0.5 * (self.lr - self.lr_min) * (1.0 + math.cos(math.pi * frac))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in LOSSES:
            raise ValueError(f"algo.loss must be one of {sorted(LOSSES)} (got {self.loss!r})")
        if not 0.0 <= self.target_theta <= 1.0:
            raise ValueError(f"algo.target_theta must be in [0, 1] (got {self.target_theta})")
        if isinstance(self.nstep, bool) or not isinstance(self.nstep, int) or self.nstep < 1:
            raise ValueError(f"algo.nstep must be an int >= 1 (got {self.nstep!r})")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"algo.lr_schedule must be 'constant' or 'cosine' (got {self.lr_schedule!r})")
        if self.lr_schedule == "cosine" and (self.lr_decay_updates <= 0 or not 0 <= self.lr_min <= self.lr):
            raise ValueError(f"algo.lr_schedule=cosine needs algo.lr_decay_updates > 0 and "
                             f"0 <= algo.lr_min <= algo.lr (got {self.lr_decay_updates}, {self.lr_min})")


def torch_device(name) -> torch.device:
    """``train.device`` as the device tensors report (``"cuda"`` becomes ``cuda:0``); a
    device this machine lacks is a ``ValueError`` that says so."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"train.device={name!r} is not a device torch knows ({e})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"train.device={name!r}: this torch ({torch.__version__}) sees no "
                             f"CUDA device; use train.device=cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif device.index >= torch.cuda.device_count():
            raise ValueError(f"train.device={name!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    return device


#: ``algo.order``: the agents' order in the sequential decision.
ORDERS = ("default", "random", "sorted")


def check_order(order: str) -> None:
    """Refuse an ``algo.order`` that is not one of :data:`ORDERS`."""
    if order not in ORDERS:
        raise ValueError(f"algo.order must be one of {list(ORDERS)} (got {order!r})")


class LearnerBase:
    """What every learner owns: ``self.net`` (an ``nn.Module`` holding every trained
    part) on ``self.device``, its optimiser, the count of gradient steps (the position in
    a learning-rate schedule) and the first-batch check.

    Subclasses add what they learn with (:class:`QLearner`: a target network) and save
    it by extending :meth:`state_dict` and :meth:`load_state_dict`.
    """

    compiled_kernels: Optional[bool] = None
    """Whether the learner's networks have ``train.compile`` kernels. ``False`` makes a
    config with ``train.compile=true`` fail when it is loaded; ``None`` (unknown: a
    learner of your own) is checked when the trainer is built."""

    def __init__(self, net: nn.Module, cfg: OptimConfig, device) -> None:
        self.cfg, self.device = cfg, torch_device(device)
        self.net = net.to(self.device)
        self.optimizer = OPTIMIZERS[cfg.optimizer](
            self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, eps=cfg.optimizer_eps)
        self.num_updates = 0
        self._checked = False  # inputs are validated until one batch has passed
        self._compiled_step: Optional[Callable[[], object]] = None  # compile_optimizer
        self._lr_tensor: Optional[Tensor] = None
        self._step_checked = False  # the compiled step has matched the eager one once

    def _check(self) -> bool:
        """True for the first batch only: validate it against the schema. A task's later
        batches share its builder, so the checks are skipped after it (their cost:
        docs/benchmarks.md)."""
        first, self._checked = not self._checked, True
        return first

    def on_device(self, graphs: Batch) -> Batch:
        """``graphs`` on the learner's device; a batch whose tensor attributes are all
        there already is returned as it is (PyG's ``Batch.to`` would set every attribute
        anew). Batches hold plain tensors only (no nested ones)."""
        if all(v.device == self.device for store in graphs.stores for v in store.values()
               if isinstance(v, Tensor)):
            return graphs
        return graphs.to(self.device)

    @staticmethod
    def no_compiled_kernels(name: str) -> str:
        """The error of ``train.compile`` set for a learner without compiled kernels."""
        return (f"train.compile: {name} has no compiled kernels (they value ACE's "
                f"candidates); set it to false")

    def use_compiled(self, on: bool = True) -> int:
        """Switch the compiled candidate kernels (``train.compile``) of the value heads
        of the learner's networks; returns how many heads it switched (0: the learner
        has none, e.g. QMIX)."""
        from acegnn.nn.value_head import use_compiled

        return sum(use_compiled(net, on) for net in (self.net, getattr(self, "target_net", None))
                   if isinstance(net, nn.Module))

    def compile_optimizer(self) -> None:
        """Step the optimiser through ``torch.compile`` from now on
        (``train.compile_optimizer``): its update of each parameter becomes one fused
        pass over the weight, its gradient and its statistics, instead of one pass per
        operation. The same weights to float rounding; the learning rate is handed over as
        a tensor, so a schedule does not recompile it."""
        self._lr_tensor = torch.tensor(float(self.learning_rate()), device=self.device)
        self._compiled_step = torch.compile(self.optimizer.step)
        self._step_checked = False

    def _eager_step_of_copies(self, lr: float) -> List[Tensor]:
        """The parameters after one eager step at ``lr`` of a copy of the optimiser, its
        state and the gradients copied from where they stand: what the compiled step
        must give (checked once, :func:`acegnn.utils.compiled.check_compiled`)."""
        groups, copies = [], []
        for group in self.optimizer.param_groups:
            params = []
            for p in group["params"]:
                q = p.detach().clone().requires_grad_(p.requires_grad)
                q.grad = None if p.grad is None else p.grad.detach().clone()
                params.append(q)
            copies += params
            groups.append({**group, "params": params})
        twin = type(self.optimizer)(groups)
        state = copy.deepcopy(self.optimizer.state_dict())
        for group in state["param_groups"]:  # the hyperparameters the twin steps with
            group["lr"] = lr
        twin.load_state_dict(state)
        twin.step()
        return copies

    def learning_rate(self) -> float:
        """The learning rate of the next gradient step (the config's schedule, if any)."""
        schedule = getattr(self.cfg, "learning_rate", None)
        return self.cfg.lr if schedule is None else schedule(self.num_updates)

    def gradient_step(self, loss: Tensor, what: str = "loss") -> Dict[str, float]:
        """Backward, clip at ``algo.grad_clip`` and step the optimiser at
        :meth:`learning_rate`. A loss that is not finite raises ``FloatingPointError``
        (named ``what``) before the network is touched.

        Returns:
            ``grad_norm`` (before clipping) and ``lr`` (the rate used).
        """
        if not bool(torch.isfinite(loss)):
            raise FloatingPointError(f"the {what} is {loss.item()}; stopping before the "
                                     f"network is corrupted (lower algo.lr or check rewards)")
        self.optimizer.zero_grad(set_to_none=True)
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), clip)
            lr = self.learning_rate()
            if self._compiled_step is None:
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self.optimizer.step()
            else:
                self._lr_tensor.fill_(lr)
                for group in self.optimizer.param_groups:
                    group["lr"] = self._lr_tensor
                reference = None if self._step_checked else self._eager_step_of_copies(lr)
                self._compiled_step()
                if reference is not None:
                    params = [p.detach() for g in self.optimizer.param_groups for p in g["params"]]
                    check_compiled("optimiser step", params, reference, "train.compile_optimizer",
                                   atol=1e-6)
                    self._step_checked = True
            self.num_updates += 1
        return {"grad_norm": grad_norm.item(), "lr": lr}

    def state_dict(self) -> Dict:
        """The network, the optimiser and the update count, as an eager optimiser has them:
        :meth:`compile_optimizer`'s rate tensor is saved as a float, and its ``capturable``
        flag (which ``torch.compile`` sets for good on a CUDA optimiser) as the
        optimiser's default, so that the checkpoint steps on any device."""
        optimizer = self.optimizer.state_dict()
        for group in optimizer["param_groups"]:
            if isinstance(group["lr"], Tensor):
                group["lr"] = group["lr"].item()
            if "capturable" in group:
                group["capturable"] = self.optimizer.defaults.get("capturable", False)
        return {"net": self.net.state_dict(), "optimizer": optimizer,
                "num_updates": self.num_updates}

    def load_state_dict(self, state: Dict) -> None:
        try:
            self.net.load_state_dict(state["net"])
        except RuntimeError as e:
            raise ValueError(f"the checkpoint does not match this model: {e}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = state["num_updates"]


class QLearner(LearnerBase):
    """A value-based learner: :class:`LearnerBase` with a Polyak target copy of the
    network, ``self.target_net``, updated after every gradient step."""

    def __init__(self, net: nn.Module, cfg: QLearningConfig, device) -> None:
        super().__init__(net, cfg, device)
        self.target_net = copy.deepcopy(self.net)
        for p in self.target_net.parameters():
            p.requires_grad_(False)

    def bootstrap_discount(self, terminated: Tensor, discount: Optional[Tensor] = None) -> Tensor:
        r"""The factor of each sample's bootstrap value ``[B]``: ``discount`` as replayed
        (:math:`\gamma^m` after an ``m``-step return, 0 after a termination; ``algo.nstep``)
        or, when it is ``None``, the one-step :math:`\gamma (1 - d)`."""
        if discount is not None:
            return discount.to(self.device)
        return self.cfg.gamma * (~terminated.to(self.device)).float()

    def td_loss(self, value: Tensor, target: Tensor, weight: Optional[Tensor] = None) -> Tensor:
        """``algo.loss`` of ``value`` against ``target``, averaged; with ``weight`` (of
        their shape: importance-sampling weights of a prioritized replay) each term
        weighted, the mean still over all terms."""
        if weight is None:
            return LOSSES[self.cfg.loss](value, target)
        return (LOSSES[self.cfg.loss](value, target, reduction="none") * weight).mean()

    def step(self, loss: Tensor) -> Dict[str, float]:
        """:meth:`gradient_step` on the TD ``loss``, then the target update."""
        out = self.gradient_step(loss, "TD loss")
        with phase("optimizer"):
            self.soft_update()
        return out

    @torch.no_grad()
    def soft_update(self) -> None:
        for p, tp in zip(self.net.parameters(), self.target_net.parameters()):
            tp.lerp_(p, self.cfg.target_theta)

    def state_dict(self) -> Dict:
        return {**super().state_dict(), "target_net": self.target_net.state_dict()}

    def load_state_dict(self, state: Dict) -> None:
        super().load_state_dict(state)
        try:
            self.target_net.load_state_dict(state["target_net"])
        except RuntimeError as e:
            raise ValueError(f"the checkpoint does not match this model: {e}") from None
