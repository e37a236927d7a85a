"""Unit encoder: per-type node and edge encoders, then message-passing steps.

The message-passing step (:class:`UnitConv`) is picked by :func:`unit_conv`: a name
registered in :data:`UNIT_CONVS` (:func:`register_unit_conv`), the name of a PyG layer
that reads edge features (``GINEConv``: :class:`PyGUnitConv` adapts it), or
``package.module:Class``, imported when the network is built. A step takes the node embeddings ``h_dict``, the
``edge_index_dict`` and the edge embeddings ``edge_emb_dict`` (all of width
``hidden``) and returns new node embeddings of the same shapes; the edges of units that
are not alive are removed before. A step with ``encodes_edges = True`` is instead called
as ``step.forward_encoding(h_dict, edge_index_dict, edge_attr_dict, edge_encoders,
edge_keep_dict)``: it encodes the edges itself (so that it need not hold every edge
embedding at once, see :func:`edge_sum`) and must leave out the edges that
``edge_keep_dict`` (``{e: [E_e]}`` bool) marks ``False``.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, Optional, Protocol, Type, runtime_checkable

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor, nn
from torch_geometric.nn import GATv2Conv, HeteroConv, TransformerConv
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import scatter

from acegnn.graph.schema import EdgeType, GraphSchema

UNIT_CONVS: Dict[str, Type[nn.Module]] = {}


@runtime_checkable
class UnitConv(Protocol):
    """The contract of a message-passing step of the unit encoder.

    Built as ``cls(schema, hidden, **conv_kwargs)`` (``model.conv_kwargs``), it is an
    ``nn.Module`` whose ``forward(h_dict, edge_index_dict, edge_emb_dict)`` maps the node
    embeddings ``{type: [N_t, hidden]}`` to new ones of the same shapes, given every edge
    type's ``[2, E]`` indices and ``[E, hidden]`` edge embeddings (the edge encoders'
    output). The edges from and to dead units are already removed, so a dead unit
    receives nothing and its row may be returned as it came (nothing downstream reads
    it). ``reset_parameters()`` re-initialises its weights. It may assume nothing about
    the order of edges, and must be a function of the graph: batched graphs are one
    graph of disjoint parts. A class with ``uses_edge_encoders = False`` gets no edge
    encoders, and the edges' raw features ``[E, F_e]`` in place of their embeddings.
    """

    def forward(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                edge_emb_dict: Dict[EdgeType, Tensor]) -> Dict[str, Tensor]: ...

    def reset_parameters(self) -> None: ...


def register_unit_conv(name: str) -> Callable[[Type[nn.Module]], Type[nn.Module]]:
    """Class decorator adding a message-passing step to :data:`UNIT_CONVS`.

    The class is built as ``cls(schema, hidden, **kwargs)``.
    """

    def deco(cls: Type[nn.Module]) -> Type[nn.Module]:
        if name in UNIT_CONVS:
            raise ValueError(f"a unit conv named '{name}' is already registered")
        UNIT_CONVS[name] = cls
        return cls

    return deco


def edge_key(et: EdgeType) -> str:
    """A ModuleDict key for an edge type."""
    return "__".join(et)


class _NarrowInputLinear(torch.autograd.Function):
    """``F.linear`` whose weight gradient is computed as ``(x^T g)^T`` ``[F, H] -> [H, F]``
    instead of ``g^T x``: the same sums, and for inputs much narrower than the output (an
    edge's 5 features to 256) several times faster on CPU (``[9600, 5]`` edges: 2.7 ms
    against 12 ms)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors  # [N, F], [H, F]; grad [N, H]
        grad_x = grad.mm(weight) if ctx.needs_input_grad[0] else None
        grad_w = x.t().mm(grad).t().contiguous() if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class NarrowLinear(nn.Linear):
    """:class:`torch.nn.Linear` for an input narrower than its output (node and edge
    features): the same parameters and values, the weight gradient by
    :class:`_NarrowInputLinear`."""

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            if x.dim() == 2:  # not a view: the ReLU after it works in place
                return _NarrowInputLinear.apply(x, self.weight, self.bias)
            # on rows [N, F]: a view made inside a Function may not be changed in place
            out = _NarrowInputLinear.apply(x.reshape(-1, x.size(-1)), self.weight, self.bias)
            return out.view(*x.shape[:-1], out.size(-1))
        return super().forward(x)


def mlp(in_dim: int, out_dim: int, layers: int = 1, width: Optional[int] = None) -> nn.Sequential:
    """``layers`` times (fully connected + ReLU); ``layers=1`` is the paper's block. The
    layers before the last are ``width`` wide (default: ``out_dim``)."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1 (got {layers})")
    width = out_dim if width is None else width
    dims = [in_dim] + [width] * (layers - 1) + [out_dim]
    mods = []
    for i in range(layers):
        linear = NarrowLinear if dims[i] < dims[i + 1] else nn.Linear
        mods += [linear(dims[i], dims[i + 1]), nn.ReLU(inplace=True)]
    return nn.Sequential(*mods)


def reset_mlp(m: nn.Sequential) -> None:
    for layer in m:
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()


#: Edges encoded at a time by :func:`edge_sum` (16 MB of embeddings at width 256).
EDGE_CHUNK = 16384


class _EdgeSum(torch.autograd.Function):
    """:func:`edge_sum` that keeps no edge embedding for the backward pass: each chunk of
    edges is encoded again there."""

    @staticmethod
    def forward(ctx, edge_attr: Tensor, dst: Tensor, num_rows: int, mlp: nn.Module,
                *params: Tensor) -> Tensor:
        ctx.mlp = mlp
        ctx.save_for_backward(edge_attr, dst)
        out = None
        for s in range(0, max(edge_attr.size(0), 1), EDGE_CHUNK):
            emb = mlp(edge_attr[s:s + EDGE_CHUNK])
            out = emb.new_zeros(num_rows, emb.size(1)) if out is None else out
            out.index_add_(0, dst[s:s + EDGE_CHUNK], emb)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        edge_attr, dst = ctx.saved_tensors
        params = list(ctx.mlp.parameters())
        wanted = [p for p, need in zip(params, ctx.needs_input_grad[4:]) if need]
        grads = {p: torch.zeros_like(p) for p in wanted}
        grad_attr = torch.zeros_like(edge_attr) if ctx.needs_input_grad[0] else None
        for s in range(0, edge_attr.size(0), EDGE_CHUNK):
            with torch.enable_grad():
                attr = edge_attr[s:s + EDGE_CHUNK].detach().requires_grad_(grad_attr is not None)
                emb = ctx.mlp(attr)
            inputs = wanted + ([attr] if grad_attr is not None else [])
            got = torch.autograd.grad(emb, inputs, grad_out.index_select(0, dst[s:s + EDGE_CHUNK]),
                                      allow_unused=True)
            for p, g in zip(wanted, got):
                if g is not None:
                    grads[p] += g
            if grad_attr is not None and got[-1] is not None:
                grad_attr[s:s + EDGE_CHUNK] = got[-1]
        return (grad_attr, None, None, None, *(grads.get(p) for p in params))


def edge_sum(mlp: nn.Module, edge_attr: Tensor, dst: Tensor, out: Tensor) -> Tensor:
    r"""``out`` plus, in row ``dst[e]``, the embedding ``mlp(edge_attr[e])`` of every edge.

    The edges are encoded :data:`EDGE_CHUNK` at a time; with autograd, a chunk is
    encoded again in the backward pass instead of kept. A batch of 320 27m_vs_30m
    states has a million edges: their embeddings alone would take 1 GB.

    Shapes:
        - **input:** ``edge_attr`` ``[E, F]``, ``dst`` ``[E]`` rows of ``out``
          ``[N, H]``
        - **output:** ``[N, H]`` (``out`` itself where it was updated in place)
    """
    if torch.is_grad_enabled():
        params = list(mlp.parameters())
        if edge_attr.requires_grad or any(p.requires_grad for p in params):
            if edge_attr.size(0) > EDGE_CHUNK:
                return out + _EdgeSum.apply(edge_attr, dst, out.size(0), mlp, *params)
            return out.index_add(0, dst, mlp(edge_attr))  # one chunk: plain autograd
    for s in range(0, edge_attr.size(0), EDGE_CHUNK):
        out.index_add_(0, dst[s:s + EDGE_CHUNK], mlp(edge_attr[s:s + EDGE_CHUNK]))
    return out


def _rows(x: Tensor, sel: Optional[Tensor]) -> Tensor:
    """Rows ``sel`` of ``x``; every row where ``sel`` is ``None``."""
    return x if sel is None else x.index_select(0, sel)


@register_unit_conv("ace")
class MeanEdgeConv(nn.Module):
    r"""The paper's unit embedding: node embedding plus the mean of the embeddings of
    the unit's incoming edges (all edge types together).

    .. math::
        e_u(u_j) = h_j + \frac{1}{|\mathcal{E}_j|} \sum_{(i, j) \in \mathcal{E}_j} e_{ij}

    Units without incoming edges keep their node embedding. The unit encoder calls
    :meth:`forward_encoding`, which encodes the edges a chunk at a time and only those
    between live units: the edge features are narrow (5 wide on a battle map), their
    embeddings ``hidden`` wide, so selecting the live edges first costs a fraction of
    encoding the others (a quarter to a half of a battle's edges touch a dead unit).
    """

    encodes_edges = True

    def __init__(self, schema: GraphSchema, hidden: int) -> None:
        super().__init__()
        self.schema = schema
        self.hidden = hidden

    def reset_parameters(self) -> None:
        pass

    def forward(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                edge_emb_dict: Dict[EdgeType, Tensor]) -> Dict[str, Tensor]:
        return self._mean(h_dict, edge_index_dict, None, lambda et, sel, dst, out: out.index_add(
            0, dst, _rows(edge_emb_dict[et], sel)))

    def forward_encoding(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                         edge_attr_dict: Dict[EdgeType, Tensor], edge_encoders: nn.ModuleDict,
                         edge_keep_dict: Optional[Dict[EdgeType, Tensor]] = None) -> Dict[str, Tensor]:
        """:meth:`forward` from the edge features, encoded by ``edge_encoders`` (keyed by
        :func:`edge_key`), leaving out the edges ``edge_keep_dict`` marks ``False``."""
        return self._mean(h_dict, edge_index_dict, edge_keep_dict, lambda et, sel, dst, out: edge_sum(
            edge_encoders[edge_key(et)], _rows(edge_attr_dict[et], sel), dst, out))

    def _mean(self, h_dict, edge_index_dict, edge_keep_dict, add) -> Dict[str, Tensor]:
        # sums over every edge type of the kept edges; add(edge type, the kept edges (None:
        # every one), their destinations, the sums) adds their embeddings to the sums
        total = {t: h.new_zeros(h.size(0), self.hidden) for t, h in h_dict.items()}
        count: Dict[str, Tensor] = {}
        for et, ei in edge_index_dict.items():
            t = et[2]
            sel, dst = None, ei[1]
            if edge_keep_dict is not None and et in edge_keep_dict:
                sel = edge_keep_dict[et].nonzero().squeeze(1)
                dst = dst.index_select(0, sel)
            total[t] = add(et, sel, dst, total[t])
            c = torch.bincount(dst, minlength=h_dict[t].size(0))
            count[t] = c if t not in count else count[t] + c
        out = {}
        for t, h in h_dict.items():
            if t not in count:
                out[t] = h
                continue
            out[t] = h + total[t] / count[t].clamp(min=1).unsqueeze(-1).to(h.dtype)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden})"


#: The argument of a PyG layer that sizes its edge features, by argument name.
EDGE_ARGS = ("edge_dim", "in_edge_channels", "dim")


class PyGUnitConv(nn.Module):
    """Any PyG message-passing layer that reads edge features, one per edge type,
    summed over edge types (:class:`~torch_geometric.nn.HeteroConv`) and added to the
    node embedding as a residual: ``h + relu(conv(h))``.

    The layer is built from its signature: node widths ``in_channels=(hidden, hidden)``
    (or ``hidden`` where it takes no pair; ``channels`` likewise) and ``out_channels``
    (``hidden / heads`` where heads are concatenated), the edge width ``hidden`` through
    whichever of :data:`EDGE_ARGS` it has, ``nn`` (GINE's) a 2-layer MLP, no self
    loops (a self loop has no edge features), and layer instead of batch normalisation
    (``norm``, GENConv's): batch statistics would make a unit's embedding depend on the
    other states of the batch and on dead units. ``kwargs`` (``model.conv_kwargs``) are
    passed on and take precedence. A layer with no edge-feature argument (``GCNConv``,
    ``SAGEConv``), one that needs a tensor argument (``PNAConv``'s ``deg``), or one whose
    output is not ``hidden`` wide is refused at construction with the reason.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding width.
        layer (type): The PyG layer class (a :class:`MessagePassing`).
        **kwargs: Its other arguments.
    """

    def __init__(self, schema: GraphSchema, hidden: int, layer: Type[MessagePassing],
                 **kwargs: Any) -> None:
        super().__init__()
        self.hidden, self.layer = hidden, layer.__name__
        params = inspect.signature(layer.__init__).parameters
        edge_arg = next((a for a in EDGE_ARGS if a in params), None)
        if edge_arg is None:
            raise ValueError(f"{layer.__name__} takes no edge features (none of the arguments "
                             f"{list(EDGE_ARGS)}): the unit encoder's edges carry features, "
                             f"so it cannot be a unit conv")
        heads = int(kwargs.get("heads", 1))
        concat = kwargs.get("concat", params["concat"].default if "concat" in params else False)
        if hidden % heads != 0:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads (got {heads})")
        self.heads = heads
        built: Dict[str, Any] = {edge_arg: hidden}
        for name in ("in_channels", "channels"):
            if name in params:
                pair = "Tuple" in str(params[name].annotation)
                built[name] = (hidden, hidden) if pair else hidden
        if "out_channels" in params:
            built["out_channels"] = hidden // heads if concat and heads > 1 else hidden
        if "add_self_loops" in params:
            built["add_self_loops"] = False
        if "norm" in params and params["norm"].default == "batch":  # GENConv's MLP
            built["norm"] = "layer"
        built.update(kwargs)
        missing = [n for n, p in params.items()
                   if n not in ("self", "nn") and p.default is inspect.Parameter.empty
                   and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in built]
        if missing:
            raise ValueError(f"{layer.__name__} needs {missing}: give them in model.conv_kwargs "
                             f"(values a YAML file can hold)")

        def make() -> nn.Module:
            extra = {"nn": mlp(hidden, hidden, 2)} if "nn" in params and "nn" not in built else {}
            return layer(**built, **extra)

        self.conv = HeteroConv({et: make() for et in schema.edge_types}, aggr="sum")
        self._check_width(schema)

    def _check_width(self, schema: GraphSchema) -> None:
        """One forward of two units per type: the output must be ``hidden`` wide."""
        h = {t: torch.zeros(2, self.hidden) for t in schema.node_types}
        ei = {et: torch.tensor([[0, 1], [1, 0]]) for et in schema.edge_types}
        ea = {et: torch.zeros(2, self.hidden) for et in schema.edge_types}
        try:
            with torch.no_grad():
                out = self.conv(h, ei, edge_attr_dict=ea)
        except Exception as e:  # e.g. a layer that takes no (source, target) pair of inputs
            raise ValueError(f"{self.layer} fails on the edge types of this schema "
                             f"{list(schema.edge_types)} (some join two node types, given as a "
                             f"(source, target) pair of inputs): {type(e).__name__}: {e}") from None
        widths = {t: int(v.size(-1)) for t, v in out.items()}
        if any(w != self.hidden for w in widths.values()):
            raise ValueError(f"{self.layer} gives outputs {widths} wide, not hidden="
                             f"{self.hidden}; set its width arguments in model.conv_kwargs")

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                edge_emb_dict: Dict[EdgeType, Tensor]) -> Dict[str, Tensor]:
        msg = self.conv(h_dict, edge_index_dict, edge_attr_dict=edge_emb_dict)
        return {t: h + torch.relu(msg[t]) if t in msg else h for t, h in h_dict.items()}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.layer}, {self.hidden}, heads={self.heads})"


@register_unit_conv("gatv2")
class GATv2UnitConv(PyGUnitConv):
    """:class:`torch_geometric.nn.GATv2Conv` with edge features, one per edge type."""

    def __init__(self, schema: GraphSchema, hidden: int, **kwargs: Any) -> None:
        super().__init__(schema, hidden, GATv2Conv, **kwargs)


@register_unit_conv("transformer")
class TransformerUnitConv(PyGUnitConv):
    """:class:`torch_geometric.nn.TransformerConv` with edge features, one per edge type."""

    def __init__(self, schema: GraphSchema, hidden: int, **kwargs: Any) -> None:
        super().__init__(schema, hidden, TransformerConv, **kwargs)


@register_unit_conv("relation")
class RelationConv(nn.Module):
    r"""The official code's unit encoder (``RelationAggregator`` of opendilab/ACE's SMAC
    and GRF models) as a message-passing step: a unit's embedding reads its neighbours'.

    The message of an edge :math:`(i, j)` is an MLP over the edge's features and the
    source unit's embedding (``layers`` fc + ReLU, ``hidden`` wide, then ``2 hidden``
    out: the official relation encoder); unit :math:`j` takes the mean of the first half
    and the max of the second over its incoming edges (every edge type; 0 where it has
    none) and becomes fc + ReLU over the three:

    .. math::
        m_{ij} = \mathrm{MLP}_{\tau(i, j)}([x_{ij}, h_i]), \qquad
        h_j' = \mathrm{ReLU}\big(W_{\tau(j)} [h_j, \mathrm{mean}_i\, m_{ij}^{(1)},
        \max_i m_{ij}^{(2)}] + b_{\tau(j)}\big)

    The MLP's first layer is split: its product with :math:`h_i` is taken once per
    unit and gathered per edge, its product with the narrow edge features per edge, so
    an edge costs the later layers only. The step reads the edge features itself
    (``uses_edge_encoders``: the unit encoder builds no edge encoder for it).

    Where it departs from the official code: a message MLP per edge type and an update
    per node type (it has one of each for every unit), no message from a unit to itself,
    and the mean over the incoming edges of live units (it divides by the count of all
    units, dead ones and the unit itself included).

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding width.
        layers (int, optional): Depth of the message MLP; the official code's is 2.
            (default: :obj:`2`)
    """

    encodes_edges = True
    uses_edge_encoders = False

    def __init__(self, schema: GraphSchema, hidden: int, layers: int = 2) -> None:
        super().__init__()
        self.hidden, self.layers = hidden, layers
        self.messages = nn.ModuleDict({edge_key(et): mlp(f + hidden, 2 * hidden, layers, width=hidden)
                                       for et, f in schema.edge_types.items()})
        self.updates = nn.ModuleDict({t: mlp(3 * hidden, hidden) for t in schema.node_types})

    def reset_parameters(self) -> None:
        for m in (*self.messages.values(), *self.updates.values()):
            reset_mlp(m)

    def message(self, et: EdgeType, x: Tensor, h_src: Tensor, src: Tensor) -> Tensor:
        """The messages ``[E, 2 hidden]`` of edges of type ``et`` with features ``x``
        ``[E, F]`` from rows ``src`` ``[E]`` of the source units' embeddings ``h_src``."""
        seq = self.messages[edge_key(et)]
        first = seq[0]
        f = x.size(1)
        per_unit = F.linear(h_src, first.weight[:, f:])  # once per unit, not per edge
        per_edge = _NarrowInputLinear.apply(x, first.weight[:, :f], first.bias) \
            if torch.is_grad_enabled() else F.linear(x, first.weight[:, :f], first.bias)
        return seq[2:](torch.relu(per_edge + per_unit.index_select(0, src)))

    def forward(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                edge_emb_dict: Dict[EdgeType, Tensor]) -> Dict[str, Tensor]:
        """The step on the edges given; ``edge_emb_dict`` holds their features (there is
        no edge encoder before this step)."""
        return self.forward_encoding(h_dict, edge_index_dict, edge_emb_dict)

    def forward_encoding(self, h_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                         edge_attr_dict: Dict[EdgeType, Tensor], edge_encoders: Optional[nn.ModuleDict] = None,
                         edge_keep_dict: Optional[Dict[EdgeType, Tensor]] = None) -> Dict[str, Tensor]:
        H = self.hidden
        msgs: Dict[str, list] = {}
        for et, ei in edge_index_dict.items():
            x = edge_attr_dict[et]
            if edge_keep_dict is not None and et in edge_keep_dict:
                sel = edge_keep_dict[et].nonzero().squeeze(1)
                ei, x = ei.index_select(1, sel), x.index_select(0, sel)
            msgs.setdefault(et[2], []).append((self.message(et, x, h_dict[et[0]], ei[0]), ei[1]))
        out = {}
        for t, h in h_dict.items():
            mean = top = h.new_zeros(h.size(0), H)
            if t in msgs:
                m, dst = (torch.cat(parts) for parts in zip(*msgs[t]))
                mean = scatter(m[:, :H], dst, dim=0, dim_size=h.size(0), reduce="mean")
                top = scatter(m[:, H:], dst, dim=0, dim_size=h.size(0), reduce="max")
            out[t] = self.updates[t](torch.cat([h, mean, top], dim=-1))
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden}, layers={self.layers})"


def unit_conv(name: str) -> Callable[..., nn.Module]:
    """The message-passing step ``model.conv`` names, as ``factory(schema, hidden,
    **kwargs)``: a name in :data:`UNIT_CONVS`; a PyG layer of ``torch_geometric.nn``
    by its class name (``GINEConv``), adapted by :class:`PyGUnitConv`; or
    ``package.module:Class``, imported now (a PyG layer there is adapted too)."""
    if name in UNIT_CONVS:
        return UNIT_CONVS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"model.conv={name!r} cannot be imported: {e}") from None
    elif isinstance(getattr(pyg_nn, name, None), type):
        cls = getattr(pyg_nn, name)
    else:
        raise ValueError(f"model.conv={name!r} is neither registered {sorted(UNIT_CONVS)}, nor a "
                         f"layer of torch_geometric.nn, nor package.module:Class")
    if isinstance(cls, type) and issubclass(cls, MessagePassing):
        return lambda schema, hidden, **kw: PyGUnitConv(schema, hidden, cls, **kw)
    return cls


def check_unit_conv(module: Any, name: str) -> None:
    """Raise ``TypeError`` naming what ``module`` (built from ``model.conv=name``) lacks
    of the :class:`UnitConv` contract."""
    lacks = [what for what, ok in (
        ("to be an nn.Module", isinstance(module, nn.Module)),
        ("a reset_parameters() method", callable(getattr(module, "reset_parameters", None))),
        ("forward_encoding() (it sets encodes_edges)",
         not getattr(module, "encodes_edges", False) or callable(getattr(module, "forward_encoding", None))))
        if not ok]
    forward = getattr(module, "forward", None)
    if isinstance(module, nn.Module) and forward is not None:
        try:
            inspect.signature(forward).bind(None, None, None)
        except TypeError:
            lacks.append("forward(h_dict, edge_index_dict, edge_emb_dict)")
    if lacks:
        raise TypeError(f"model.conv={name!r} does not meet the unit conv contract "
                        f"(acegnn.nn.unit_encoder.UnitConv): it needs {', '.join(lacks)}")


class UnitEncoder(nn.Module):
    r"""Unit-wise state embedding (paper Fig. 3): node encoder per node type and edge
    encoder per edge type (fc + ReLU), then the message-passing step ``conv``.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding width.
        conv (str, optional): The message-passing step, as :func:`unit_conv` reads it.
            (default: :obj:`"ace"`)
        conv_kwargs (dict, optional): Extra arguments of the step. (default: :obj:`None`)
        layers (int, optional): Depth of the node and edge encoders. (default: :obj:`1`)
        conv_layers (int, optional): Message-passing steps, one after the other, each
            with its own weights and the same edge embeddings. (default: :obj:`1`)

    Shapes:
        - **input:** ``x_dict`` ``{t: [N_t, F_t]}``, ``edge_index_dict`` ``{e: [2, E_e]}``,
          ``edge_attr_dict`` ``{e: [E_e, F_e]}``
        - **output:** ``{t: [N_t, hidden]}``
    """

    def __init__(self, schema: GraphSchema, hidden: int, conv: str = "ace",
                 conv_kwargs: Optional[dict] = None, layers: int = 1,
                 conv_layers: int = 1) -> None:
        super().__init__()
        if conv_layers < 1:
            raise ValueError(f"conv_layers must be at least 1 (got {conv_layers})")
        self.schema, self.hidden, self.conv_name = schema, hidden, conv
        self.node_encoders = nn.ModuleDict({t: mlp(f, hidden, layers)
                                            for t, f in schema.node_types.items()})
        factory = unit_conv(conv)
        # a step that reads the edge features itself (uses_edge_encoders = False) gets none
        self.edge_encoders = nn.ModuleDict({
            edge_key(et): mlp(f, hidden, layers) for et, f in schema.edge_types.items()
        } if getattr(factory, "uses_edge_encoders", True) else {})
        steps = []
        for _ in range(conv_layers):
            try:
                step = factory(schema, hidden, **dict(conv_kwargs or {}))
            except TypeError as e:
                raise ValueError(f"model.conv={conv!r} with model.conv_kwargs="
                                 f"{dict(conv_kwargs or {})}: {e}") from None
            check_unit_conv(step, conv)
            steps.append(step)
        self.conv = steps[0]  # the first step (its parameters' names as before conv_layers)
        self.more_convs = nn.ModuleList(steps[1:])

    @property
    def convs(self) -> list:
        """The message-passing steps, in order."""
        return [self.conv, *self.more_convs]

    def reset_parameters(self) -> None:
        for m in list(self.node_encoders.values()) + list(self.edge_encoders.values()):
            reset_mlp(m)
        for step in self.convs:
            step.reset_parameters()

    def forward(self, x_dict: Dict[str, Tensor], edge_index_dict: Dict[EdgeType, Tensor],
                edge_attr_dict: Dict[EdgeType, Tensor],
                alive_dict: Optional[Dict[str, Tensor]] = None) -> Dict[str, Tensor]:
        """Unit embeddings; ``alive_dict`` ``{t: [N_t]}`` bool (optional, per node type)
        removes every edge from or to a unit that is not alive before the
        message-passing step, so a dead unit sends and receives no message."""
        h_dict = {t: self.node_encoders[t](x_dict[t]) for t in self.schema.node_types}
        ei = {et: edge_index_dict[et] for et in self.schema.edge_types}
        ea = {et: edge_attr_dict[et] for et in self.schema.edge_types}
        keep_dict = {}
        if alive_dict:
            for et, e in ei.items():
                keep = None
                for end, t in ((0, et[0]), (1, et[2])):
                    if t in alive_dict:
                        k = alive_dict[t][e[end]]
                        keep = k if keep is None else keep & k
                if keep is not None:
                    keep_dict[et] = keep
        edge_emb = None
        for step in self.convs:
            if getattr(step, "encodes_edges", False):
                h_dict = step.forward_encoding(h_dict, ei, ea, self.edge_encoders, keep_dict)
                continue
            if edge_emb is None:
                live = {et: (e[:, keep_dict[et]], ea[et][keep_dict[et]]) if et in keep_dict
                        else (e, ea[et]) for et, e in ei.items()}  # [2, E_alive]
                ei_live = {et: v[0] for et, v in live.items()}
                edge_emb = {et: self.edge_encoders[edge_key(et)](v[1]) if self.edge_encoders else v[1]
                            for et, v in live.items()}  # the features where there is no encoder
            h_dict = step(h_dict, ei_live, edge_emb)
        return h_dict

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden}, conv={self.conv_name})"
