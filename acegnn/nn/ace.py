"""The ACE value network: unit encoder, action encoder and value encoder."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Union

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.index import UnitIndex, store_of, unit_index
from acegnn.graph.schema import GraphSchema
from acegnn.graph.state import as_batch
from acegnn.nn.action_encoder import ActionEncoder
from acegnn.nn.init import MLPConfig, init_relu_layers
from acegnn.nn.rollout import Rollout, sequential_rollout
from acegnn.nn.selectors import Forced
from acegnn.nn.se_state import EncodedState
from acegnn.nn.unit_encoder import UnitEncoder
from acegnn.nn.value_head import ValueHead


#: Values of ``model.messages``.
MESSAGES = ("kind", "pair")
#: Values of ``model.passive_input``.
PASSIVE_INPUTS = ("features", "embedding")


@dataclass
class ModelConfig(MLPConfig):
    """Hyper-parameters of :class:`ACENetwork`: ``hidden``, ``layers`` and ``init`` of
    every MLP (:class:`~acegnn.nn.init.MLPConfig`) and the graph parts below."""

    conv: str = "ace"
    """Message-passing step of the unit encoder: ace (the paper's), relation (the official
    code's), gatv2, transformer, a registered name, a layer of torch_geometric.nn that
    reads edge features (GINEConv, GENConv, GeneralConv, ...), or package.module:Class
    (docs/encoders.md)."""
    conv_kwargs: Dict[str, Any] = field(default_factory=dict)
    """Arguments of the message-passing step's constructor (e.g. heads: 4)."""
    conv_layers: int = 1
    """Message-passing steps one after the other, each with its own weights."""
    pool: str = "mean"
    """Pooling of the value encoder: ``mean``, ``sum``, ``max``, ``mean_max`` (the same
    per-unit features averaged and maxed) or ``mean_max_split`` (the official football
    code's: per-unit rows twice ``hidden`` wide, the first half averaged, the second
    maxed; :class:`~acegnn.nn.value_head.ValueHead`)."""
    passive: bool = True
    """Passive action embeddings (False: the ACE-w/o-IA ablation)."""
    passive_width: Optional[int] = None
    """Width of the passive encoder's inner layers when ``layers`` > 1 (null: ``hidden``;
    the football issue's probe ran with hidden x targeted kinds, 2432)."""
    value_layers: Optional[int] = None
    """Depth of the value encoders alone (the per-unit MLP and the readout after pooling;
    ACE-CTDE's individual values and ACE-PPO's logits too; null: ``layers``): where a
    chosen action's message meets the unit it changes."""
    messages: str = "kind"
    """Messages of targeted actions: ``kind`` (the paper's: a learnable active vector per
    kind, a passive message from the actor's node features) or ``pair`` (the official
    SMAC code's: both from an MLP over the actor's and the target's embeddings and their
    edge's features)."""
    passive_input: str = "features"
    """What the passive encoder (``messages: kind``) reads of the acting unit: its node
    ``features`` (the paper's) or its ``embedding``, the unit encoder's output (the
    official football code's: ``_action_encoder`` over the agent's embedding)."""

    @property
    def value_depth(self) -> int:
        """The depth of every value encoder (ACE's value head, ACE-CTDE's individual one,
        ACE-PPO's logit head): ``value_layers``, or ``layers`` where it is null."""
        return self.layers if self.value_layers is None else self.value_layers

    def __post_init__(self) -> None:
        from acegnn.nn.unit_encoder import unit_conv
        from acegnn.nn.value_head import POOLS

        super().__post_init__()
        unit_conv(self.conv)  # a clear error for a step that cannot be found
        if self.conv_layers < 1:
            raise ValueError(f"model.conv_layers must be at least 1 (got {self.conv_layers})")
        if self.pool not in POOLS:
            raise ValueError(f"model.pool must be one of {sorted(POOLS)} (got {self.pool!r})")
        if self.value_layers is not None and self.value_layers < 1:
            raise ValueError(f"model.value_layers must be null or >= 1 (got {self.value_layers})")
        if self.passive_width is not None and self.passive_width < 1:
            raise ValueError(f"model.passive_width must be null or >= 1 (got {self.passive_width})")
        if self.messages not in MESSAGES:
            raise ValueError(f"model.messages must be one of {list(MESSAGES)} (got {self.messages!r})")
        if self.passive_input not in PASSIVE_INPUTS:
            raise ValueError(f"model.passive_input must be one of {list(PASSIVE_INPUTS)} "
                             f"(got {self.passive_input!r})")


class ACENetwork(nn.Module):
    r"""V of sequentially expanded states, built from a :class:`GraphSchema`.

    The state is encoded once (:meth:`encode`); SE-states add action messages to the
    unit embeddings (:mod:`acegnn.nn.se_state`); :meth:`rollout` makes the sequential
    decision and returns the value of every candidate.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int, optional): Embedding width. (default: :obj:`128`)
        conv (str, optional): Message-passing step of the unit encoder, as
            :func:`acegnn.nn.unit_encoder.unit_conv` reads it. (default: :obj:`"ace"`)
        pool (str, optional): Pooling of the value encoder. (default: :obj:`"mean"`)
        passive (bool, optional): Passive action embeddings; :obj:`False` is the
            ACE-w/o-IA ablation. (default: :obj:`True`)
        conv_kwargs (dict, optional): Extra arguments of the message-passing step.
        layers (int, optional): Depth of the node, edge, passive-action and value MLPs.
            (default: :obj:`1`, the paper's fc + ReLU)
        init (str, optional): Initialisation scheme, ``"torch"`` or ``"he"`` (see
            :mod:`acegnn.nn.init`). (default: :obj:`"torch"`)
        conv_layers (int, optional): Message-passing steps. (default: :obj:`1`)
        passive_width (int, optional): Inner width of a deep passive encoder.
            (default: :obj:`None`, ``hidden``)
        messages (str, optional): Messages of targeted actions, ``"kind"`` or ``"pair"``
            (:class:`ModelConfig`). (default: :obj:`"kind"`)
        value_layers (int, optional): Depth of the value encoder alone. (default:
            :obj:`None`, ``layers``)
        passive_input (str, optional): What the passive encoder reads of the actor,
            ``"features"`` or ``"embedding"`` (:class:`ModelConfig`). (default:
            :obj:`"features"`)
    """

    def __init__(self, schema: GraphSchema, hidden: int = 128, conv: str = "ace",
                 pool: str = "mean", passive: bool = True,
                 conv_kwargs: Optional[dict] = None, layers: int = 1,
                 init: str = "torch", conv_layers: int = 1,
                 passive_width: Optional[int] = None, messages: str = "kind",
                 value_layers: Optional[int] = None, passive_input: str = "features") -> None:
        super().__init__()
        if not isinstance(hidden, int) or hidden <= 0:
            raise ValueError(f"hidden must be a positive int (got {hidden!r})")
        self.schema, self.hidden, self.layers = schema, hidden, layers
        self.unit_encoder = UnitEncoder(schema, hidden, conv, conv_kwargs, layers, conv_layers)
        if messages not in MESSAGES:
            raise ValueError(f"messages must be one of {list(MESSAGES)} (got {messages!r})")
        if passive_input not in PASSIVE_INPUTS:
            raise ValueError(f"passive_input must be one of {list(PASSIVE_INPUTS)} "
                             f"(got {passive_input!r})")
        self.action_encoder = ActionEncoder(schema, hidden, passive, layers, passive_width,
                                            pairs=messages == "pair",
                                            embedded=passive_input == "embedding")
        self.value_head = ValueHead(hidden, pool, layers if value_layers is None else value_layers)
        self.init = init
        init_relu_layers(self, init)

    @classmethod
    def from_config(cls, schema: GraphSchema, cfg: ModelConfig) -> "ACENetwork":
        return cls(schema, hidden=cfg.hidden, conv=cfg.conv, pool=cfg.pool, passive=cfg.passive,
                   conv_kwargs=dict(cfg.conv_kwargs), layers=cfg.layers, init=cfg.init,
                   conv_layers=cfg.conv_layers, passive_width=cfg.passive_width,
                   messages=cfg.messages, value_layers=cfg.value_layers,
                   passive_input=cfg.passive_input)

    def reset_parameters(self) -> None:
        self.unit_encoder.reset_parameters()
        self.action_encoder.reset_parameters()
        self.value_head.reset_parameters()
        init_relu_layers(self, self.init)

    def encode(self, data: Union[HeteroData, Batch], check: bool = True,
               passive_rows: Optional[Callable[[UnitIndex], Optional[Tensor]]] = None
               ) -> EncodedState:
        """Encode a state or a batch of states once.

        Args:
            data (HeteroData or Batch): States following ``self.schema``.
            check (bool, optional): Validate the input against the schema.
                (default: :obj:`True`)
            passive_rows (callable, optional): Given the batch's :class:`UnitIndex`, the
                action rows whose messages will be read (or ``None``: any). Only their
                passive embeddings (and pair messages) are then computed; the tables'
                other entries are zero (:meth:`ActionEncoder.passive_table`,
                :meth:`ActionEncoder.pair_table`). (default: every entry)
        """
        batch = as_batch(data)
        index = unit_index(self.schema, batch, check=check)
        nodes = {t: store_of(batch, t) for t in self.schema.node_types}
        edges = {et: store_of(batch, et) for et in self.schema.edge_types}
        x_dict = {t: store.x for t, store in nodes.items()}
        ei = {et: store.edge_index for et, store in edges.items()}
        ea = {et: store.edge_attr for et, store in edges.items()}
        alive = {t: store.alive for t, store in nodes.items() if "alive" in store}
        h = self.unit_encoder(x_dict, ei, ea, alive)
        first = h[self.schema.node_type_names[0]]
        units = first.new_empty(index.num_units, self.hidden)
        for t in self.schema.node_types:
            units = units.index_put((index.flat[t],), h[t])
        rows = None if passive_rows is None else passive_rows(index)
        ae = self.action_encoder
        passive, block = ae.passive_table(h if ae.embedded else x_dict, index, rows)
        pair, pair_row = ae.pair_table(units, index, ei, ea, rows)
        return EncodedState(index=index, units=units, active=ae.active, passive=passive,
                            passive_col=ae.passive_col, passive_block=block, pair=pair,
                            pair_row=pair_row)

    def value(self, units: Tensor, enc: EncodedState) -> Tensor:
        """V of whole SE-states given their unit embeddings ``[U, H]`` -> ``[B]``."""
        return self.value_head(units, enc.index)

    def rollout(self, data: Union[HeteroData, Batch], **kwargs) -> Rollout:
        """Decision with rollout; see :func:`acegnn.nn.rollout.sequential_rollout`."""
        return sequential_rollout(self, data, **kwargs)

    def value_actions(self, data: Union[HeteroData, Batch], actions: Tensor,
                      order: Union[str, Tensor] = "default", successors: bool = False,
                      generator: Optional[torch.Generator] = None,
                      check: bool = True) -> Rollout:
        """V of the SE-states that given joint actions lead through (teacher forcing).

        Args:
            data (HeteroData or Batch): The states.
            actions (Tensor): ``[num_agents]`` rows of the batch's action table.
            order (str or Tensor, optional): Decision order (see
                :func:`acegnn.nn.rollout.agent_ranks`). (default: :obj:`"default"`)
            successors (bool, optional): Also value every candidate of the agents after
                the first (``max_value`` after each given action: what Eq. 1's targets
                inside a state need). (default: :obj:`False`: the given actions'
                SE-states only, in ``chosen_value``)
        """
        return self.rollout(data, order=order, selector=Forced(actions), generator=generator,
                            check=check, values="successors" if successors else "chosen")

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(hidden={self.hidden}, "
                f"conv={self.unit_encoder.conv_name}, pool={self.value_head.pool}, "
                f"passive={self.action_encoder.passive}, "
                f"messages={'pair' if self.action_encoder.pairs else 'kind'}, "
                f"layers={self.layers}, value_layers={self.value_head.layers})")
