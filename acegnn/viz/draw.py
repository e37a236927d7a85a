"""Figures of one state and its sequential decision, and animations of an episode.

Every ``draw_*`` function takes a :class:`~acegnn.viz.frame.Frame` and returns a
:class:`Drawing`: the matplotlib :class:`~matplotlib.figure.Figure` drawn into and a
:class:`Drawn` record of what was drawn. A new figure is not registered with
:mod:`matplotlib.pyplot`: nothing is shown and no file is written unless asked. Pass
``ax`` to draw into axes of your own.

* :func:`draw_state`: the interaction graph of a state.
* :func:`draw_decision`: the state and every agent's chosen action.
* :func:`draw_candidates`: the values of every decision step's candidates.
* :func:`draw_frame`: the decision and the candidate values side by side.
* :func:`animate`: an episode as a GIF or MP4 file.
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from acegnn.viz.frame import Frame

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Arrow", "Bar", "Drawing", "Drawn", "Still", "animate", "draw_candidates",
           "draw_decision", "draw_frame", "draw_state"]

#: Colour of each unit type, by its index in the schema (cycled).
TYPE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#bcbd22")
#: Colour of each targeted action kind's arrow, by the kind's index (cycled).
KIND_COLORS = ("#ff7f0e", "#2ca02c", "#9467bd", "#e377c2", "#8c564b", "#17becf",
               "#bcbd22", "#d62728")
MOVE_COLOR = "#333333"
EDGE_COLOR = "#8c8c8c"
DEAD_COLOR = "#9a9a9a"
BACKGROUND_COLOR = "#d9d9d9"
BAR_COLOR = "#9ecae1"
CHOSEN_COLOR = "#ff7f0e"
GREEDY_HATCH = "////"


# ---------------------------------------------------------------- what is drawn

class Arrow(NamedTuple):
    """An agent's action drawn as an arrow."""

    agent: int
    start: Tuple[float, float]
    end: Tuple[float, float]
    kind: str
    """Name of the action kind."""


class Still(NamedTuple):
    """An agent's action drawn as a dot on the agent."""

    agent: int
    kind: str
    """Name of the action kind."""


class Bar(NamedTuple):
    """A candidate's value bar."""

    agent: int
    slot: int
    """The candidate's action slot."""
    value: float
    """The candidate's value, also when the bars are relative."""
    chosen: bool
    greedy: bool


@dataclasses.dataclass(frozen=True)
class Drawn:
    """What one ``draw_*`` call drew. A part the call does not draw stays empty."""

    edges: Tuple[int, ...] = ()
    """Indices into ``frame.edges`` of the drawn edges."""
    arrows: Tuple[Arrow, ...] = ()
    """One per agent whose action is drawn as an arrow."""
    still: Tuple[Still, ...] = ()
    """One per agent whose action is drawn as a dot."""
    values: Tuple[Bar, ...] = ()
    """One per candidate bar, in drawing order (top to bottom)."""
    hidden: Dict[int, int] = dataclasses.field(default_factory=dict)
    """``{agent: number of its candidates not drawn}`` for every agent with a group."""


class Drawing(NamedTuple):
    """What a ``draw_*`` function returns: ``fig, drawn = draw_frame(frame)``."""

    fig: "Figure"
    """The figure drawn into."""
    drawn: Drawn


# layout of the figures made here, in inches
_STATE_SIDE = 5.0   # the state's axes
_LEGEND_W = 1.7     # room for the state's legend, right of its axes
_BAR_W = 3.2        # the candidate bars
_ROW_H = 0.17       # one candidate row
_MARGIN = 0.45


# ---------------------------------------------------------------- helpers

def _check_frame(frame) -> Frame:
    if not isinstance(frame, Frame):
        raise ValueError(f"frame must be an acegnn.viz.Frame (got {type(frame).__name__})")
    return frame


def _figure(figsize: Tuple[float, float]):
    """A figure with an Agg canvas, not registered with pyplot (nothing is shown)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _check_ax(ax):
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        raise ValueError(f"ax must be a matplotlib Axes (got {type(ax).__name__})")
    return ax


def _axes_in(fig, left: float, bottom: float, width: float, height: float):
    """Axes placed in inches from the figure's bottom left corner."""
    W, H = fig.get_size_inches()
    return fig.add_axes([left / W, bottom / H, width / W, height / H])


def _check_args(max_edges: Optional[int] = None, seed: int = 0, top_k: Optional[int] = 1) -> None:
    if max_edges is not None and (isinstance(max_edges, bool) or not isinstance(max_edges, (int, np.integer))
                                  or max_edges < 0):
        raise ValueError(f"max_edges must be a non-negative int or None (got {max_edges!r})")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int (got {seed!r})")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                              or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None (got {top_k!r})")


def _type_color(t: int) -> str:
    return TYPE_COLORS[t % len(TYPE_COLORS)]


def _kind_color(k: int) -> str:
    return KIND_COLORS[k % len(KIND_COLORS)]


def _marker_size(num_units: int) -> float:
    return float(np.clip(4000.0 / max(num_units, 1), 40.0, 260.0))


def _limits(frame: Frame):
    """``(xlim, ylim, invert_y)``: the scene's, or the positions' with a margin."""
    if frame.scene is not None:
        return tuple(frame.scene.xlim), tuple(frame.scene.ylim), bool(frame.scene.invert_y)
    pos = frame.pos[frame.alive]
    if pos.shape[0] == 0:
        return (-1.0, 1.0), (-1.0, 1.0), False
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    pad = 0.12 * float(max(hi - lo)) or 1.0
    return (lo[0] - pad, hi[0] + pad), (lo[1] - pad, hi[1] + pad), False


def _target_label(frame: Frame, kind: int, target: int) -> str:
    name = frame.kind_names[kind]
    return name if target < 0 else f"{name}\u2192{frame.unit_name(target)}"


def _shown_edges(frame: Frame, edges: bool, max_edges: Optional[int], seed: int) -> np.ndarray:
    """Indices into ``frame.edges`` of the edges drawn: live ones, at most ``max_edges``."""
    if not edges:
        return np.zeros(0, dtype=np.int64)
    live = np.nonzero(frame.live_edges)[0]
    if max_edges is None or live.size <= max_edges:
        return live
    rng = np.random.default_rng(seed)
    return live[np.sort(rng.choice(live.size, size=max_edges, replace=False))]


def _agent_head(frame: Frame, agent: int, rank: int, hidden: int = 0) -> str:
    """``"<rank>. <name>"``, ``" (dead)"`` for a dead agent, ``"  +<hidden> hidden"``."""
    head = f"{rank}. {frame.unit_name(int(frame.agents[agent]))}"
    if not frame.alive[frame.agents[agent]]:
        head += " (dead)"
    if hidden:
        head += f"  +{hidden} hidden"
    return head


# ---------------------------------------------------------------- the state

def _draw_state(ax, frame: Frame, edges: bool, max_edges: Optional[int], seed: int,
                labels: Optional[bool], extra_handles=(), title: Optional[str] = None) -> Drawn:
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    xlim, ylim, invert_y = _limits(frame)
    if frame.scene is not None and frame.scene.lines:
        ax.add_collection(LineCollection(
            np.asarray(frame.scene.lines, dtype=float), colors=BACKGROUND_COLOR,
            linewidths=1.0, zorder=0, gid="background"))
    shown = _shown_edges(frame, edges, max_edges, seed)
    E = int(frame.live_edges.sum())  # the edges of dead units are not drawn nor counted
    if shown.size:
        src, dst = frame.edges[:, shown]
        segs = np.stack([frame.pos[src], frame.pos[dst]], axis=1)
        many = shown.size > 100
        ax.add_collection(LineCollection(
            segs, colors=EDGE_COLOR, linewidths=0.4 if many else 1.0,
            alpha=0.35 if many else 0.7, zorder=1, gid="edges"))

    s = _marker_size(frame.num_units)
    handles = []
    alive = frame.alive
    for t, name in enumerate(frame.type_names):
        rows = np.nonzero((frame.unit_type == t) & alive)[0]
        color = _type_color(t)
        handles.append(Line2D([], [], ls="", marker="o", ms=8, mfc=color, mec="white",
                              label=name))
        if rows.size == 0:
            continue
        agent, act = frame.is_agent[rows], frame.can_act[rows]
        face = np.array([color if a else "none" for a in act], dtype=object)
        edge = np.where(~act, "#9a9a9a", np.where(agent, "black", "white"))
        width = np.where(agent | ~act, 1.8, 0.8)
        ax.scatter(frame.pos[rows, 0], frame.pos[rows, 1], s=s, c=list(face),
                   edgecolors=list(edge), linewidths=width, zorder=3, gid=f"units:{name}",
                   label=name)
    if (frame.is_agent & alive).any():
        handles.append(Line2D([], [], ls="", marker="o", ms=8, mfc="white", mec="black",
                              mew=1.8, label="agent"))
    if (~frame.can_act & alive).any():
        handles.append(Line2D([], [], ls="", marker="o", ms=8, mfc="none", mec="#9a9a9a",
                              mew=1.8, label="cannot act"))
    if frame.num_dead:
        handles.append(Line2D([], [], ls="", marker="x", ms=7, mec=DEAD_COLOR, mew=1.5,
                              label=f"dead (not drawn): {frame.num_dead}"))
    handles += list(extra_handles)
    if labels is None:
        labels = frame.num_units <= 12
    if labels:
        for u in np.nonzero(alive)[0].tolist():
            ax.annotate(frame.unit_name(u), frame.pos[u], xytext=(0, -11),
                        textcoords="offset points", ha="center", va="top", fontsize=7,
                        color="#444444", zorder=5, gid=f"name:{u}")

    ax.set_xlim(*xlim)
    ax.set_ylim(*((ylim[1], ylim[0]) if invert_y else ylim))
    ax.set_aspect("equal", adjustable="box")
    if frame.scene is None:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.tick_params(labelsize=7)
    title = f"step {frame.step}" if title is None else title
    if shown.size < E and edges:
        title += f"  ({shown.size} of {E} edges shown)"
    elif not edges and E:
        title += "  (edges hidden)"
    ax.set_title(title, fontsize=9)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7,
              frameon=False, borderaxespad=0.0)
    return Drawn(edges=tuple(shown.tolist()))


def _state_axes(frame: Frame, ax, max_edges: Optional[int], seed: int):
    """Checked arguments of a state drawing, and its axes (a new figure's if none)."""
    _check_frame(frame)
    _check_args(max_edges=max_edges, seed=seed)
    if ax is None:
        fig = _figure((_STATE_SIDE + _LEGEND_W + 2 * _MARGIN, _STATE_SIDE + 2 * _MARGIN))
        ax = _axes_in(fig, _MARGIN, _MARGIN, _STATE_SIDE, _STATE_SIDE)
    _check_ax(ax)
    return ax


def draw_state(frame: Frame, ax=None, edges: bool = True, max_edges: Optional[int] = 500,
               seed: int = 0, labels: Optional[bool] = None) -> Drawing:
    r"""Draws the interaction graph of a state.

    One marker per live unit at its position, coloured by unit type
    (:data:`TYPE_COLORS`, gid ``"units:<type>"``): agents ringed in black, units that
    cannot act hollow and grey. Also the live edges (gid ``"edges"``), the scene's
    background lines (gid ``"background"``) and the scene's limits (else the live
    positions' with a margin). A dead unit (:attr:`Frame.alive`), its name and every edge
    with a dead end are not drawn; the legend counts the dead units
    (``"dead (not drawn): 3"``).

    Args:
        frame (Frame): The state.
        ax (matplotlib.axes.Axes, optional): Axes to draw into; a new figure when
            :obj:`None`. (default: :obj:`None`)
        edges (bool, optional): Whether to draw the edges. (default: :obj:`True`)
        max_edges (int, optional): Draw at most this many live edges, a uniform choice
            seeded by ``seed``; the title says how many are shown. All when :obj:`None`.
            (default: :obj:`500`)
        seed (int, optional): Seed of the edge choice. (default: :obj:`0`)
        labels (bool, optional): Write each live unit's name under it; :obj:`None`:
            when the state has at most 12 units. (default: :obj:`None`)

    Returns:
        :class:`Drawing`: the figure and :attr:`Drawn.edges`.

    Raises:
        ValueError: ``frame`` is not a :class:`Frame`, ``ax`` not an Axes, or
            ``max_edges`` or ``seed`` is not a valid int.
    """
    ax = _state_axes(frame, ax, max_edges, seed)
    return Drawing(ax.figure, _draw_state(ax, frame, edges, max_edges, seed, labels))


# ---------------------------------------------------------------- the decision

def _draw_decision(ax, frame: Frame, edges: bool, max_edges: Optional[int], seed: int,
                   labels: Optional[bool], order_labels: bool, title: Optional[str] = None) -> Drawn:
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    arrows: List[Arrow] = []
    still: List[Still] = []
    handles: Dict[str, object] = {}
    scene = frame.scene
    drawn = [i for i in range(frame.num_agents) if frame.alive[frame.agents[i]]]
    for i in drawn:
        u = int(frame.agents[i])
        k = int(frame.action_kind[i])
        kind = frame.kind_names[k]
        target = int(frame.action_target[i])
        if target >= 0 and not frame.alive[target]:
            continue  # a dead unit is not drawn; nor is an arrow to it
        start = frame.pos[u]
        move = scene.move(kind) if scene is not None else None
        if target >= 0:
            end, color, style = frame.pos[target], _kind_color(k), "-"
        elif move is not None:
            end, color, style = start + np.asarray(move, dtype=float), MOVE_COLOR, "-"
        else:
            still.append(Still(i, kind))
            continue
        arrows.append(Arrow(i, (float(start[0]), float(start[1])), (float(end[0]), float(end[1])),
                            kind))
        label = kind if target >= 0 else "move"
        if label not in handles:
            handles[label] = Line2D([], [], color=color, lw=1.6, label=label)
        ax.add_patch(FancyArrowPatch(
            tuple(start), tuple(end), arrowstyle="-|>", mutation_scale=11, color=color,
            lw=1.5, ls=style, shrinkA=4, shrinkB=7 if target >= 0 else 2, zorder=4,
            gid=f"action:{i}"))
    state = _draw_state(ax, frame, edges, max_edges, seed, labels, extra_handles=handles.values(),
                        title=title)
    if still:
        rows = frame.agents[[i for i, _ in still]]
        ax.scatter(frame.pos[rows, 0], frame.pos[rows, 1], s=10, c="black", zorder=4,
                   gid="actions:still")
    if order_labels:
        for i in drawn:
            ax.annotate(str(int(frame.order[i]) + 1), frame.pos[frame.agents[i]], xytext=(6, 5),
                        textcoords="offset points", fontsize=8, fontweight="bold", zorder=6,
                        gid=f"order:{i}")
    return dataclasses.replace(state, arrows=tuple(arrows), still=tuple(still))


def draw_decision(frame: Frame, ax=None, edges: bool = True, max_edges: Optional[int] = 500,
                  seed: int = 0, labels: Optional[bool] = None,
                  order_labels: bool = True) -> Drawing:
    r"""Draws a state (:func:`draw_state`) and every agent's chosen action.

    A targeted action is an arrow from the actor to its target unit, coloured by action
    kind (:data:`KIND_COLORS`). A move kind of the frame's scene
    (:attr:`~acegnn.envs.base.Scene.moves`) is an arrow of its displacement. Any other
    action (stay, stop, a no-op, a move without a scene) is a dot on the agent (gid
    ``"actions:still"``). Arrows have gid ``"action:<agent>"``. A dead agent gets
    neither, nor an order label.

    Args:
        frame (Frame): The state and its decision.
        ax (matplotlib.axes.Axes, optional): Axes to draw into; a new figure when
            :obj:`None`. (default: :obj:`None`)
        edges (bool, optional): Whether to draw the edges. (default: :obj:`True`)
        max_edges (int, optional): Edges drawn at most (:func:`draw_state`).
            (default: :obj:`500`)
        seed (int, optional): Seed of the edge choice. (default: :obj:`0`)
        labels (bool, optional): Unit names (:func:`draw_state`). (default: :obj:`None`)
        order_labels (bool, optional): Write each agent's place in the decision order
            (``1`` decided first) next to it, gid ``"order:<agent>"``.
            (default: :obj:`True`)

    Returns:
        :class:`Drawing`: the figure and :attr:`Drawn.edges`, :attr:`Drawn.arrows` and
        :attr:`Drawn.still`.

    Raises:
        ValueError: As :func:`draw_state`.
    """
    ax = _state_axes(frame, ax, max_edges, seed)
    drawn = _draw_decision(ax, frame, edges, max_edges, seed, labels, order_labels)
    return Drawing(ax.figure, drawn)


# ---------------------------------------------------------------- candidate values

def _candidate_rows(frame: Frame, top_k: Optional[int]):
    """Per agent in decision order: ``(agent, shown candidates (best first), hidden)``."""
    groups = []
    for i in frame.agents_by_order():
        c = frame.candidates_of(int(i))
        c = c[np.argsort(-frame.cand_value[c], kind="stable")]
        if top_k is not None and c.size > top_k:
            keep = np.zeros(c.size, dtype=bool)
            keep[:top_k] = True
            keep |= (c == frame.chosen[i]) | (c == frame.greedy[i])
            shown = c[keep]
        else:
            shown = c
        groups.append((int(i), shown, int(c.size - shown.size)))
    return groups


def _candidate_layout(frame: Frame, top_k: Optional[int]):
    groups = _candidate_rows(frame, top_k)
    rows = sum(1 + g[1].size for g in groups)
    chars = max([len(_target_label(frame, int(frame.cand_kind[c]), int(frame.cand_target[c])))
                 for _, shown, _ in groups for c in shown] +
                [len(_agent_head(frame, i, frame.num_agents) + f"  +{h} hidden")
                 for i, _, h in groups] + [4])
    label_w = 0.25 + 0.058 * chars  # fontsize 7
    height = max(rows * _ROW_H, 1.0)
    return groups, rows, label_w, height


def _draw_candidates(ax, frame: Frame, groups, relative: bool) -> Drawn:
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.transforms import blended_transform_factory

    ys, vals, drawn, colors, edgecolors, widths, hatches = [], [], [], [], [], [], []
    label_y, label_text, label_bold = [], [], []
    values, hidden = [], {}
    y = 0
    for i, shown, n_hidden in groups:
        head = _agent_head(frame, i, int(frame.order[i]) + 1, n_hidden)
        hidden[i] = n_hidden
        label_y.append(y)
        label_text.append(head)
        label_bold.append(True)
        y += 1
        best = float(frame.cand_value[frame.greedy[i]]) if frame.greedy[i] >= 0 else 0.0
        for c in shown:
            chosen, greedy = bool(c == frame.chosen[i]), bool(c == frame.greedy[i])
            v = float(frame.cand_value[c])
            ys.append(y)
            vals.append(v)
            drawn.append(v - best if relative else v)
            colors.append(CHOSEN_COLOR if chosen else BAR_COLOR)
            edgecolors.append("black" if greedy else "none")
            widths.append(1.2 if greedy else 0.0)
            hatches.append(GREEDY_HATCH if greedy else None)
            label_y.append(y)
            label_text.append(_target_label(frame, int(frame.cand_kind[c]), int(frame.cand_target[c])))
            label_bold.append(False)
            values.append(Bar(i, int(frame.cand_slot[c]), v, chosen, greedy))
            y += 1
    # bars grow from the panel's left edge: the value axis spans the drawn values only,
    # so that close values stay apart
    if drawn:
        lo, hi = min(drawn), max(drawn)
        pad = 0.06 * (hi - lo) or 0.05 * max(abs(hi), 1e-3)
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = 0.0, 1.0
    ax.set_xlim(lo, hi)
    # rectangles added as artists: Axes.barh would update the data limits bar by bar
    # (slow by the hundred), and the limits are set here anyway
    for yy, d, fc, ec, lw, h, (i, slot, *_rest) in zip(ys, drawn, colors, edgecolors, widths,
                                                       hatches, values):
        ax.add_artist(Rectangle((lo, yy - 0.375), d - lo, 0.75, facecolor=fc, edgecolor=ec,
                                linewidth=lw, hatch=h, zorder=2, gid=f"value:{i}:{slot}"))
    if lo < 0.0 < hi:
        ax.axvline(0.0, color="black", lw=0.6, zorder=3)
    ax.set_ylim(y - 0.5, -0.5)
    ax.set_yticks([])
    # names as plain texts, not tick labels: a tick is several artists, slow by the hundred
    to_left = blended_transform_factory(ax.transAxes, ax.transData)
    for yy, text, bold in zip(label_y, label_text, label_bold):
        ax.text(-0.015, yy, text, transform=to_left, ha="right", va="center", fontsize=7,
                fontweight="bold" if bold else "normal", clip_on=False)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", lw=0.4, color="#e0e0e0", zorder=0)
    ax.set_xlabel("V − the agent's max V" if relative
                  else "V of the SE-state the candidate leads to", fontsize=8)
    if len(vals) <= 40:
        for yy, v in zip(ys, vals):
            ax.text(1.005, yy, f"{v:.3g}", transform=to_left, ha="left", va="center",
                    fontsize=6, clip_on=False)
    ax.set_title("candidate values, agents in decision order", fontsize=9, pad=16)
    ax.legend(handles=[Patch(fc=BAR_COLOR, label="candidate"),
                       Patch(fc=CHOSEN_COLOR, label="chosen"),
                       Patch(fc="white", ec="black", hatch=GREEDY_HATCH, label="greedy (max V)")],
              loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=7, frameon=False,
              borderaxespad=0.2, handlelength=1.5, columnspacing=1.0)
    return Drawn(values=tuple(values), hidden=hidden)


def draw_candidates(frame: Frame, ax=None, top_k: Optional[int] = 5,
                    relative: bool = False) -> Drawing:
    r"""Draws the values of every decision step's candidates.

    One group of horizontal bars per agent, in decision order; one bar per valued
    candidate, best first, labelled by its action kind (``kind→target`` for a targeted
    action). The chosen candidate is filled orange (:data:`CHOSEN_COLOR`); the greedy one
    (the largest value) is hatched with a black edge. A dead agent's group (its forced
    no-op) is headed ``"<rank>. <name> (dead)"``. Bars have gid
    ``"value:<agent>:<slot>"``.

    Args:
        frame (Frame): The state and its decision.
        ax (matplotlib.axes.Axes, optional): Axes to draw into; a new figure, as tall as
            the rows need, when :obj:`None`. (default: :obj:`None`)
        top_k (int, optional): Per agent, draw the ``top_k`` best candidates, the chosen
            and the greedy one; the group's head says how many are hidden. All when
            :obj:`None`. (default: :obj:`5`)
        relative (bool, optional): Bar lengths are each value less its agent's greedy
            value (the greedy bar at 0). (default: :obj:`False`)

    Returns:
        :class:`Drawing`: the figure and :attr:`Drawn.values` and :attr:`Drawn.hidden`.

    Raises:
        ValueError: ``frame`` is not a :class:`Frame`, ``ax`` not an Axes, or ``top_k``
            is not a positive int or :obj:`None`.
    """
    _check_frame(frame)
    _check_args(top_k=top_k)
    groups, rows, label_w, height = _candidate_layout(frame, top_k)
    if ax is None:
        top = _MARGIN + 0.35
        fig = _figure((label_w + _BAR_W + _MARGIN, height + top + 0.6))
        ax = _axes_in(fig, label_w, 0.6, _BAR_W, height)
    _check_ax(ax)
    return Drawing(ax.figure, _draw_candidates(ax, frame, groups, bool(relative)))


# ---------------------------------------------------------------- frames and episodes

def _gif_writer_class():
    from matplotlib.animation import PillowWriter

    class GifWriter(PillowWriter):
        """A :class:`~matplotlib.animation.PillowWriter` that grabs the figure's own
        canvas and stores each frame quantized to 256 colours (Pillow's fast octree)."""

        def grab_frame(self, **savefig_kwargs):
            from PIL import Image

            # one canvas draw per frame, not a draw and a savefig: a faster GIF
            self.fig.canvas.draw()
            rgb = np.asarray(self.fig.canvas.buffer_rgba())[..., :3]
            self._frames.append(Image.fromarray(np.ascontiguousarray(rgb)).quantize(
                colors=256, method=Image.Quantize.FASTOCTREE))

    return GifWriter


def _gif_writer(fps: float):
    return _gif_writer_class()(fps=fps)


def _frame_size(frame: Frame, top_k: Optional[int]) -> Tuple[float, float]:
    _, _, label_w, height = _candidate_layout(frame, top_k)
    width = _MARGIN + _STATE_SIDE + _LEGEND_W + label_w + _BAR_W + _MARGIN
    return width, max(_STATE_SIDE + 2 * _MARGIN + 0.4, height + 1.6)


def _title(frame: Frame) -> str:
    t = f"step {frame.step}"
    if not np.isnan(frame.reward):
        t += f", reward {frame.reward:.4g}"
    return t


def _draw_frame_into(fig, frame: Frame, top_k: Optional[int], edges: bool,
                     max_edges: Optional[int], seed: int, labels: Optional[bool],
                     relative: bool) -> Drawn:
    W, H = fig.get_size_inches()
    groups, _, label_w, height = _candidate_layout(frame, top_k)
    top = H - 0.5  # below the suptitle
    side = max(min(_STATE_SIDE, top - _MARGIN, W - label_w - _BAR_W - _LEGEND_W - 3 * _MARGIN), 1.0)
    bar_w = max(W - _MARGIN - side - _LEGEND_W - label_w - _MARGIN, 1.0)
    left = _axes_in(fig, _MARGIN, top - side, side, side)
    right = _axes_in(fig, W - _MARGIN - bar_w, max(top - 0.5 - height, 0.55), bar_w,
                     max(min(height, top - 0.5 - 0.55), 0.5))
    decision = _draw_decision(left, frame, edges, max_edges, seed, labels, True, title="decision")
    candidates = _draw_candidates(right, frame, groups, relative)
    fig.suptitle(_title(frame), fontsize=11, y=1.0 - 0.12 / H, va="top")
    return dataclasses.replace(decision, values=candidates.values, hidden=candidates.hidden)


def draw_frame(frame: Frame, figsize: Optional[Tuple[float, float]] = None,
               top_k: Optional[int] = 5, edges: bool = True, max_edges: Optional[int] = 500,
               seed: int = 0, labels: Optional[bool] = None, relative: bool = False) -> Drawing:
    r"""Draws a frame in a new figure: its decision (:func:`draw_decision`,
    left) and its candidate values (:func:`draw_candidates`, right), titled with the
    step and, where known, the reward.

    Args:
        frame (Frame): The state and its decision.
        figsize ((float, float), optional): Figure size in inches; by default wide
            enough for both panels and as tall as the candidate rows need.
            (default: :obj:`None`)
        top_k (int, optional): Candidates drawn per agent (:func:`draw_candidates`).
            (default: :obj:`5`)
        edges (bool, optional): Whether to draw the edges. (default: :obj:`True`)
        max_edges (int, optional): Edges drawn at most. (default: :obj:`500`)
        seed (int, optional): Seed of the edge choice. (default: :obj:`0`)
        labels (bool, optional): Unit names (:func:`draw_state`). (default: :obj:`None`)
        relative (bool, optional): Candidate bars relative to the agent's greedy value
            (:func:`draw_candidates`). (default: :obj:`False`)

    Returns:
        :class:`Drawing`: the new figure and every field of :class:`Drawn`.

    Raises:
        ValueError: As :func:`draw_decision` and :func:`draw_candidates`, or
            ``figsize`` is not two positive numbers.
    """
    _check_frame(frame)
    _check_args(max_edges=max_edges, seed=seed, top_k=top_k)
    if figsize is None:
        figsize = _frame_size(frame, top_k)
    elif len(figsize) != 2 or not all(float(s) > 0 for s in figsize):
        raise ValueError(f"figsize must be two positive numbers (got {figsize!r})")
    fig = _figure(tuple(float(s) for s in figsize))
    return Drawing(fig, _draw_frame_into(fig, frame, top_k, edges, max_edges, seed, labels,
                                         bool(relative)))


def animate(frames: Sequence[Frame], path, fps: float = 2, dpi: int = 80,
            figsize: Optional[Tuple[float, float]] = None, top_k: Optional[int] = 5,
            edges: bool = True, max_edges: Optional[int] = 500, seed: int = 0,
            labels: Optional[bool] = None, relative: bool = False) -> str:
    r"""Writes an episode as an animation, one :func:`draw_frame` per frame.

    Args:
        frames (list of Frame): The episode's frames, in order.
        path (str or os.PathLike): The file: ``.gif`` (Pillow) or ``.mp4`` (needs
            ffmpeg). Its folder must exist.
        fps (float, optional): Frames per second. (default: :obj:`2`)
        dpi (int, optional): Resolution. (default: :obj:`80`)
        figsize ((float, float), optional): Size of every frame in inches; by default
            the largest :func:`draw_frame` size of the frames. (default: :obj:`None`)
        top_k (int, optional): Candidates drawn per agent. (default: :obj:`5`)
        edges (bool, optional): Whether to draw the edges. (default: :obj:`True`)
        max_edges (int, optional): Edges drawn at most per frame. (default: :obj:`500`)
        seed (int, optional): Seed of the edge choice. (default: :obj:`0`)
        labels (bool, optional): Unit names (:func:`draw_state`). (default: :obj:`None`)
        relative (bool, optional): Candidate bars relative to the agent's greedy value
            (:func:`draw_candidates`). (default: :obj:`False`)

    Returns:
        The path written, as a string.

    Raises:
        ValueError: No frames, an argument as :func:`draw_frame` refuses it, a suffix
            other than ``.gif`` or ``.mp4``, a missing folder, ``fps`` or ``dpi`` not
            positive, or ``.mp4`` without ffmpeg.
    """
    from matplotlib import animation

    frames = list(frames) if not isinstance(frames, Frame) else [frames]
    if not frames:
        raise ValueError("frames must hold at least one Frame (got none)")
    for f in frames:
        _check_frame(f)
    _check_args(max_edges=max_edges, seed=seed, top_k=top_k)
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".gif", ".mp4"):
        raise ValueError(f"path must end in .gif or .mp4 (got suffix {suffix or 'none'!r} in {path!r})")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"path's folder {folder!r} does not exist (path {path!r})")
    if not float(fps) > 0:
        raise ValueError(f"fps must be positive (got {fps!r})")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer, float)) or not dpi > 0:
        raise ValueError(f"dpi must be positive (got {dpi!r})")
    if suffix == ".mp4":
        if not animation.writers.is_available("ffmpeg"):
            raise ValueError(f"writing {path!r} (.mp4) needs ffmpeg, which is not installed; "
                             f"install ffmpeg or write a .gif")
        writer = animation.FFMpegWriter(fps=float(fps))
    else:
        writer = _gif_writer(fps=float(fps))
    if figsize is None:
        sizes = np.array([_frame_size(f, top_k) for f in frames])
        figsize = tuple(sizes.max(axis=0).tolist())
    fig = _figure(figsize)
    fig.set_dpi(dpi)
    # each frame is drawn once, by the writer that grabs it
    with writer.saving(fig, path, dpi):
        for frame in frames:
            fig.clear()
            _draw_frame_into(fig, frame, top_k, edges, max_edges, seed, labels, bool(relative))
            writer.grab_frame()
    return path
