"""Individual Q-networks and the mixers of the value-factorisation baselines.

* :class:`AgentQNet`: one MLP shared by all agents, ``obs -> Q(o_i, .)``.
* :class:`VDNMixer`: ``Q_tot = sum_i Q_i`` (Sunehag et al., 2018).
* :class:`QMixer`: monotonic mixing by hyper-networks over the global state
  (Rashid et al., 2018): non-negative weights, so ``dQ_tot / dQ_i >= 0``.
* :class:`QTranBase`: the joint action-value network ``Q_jt(s, u)`` and the state value
  ``V(s)`` of QTRAN-base (Son et al., 2019).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from acegnn.nn.unit_encoder import mlp


class AgentQNet(nn.Module):
    """Shared individual Q-network.

    Shapes:
        - **input:** ``[B, n, obs_dim]``
        - **output:** ``[B, n, num_actions]``
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.obs_dim, self.num_actions, self.hidden = obs_dim, num_actions, hidden
        self.body = mlp(obs_dim, hidden, layers)
        self.head = nn.Linear(hidden, num_actions)

    def forward(self, obs: Tensor) -> Tensor:
        return self.head(self.body(obs))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.obs_dim}, {self.num_actions}, hidden={self.hidden})"


class VDNMixer(nn.Module):
    """``[B, n]`` chosen Q_i -> ``[B]`` Q_tot by summation."""

    def forward(self, q: Tensor, state: Tensor) -> Tensor:
        return q.sum(dim=1)


class QMixer(nn.Module):
    """Monotonic mixer: ``Q_tot = w2^T elu(W1^T q + b1) + b2`` with ``W1, w2 >= 0`` given
    by hyper-networks of the global state.

    Args:
        n_agents (int): Number of agents.
        state_dim (int): Global state width.
        embed (int, optional): Mixing embedding width. (default: :obj:`32`)
        hyper_hidden (int, optional): Hidden width of the hyper-networks. (default: :obj:`64`)
    """

    def __init__(self, n_agents: int, state_dim: int, embed: int = 32, hyper_hidden: int = 64) -> None:
        super().__init__()
        self.n_agents, self.embed = n_agents, embed
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hyper_hidden), nn.ReLU(),
                                      nn.Linear(hyper_hidden, n_agents * embed))
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hyper_hidden), nn.ReLU(),
                                      nn.Linear(hyper_hidden, embed))
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, q: Tensor, state: Tensor) -> Tensor:
        B = q.size(0)
        w1 = self.hyper_w1(state).abs().view(B, self.n_agents, self.embed)
        b1 = self.hyper_b1(state).view(B, 1, self.embed)
        hidden = F.elu(torch.bmm(q.view(B, 1, self.n_agents), w1) + b1)  # [B, 1, embed]
        w2 = self.hyper_w2(state).abs().view(B, self.embed, 1)
        return (torch.bmm(hidden, w2).view(B) + self.hyper_b2(state).view(B))


class QTranBase(nn.Module):
    """``Q_jt(s, u)`` from the state and the one-hot joint action, and ``V(s)``.

    Args:
        hidden (int, optional): Width of both networks. (default: :obj:`64`)
        layers (int, optional): Hidden fc + ReLU layers of ``Q_jt``; ``V`` has one.
            (default: :obj:`2`)
    """

    def __init__(self, n_agents: int, num_actions: int, state_dim: int, hidden: int = 64,
                 layers: int = 2) -> None:
        super().__init__()
        self.n_agents, self.num_actions = n_agents, num_actions
        self.q_jt = nn.Sequential(*mlp(state_dim + n_agents * num_actions, hidden, layers),
                                  nn.Linear(hidden, 1))
        self.v = nn.Sequential(*mlp(state_dim, hidden, 1), nn.Linear(hidden, 1))

    def joint_q(self, state: Tensor, actions: Tensor) -> Tensor:
        """``[B, state_dim]``, ``[B, n]`` action ids -> ``[B]``"""
        onehot = F.one_hot(actions, self.num_actions).to(state.dtype).flatten(1)
        return self.q_jt(torch.cat([state, onehot], dim=1)).squeeze(-1)

    def value(self, state: Tensor) -> Tensor:
        return self.v(state).squeeze(-1)
