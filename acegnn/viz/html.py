"""An episode as one self-contained interactive HTML page (Plotly, offline).

:func:`episode_figure` builds a :class:`plotly.graph_objects.Figure` with one animation
frame per :class:`~acegnn.viz.frame.Frame`, a slider and play/pause buttons.
:func:`episode_page` writes it as one HTML file with plotly.js inlined: it opens from
disk with no server and no network.

The left panel is the interaction graph of the step:

* the scene's background and the edges, each unordered pair of units once, at most
  ``max_edges`` of them (a seeded choice);
* units coloured by type, agents as diamonds, units that cannot act in grey; hovering a
  unit shows its name, features and embedding norm;
* the chosen actions as arrows: a move kind of the scene one step in its direction, a
  targeted action from the actor to its target;
* each agent's decision rank.

A dead unit (:attr:`Frame.alive <acegnn.viz.frame.Frame.alive>`), its hover text, its
rank and every edge with a dead end are left out, and ``max_edges`` counts live edges.
The legend says how many units are dead in the step (``"dead (not drawn): 3"``).

The right panel is the candidate values of the step: one row per agent in decision
order, one marker per valued candidate at its value ``V``, coloured by action kind. The
chosen candidate is ringed, the greedy one crossed. Hovering a candidate shows the
agent, the action kind (and target) and ``V``. A dead agent keeps its row (its forced
no-op), named ``"#<rank> <name> (dead)"``.

Positions and values are rounded to :data:`COORD_DIGITS` significant digits, edge end
points to :data:`EDGE_DIGITS`, features to :data:`FEATURE_DIGITS`. Needs the ``viz``
extra (``plotly``).
"""
from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from acegnn.viz.frame import Frame

PathLike = Union[str, "os.PathLike[str]"]

#: Unit-type colours (by schema order) and action-kind colours (by kind order).
TYPE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#bcbd22", "#7f7f7f", "#ff7f0e")
KIND_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2",
               "#eeca3b", "#9d755d", "#ff9da6", "#bab0ac")
CANNOT_ACT_COLOR = "#c7c7c7"
EDGE_COLOR = "rgba(110,110,110,0.3)"
MOVE_COLOR = "#333333"
TARGET_COLOR = "#ff7f0e"
DEAD_COLOR = "#9a9a9a"

COORD_DIGITS = 4
"""Significant digits of unit positions, arrows and values."""
EDGE_DIGITS = 3
"""Significant digits of edge end points (sub-pixel at any usual page size)."""
FEATURE_DIGITS = 3
"""Significant digits of the features shown on hover."""


def _round(values, digits: int) -> list:
    """Plain-float list of ``values`` rounded to ``digits`` significant digits; NaN
    becomes ``None`` (a gap in a Plotly line)."""
    out = []
    for v in np.asarray(values, dtype=np.float64).reshape(-1).tolist():
        out.append(None if math.isnan(v) else float(f"{v:.{digits}g}"))
    return out


def _fmt(v: float, digits: int = COORD_DIGITS) -> str:
    return f"{float(v):.{digits}g}"


def _features_text(x: np.ndarray, per_line: int = 8) -> str:
    vals = [_fmt(v, FEATURE_DIGITS) for v in np.asarray(x).reshape(-1).tolist()]
    lines = [", ".join(vals[i:i + per_line]) for i in range(0, len(vals), per_line)] or [""]
    return "[" + ",<br> ".join(lines) + "]"


def _check(frames: Sequence[Frame], max_edges: int) -> None:
    if isinstance(frames, Frame) or not isinstance(frames, (list, tuple)):
        raise ValueError(f"frames must be a list of Frame (got {type(frames).__name__})")
    if len(frames) == 0:
        raise ValueError("frames must hold at least one Frame (got an empty list)")
    for i, f in enumerate(frames):
        if not isinstance(f, Frame):
            raise ValueError(f"frames[{i}] must be a Frame (got {type(f).__name__})")
        if f.type_names != frames[0].type_names or f.kind_names != frames[0].kind_names:
            raise ValueError(f"frames[{i}] has other unit types or action kinds than frames[0] "
                             "(one page shows one task)")
        if f.scene != frames[0].scene:
            raise ValueError(f"frames[{i}].scene differs from frames[0].scene")
        if np.asarray(f.pos).shape != (f.num_units, 2):
            raise ValueError(f"frames[{i}].pos must have shape ({f.num_units}, 2) "
                             f"(got {np.asarray(f.pos).shape})")
        if not np.isfinite(np.asarray(f.pos, dtype=np.float64)).all():
            raise ValueError(f"frames[{i}].pos holds NaN or infinite positions")
    if isinstance(max_edges, bool) or not isinstance(max_edges, (int, np.integer)) or max_edges < 0:
        raise ValueError(f"max_edges must be a non-negative int (got {max_edges!r})")


def _thin_edges(edges: np.ndarray, max_edges: int, rng: np.random.Generator) -> np.ndarray:
    """``[2, E']`` unordered unit pairs of ``edges`` (each pair once, no self-loops),
    at most ``max_edges`` of them chosen with ``rng``."""
    e = np.asarray(edges).reshape(2, -1)
    e = e[:, e[0] != e[1]]
    if e.shape[1] == 0:
        return e
    pairs = np.unique(np.sort(e, axis=0), axis=1)
    if pairs.shape[1] > max_edges:
        keep = np.sort(rng.choice(pairs.shape[1], size=max_edges, replace=False))
        pairs = pairs[:, keep]
    return pairs


def _trails(pairs: np.ndarray, num_units: int) -> List[List[int]]:
    """Split the undirected edges ``pairs`` ``[2, E]`` into trails (walks using each edge
    once), drawn as polylines: about one point per edge instead of three."""
    adj: List[List[Tuple[int, int]]] = [[] for _ in range(num_units)]
    for e, (a, b) in enumerate(pairs.T.tolist()):
        adj[a].append((b, e))
        adj[b].append((a, e))
    used = [False] * pairs.shape[1]
    nxt = [0] * num_units
    left = [len(a) for a in adj]
    starts = [v for v in range(num_units) if left[v] % 2] + list(range(num_units))
    trails = []
    for s in starts:
        while left[s]:
            trail, v = [s], s
            while True:
                while nxt[v] < len(adj[v]) and used[adj[v][nxt[v]][1]]:
                    nxt[v] += 1
                if nxt[v] == len(adj[v]):
                    break
                w, e = adj[v][nxt[v]]
                used[e] = True
                left[v] -= 1
                left[w] -= 1
                trail.append(w)
                v = w
            trails.append(trail)
    return trails


def _polylines(pos: np.ndarray, trails: List[List[int]], digits: int) -> Tuple[list, list]:
    """x and y lists of the polylines through ``pos`` along ``trails``, gap-separated."""
    idx = [u for t in trails for u in t + [-1]][:-1]
    pts = np.full((len(idx), 2), np.nan)
    idx = np.asarray(idx, dtype=np.int64)
    pts[idx >= 0] = pos[idx[idx >= 0]]
    return _round(pts[:, 0], digits), _round(pts[:, 1], digits)


def _segments(p0: np.ndarray, p1: np.ndarray, digits: int) -> Tuple[list, list]:
    """x and y lists of segments ``p0[i] -> p1[i]``, separated by gaps."""
    n = len(p0)
    xs = np.full((n, 3), np.nan)
    ys = np.full((n, 3), np.nan)
    if n:
        xs[:, 0], xs[:, 1] = p0[:, 0], p1[:, 0]
        ys[:, 0], ys[:, 1] = p0[:, 1], p1[:, 1]
    return _round(xs, digits), _round(ys, digits)


def _merge(base: dict, update: dict) -> dict:
    """``base`` updated by ``update``, nested dicts merged (as Plotly merges a frame)."""
    out = dict(base)
    for k, v in update.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _rows(rows: np.ndarray) -> np.ndarray:
    """Decision rows in the smallest integer type (written as a compact binary array)."""
    rows = np.asarray(rows)
    return rows.astype(np.int8 if rows.size == 0 or rows.max() < 128 else np.int16)


def _const(values: list):
    """A single value where every entry is the same (a smaller page), else the list."""
    return values[0] if values and all(v == values[0] for v in values) else values


class _Episode:
    """What is fixed over the episode: extents, sizes, the scene, per-kind target types."""

    def __init__(self, frames: Sequence[Frame]):
        f0 = frames[0]
        self.type_names = f0.type_names
        self.kind_names = f0.kind_names
        self.scene = f0.scene
        if self.scene is not None:
            (x0, x1), (y0, y1) = self.scene.xlim, self.scene.ylim
        else:  # the live units' positions (a dead unit is not drawn)
            allpos = np.concatenate([np.asarray(f.pos, dtype=np.float64).reshape(-1, 2)[f.alive]
                                     for f in frames])
            if allpos.size:
                (x0, y0), (x1, y1) = allpos.min(0), allpos.max(0)
            else:
                x0 = y0 = -1.0
                x1 = y1 = 1.0
            pad = 0.08 * max(x1 - x0, y1 - y0, 1e-9)
            x0, x1, y0, y1 = x0 - pad, x1 + pad, y0 - pad, y1 + pad
        self.xlim = (float(x0), float(x1))
        self.ylim = (float(y0), float(y1))
        self.extent = max(x1 - x0, y1 - y0)
        self.max_units = max(f.num_units for f in frames)
        self.max_agents = max(f.num_agents for f in frames)
        # a legend entry counting the dead units, on pages where some unit dies
        self.has_dead = any(f.num_dead for f in frames)
        # A kind whose candidates all target units of one type writes target indices
        # (numbers) and names the type in its hover template; otherwise unit names.
        self.kind_target_type: Dict[int, Optional[int]] = {}
        self.kind_targeted: Dict[int, str] = {}
        for k in range(len(self.kind_names)):
            types, untargeted, targeted = set(), False, False
            for f in frames:
                t = np.asarray(f.cand_target)[np.asarray(f.cand_kind) == k]
                untargeted |= bool((t < 0).any())
                targeted |= bool((t >= 0).any())
                types.update(np.asarray(f.unit_type)[t[t >= 0]].tolist())
            if not targeted:
                self.kind_targeted[k] = "none"
            elif not untargeted and len(types) == 1:
                self.kind_targeted[k] = "index"
                self.kind_target_type[k] = types.pop()
            else:
                self.kind_targeted[k] = "name"

    @property
    def marker_size(self) -> int:
        return 15 if self.max_units <= 20 else 11 if self.max_units <= 60 else 8

    @property
    def value_marker_size(self) -> int:
        return 9 if self.max_agents <= 10 else 6 if self.max_agents <= 30 else 4


def _frame_traces(ep: _Episode, f: Frame, max_edges: int, rng: np.random.Generator) -> List[dict]:
    """The dynamic traces of one frame, in the order of :func:`_trace_templates`."""
    pos = np.asarray(f.pos, dtype=np.float64)
    traces: List[dict] = []

    # edges whose ends are both alive (those that carry a message)
    alive = np.asarray(f.alive)
    pairs = _thin_edges(np.asarray(f.edges)[:, f.live_edges], max_edges, rng)
    ex, ey = _polylines(pos, _trails(pairs, f.num_units), EDGE_DIGITS)
    traces.append(dict(x=ex, y=ey))

    # chosen actions as arrows
    rows = f.agents_by_order()
    agents = np.asarray(f.agents)
    mv0, mv1, mv_text, tg0, tg1, tg_text = [], [], [], [], [], []
    shorten = 0.035 * ep.extent
    for a in rows.tolist():
        u = int(agents[a])
        target = int(f.action_target[a])
        if not (f.can_act[u] and alive[u] and (target < 0 or alive[target])):
            continue
        kind = f.kind_names[int(f.action_kind[a])]
        label = f"{f.unit_name(u)}: {kind}"
        if target >= 0:
            d = pos[target] - pos[u]
            length = float(np.hypot(*d))
            if length == 0:
                continue
            tg0.append(pos[u])
            tg1.append(pos[u] + d * max(length - shorten, 0.5 * length) / length)
            tg_text.append(f"{label} → {f.unit_name(target)}")
        elif ep.scene is not None and ep.scene.move(kind) is not None:
            d = np.asarray(ep.scene.move(kind), dtype=np.float64)
            mv0.append(pos[u])
            mv1.append(pos[u] + 0.7 * d)
            mv_text.append(label)
    for p0, p1, text in ((mv0, mv1, mv_text), (tg0, tg1, tg_text)):
        p0 = np.asarray(p0).reshape(-1, 2)
        p1 = np.asarray(p1).reshape(-1, 2)
        x, y = _segments(p0, p1, COORD_DIGITS)
        # an arrow head at each segment's end only (angleref="previous" points it along)
        traces.append(dict(x=x, y=y, text=[s for t in text for s in ("", t, "")],
                           marker=dict(size=[0, 13, 0] * len(text))))

    # live units, one trace per type
    for ti in range(len(ep.type_names)):
        us = np.nonzero((np.asarray(f.unit_type) == ti) & alive)[0]
        x = _round(pos[us, 0], COORD_DIGITS)
        y = _round(pos[us, 1], COORD_DIGITS)
        text = [f"<b>{f.unit_name(u)}</b>{' (agent)' if f.is_agent[u] else ''}"
                f"{'' if f.can_act[u] else ', cannot act'}<br>"
                f"features {_features_text(f.features[u])}<br>"
                f"embedding norm {_fmt(f.emb_norm[u])}" for u in us.tolist()]
        color = _const([TYPE_COLORS[ti % len(TYPE_COLORS)] if f.can_act[u] else CANNOT_ACT_COLOR
                        for u in us.tolist()])
        symbol = _const(["diamond" if f.is_agent[u] else "circle" for u in us.tolist()])
        traces.append(dict(x=x, y=y, text=text, marker=dict(color=color, symbol=symbol)))
    if ep.has_dead:  # a legend entry only: a point without coordinates, none if none died
        none = [None] if f.num_dead else []
        traces.append(dict(x=none, y=none, name=f"dead (not drawn): {f.num_dead}"))

    # decision order numbers next to the live agents
    v_chosen = [float(f.cand_value[f.chosen[a]]) if f.chosen[a] >= 0 else float("nan")
                for a in rows.tolist()]
    order_text, order_hover, ranked = [], [], []
    for r, a in enumerate(rows.tolist()):
        u = int(agents[a])
        if not alive[u]:
            continue
        ranked.append(a)
        kind = f.kind_names[int(f.action_kind[a])]
        target = int(f.action_target[a])
        what = kind + (f" → {f.unit_name(target)}" if target >= 0 else "")
        greedy = " (greedy)" if f.chosen[a] == f.greedy[a] else " (not greedy)"
        order_text.append(str(r + 1))
        order_hover.append(f"<b>{f.unit_name(u)}</b> decides #{r + 1}: {what}<br>"
                           f"V = {_fmt(v_chosen[r])}{greedy}")
    ap = pos[agents[ranked]] if ranked else np.zeros((0, 2))
    traces.append(dict(x=_round(ap[:, 0], COORD_DIGITS), y=_round(ap[:, 1], COORD_DIGITS),
                       text=order_text, hovertext=order_hover))

    # candidate values, one trace per action kind; y is the agent's decision row
    row_of = np.empty(f.num_agents, dtype=np.int64)
    row_of[rows] = np.arange(rows.size)
    cand_row = row_of[np.asarray(f.cand_agent)] if f.cand_agent.size else np.zeros(0, np.int64)
    for k in range(len(ep.kind_names)):
        c = candidate_order(f, k)
        tr = dict(x=_round(np.asarray(f.cand_value)[c], COORD_DIGITS), y=_rows(cand_row[c]))
        mode = ep.kind_targeted[k]
        tgt = np.asarray(f.cand_target)[c]
        if mode == "index":
            tr["text"] = [str(t) for t in np.asarray(f.unit_local)[tgt].tolist()]
        elif mode == "name":
            tr["text"] = [f" → {f.unit_name(t)}" if t >= 0 else "" for t in tgt.tolist()]
        traces.append(tr)
    for which in (f.chosen, f.greedy):
        ok = np.asarray(which)[rows] >= 0
        c = np.asarray(which)[rows][ok]
        traces.append(dict(x=_round(np.asarray(f.cand_value)[c], COORD_DIGITS),
                           y=_rows(np.arange(rows.size)[ok])))
    return traces


def candidate_order(frame: Frame, kind: int) -> np.ndarray:
    """Indices of ``frame``'s candidates of action kind ``kind`` in the order the page
    lists them (agents in decision order, then slots): the order of the ``x`` values of
    that kind's trace in :func:`episode_figure`."""
    rows = frame.agents_by_order()
    row_of = np.empty(frame.num_agents, dtype=np.int64)
    row_of[rows] = np.arange(rows.size)
    c = np.nonzero(np.asarray(frame.cand_kind) == kind)[0]
    if c.size == 0:
        return c
    key = np.lexsort((np.asarray(frame.cand_slot)[c], row_of[np.asarray(frame.cand_agent)[c]]))
    return c[key]


def _trace_templates(ep: _Episode) -> List[dict]:
    """The static part of every dynamic trace (written once, in the base figure)."""
    ms = ep.marker_size
    t: List[dict] = [
        dict(type="scatter", mode="lines", name="edges", line=dict(color=EDGE_COLOR, width=1),
             hoverinfo="skip", showlegend=True, legendgroup="graph"),
    ]
    for name, color in (("move", MOVE_COLOR), ("targeted action", TARGET_COLOR)):
        t.append(dict(type="scatter", mode="lines+markers", name=name,
                      line=dict(color=color, width=2.5),
                      marker=dict(symbol="arrow", angleref="previous", color=color),
                      hovertemplate="%{text}<extra></extra>", legendgroup="graph"))
    for ti, name in enumerate(ep.type_names):
        t.append(dict(type="scatter", mode="markers", name=name, legendgroup="units",
                      marker=dict(size=ms, line=dict(color="#222222", width=1)),
                      hovertemplate="%{text}<extra></extra>"))
    if ep.has_dead:  # its name (with the count) and whether it shows change per frame
        t.append(dict(type="scatter", mode="markers", name="dead (not drawn)", legendgroup="units",
                      hoverinfo="skip",
                      marker=dict(size=max(ms - 4, 7), symbol="x-thin-open", color=DEAD_COLOR,
                                  line=dict(width=2, color=DEAD_COLOR))))
    # invisible markers of the units' size push the rank labels off the markers
    t.append(dict(type="scatter", mode="markers+text", name="decision order", legendgroup="graph",
                  textposition="top right", textfont=dict(size=max(ms - 3, 9), color="#000000"),
                  marker=dict(size=ms, opacity=0), hoverinfo="text", showlegend=False))
    for k, name in enumerate(ep.kind_names):
        mode = ep.kind_targeted[k]
        if mode == "index":
            what = f"{name} → {ep.type_names[ep.kind_target_type[k]]} %{{text}}"
        elif mode == "name":
            what = f"{name}%{{text}}"
        else:
            what = name
        t.append(dict(type="scatter", mode="markers", name=name, legendgroup="candidates",
                      xaxis="x2", yaxis="y2",
                      marker=dict(size=ep.value_marker_size, opacity=0.85,
                                  color=KIND_COLORS[k % len(KIND_COLORS)]),
                      hovertemplate=f"<b>%{{y}}</b><br>{what}<br>V = %{{x}}<extra></extra>"))
    t.append(dict(type="scatter", mode="markers", name="chosen", xaxis="x2", yaxis="y2",
                  legendgroup="candidates", hoverinfo="skip",
                  marker=dict(size=ep.value_marker_size + 7, symbol="circle-open", color="#000000",
                              line=dict(width=2))))
    t.append(dict(type="scatter", mode="markers", name="greedy", xaxis="x2", yaxis="y2",
                  legendgroup="candidates", hoverinfo="skip",
                  marker=dict(size=ep.value_marker_size + 3, symbol="x-thin-open", color="#000000",
                              line=dict(width=2, color="#000000"))))
    return t


def _frame_layout(ep: _Episode, f: Frame, title: str, label: str) -> dict:
    rows = f.agents_by_order()
    vals = np.asarray(f.cand_value, dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 1.0)
    pad = 0.06 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
    head = f"{title} · " if title else ""
    reward = f" · reward {_fmt(f.reward)}" if np.isfinite(f.reward) else ""
    n = max(rows.size, 1)
    return dict(
        title=dict(text=f"{head}step {label}{reward}"),
        xaxis2=dict(range=_round([lo - pad, hi + pad], COORD_DIGITS)),
        yaxis2=dict(range=[n - 0.5, -0.5], tickvals=list(range(rows.size)),
                    ticktext=[f"#{r + 1} {f.unit_name(int(f.agents[a]))}"
                              f"{'' if f.alive[f.agents[a]] else ' (dead)'}"
                              for r, a in enumerate(rows.tolist())]),
    )


def episode_figure(frames: Sequence[Frame], title: str = "", max_edges: int = 500,
                   seed: int = 0, frame_ms: int = 700):
    """The episode as a Plotly figure with one animation frame per :class:`Frame`.

    The base figure shows ``frames[0]``; every animation frame holds the dynamic traces
    only. Traces, in order:

    * the scene's background lines (base figure only);
    * edges, move arrows, targeted-action arrows;
    * one trace per unit type (live units only);
    * where some frame has a dead unit, a legend entry ``"dead (not drawn): <count>"``
      (no points);
    * decision-order labels (live agents);
    * one candidate trace per action kind: ``x`` the values ``V`` in the order of
      :func:`candidate_order`, ``y`` the agent's decision row;
    * chosen, greedy.

    Slider labels are the frames' :attr:`Frame.step` when those are all different, else
    the positions ``0..len(frames)-1``.

    Args:
        frames (list of Frame): The steps of the episode (:func:`~acegnn.viz.frame.frames`),
            all of one task (the same unit types, action kinds and scene).
        title (str, optional): Shown above the figure with the step. (default: :obj:`""`)
        max_edges (int, optional): At most this many edges drawn per step, each unordered
            pair of units once, chosen at random (seeded) when there are more.
            (default: :obj:`500`)
        seed (int, optional): Seed of the edge thinning. (default: :obj:`0`)
        frame_ms (int, optional): Milliseconds per step when playing. (default: :obj:`700`)

    Returns:
        plotly.graph_objects.Figure

    Raises:
        ValueError: ``frames`` is not a non-empty list of frames of one task with finite
            positions, or ``max_edges`` or ``frame_ms`` is not a non-negative int.
        ImportError: plotly is not installed.
    """
    _check(frames, max_edges)
    if isinstance(frame_ms, bool) or not isinstance(frame_ms, (int, np.integer)) or frame_ms < 0:
        raise ValueError(f"frame_ms must be a non-negative int (got {frame_ms!r})")
    try:
        import plotly.graph_objects as go
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("acegnn.viz.html needs plotly: pip install -e '.[viz]'") from e

    ep = _Episode(frames)
    rng = np.random.default_rng(seed)
    steps = [int(f.step) for f in frames]
    labels = [str(s) for s in steps] if len(set(steps)) == len(steps) else \
        [str(i) for i in range(len(frames))]
    templates = _trace_templates(ep)
    per_frame = [_frame_traces(ep, f, max_edges, rng) for f in frames]
    layouts = [_frame_layout(ep, f, title, lab) for f, lab in zip(frames, labels)]

    background = dict(type="scatter", mode="lines", name="scene", hoverinfo="skip",
                      showlegend=False, line=dict(color="#d0d0d0", width=1), x=[], y=[])
    if ep.scene is not None and ep.scene.lines:
        seg = np.asarray(ep.scene.lines, dtype=np.float64).reshape(-1, 2, 2)
        background["x"], background["y"] = _segments(seg[:, 0], seg[:, 1], COORD_DIGITS)

    data = [background] + [_merge(tpl, dyn) for tpl, dyn in zip(templates, per_frame[0])]
    dynamic = list(range(1, len(data)))
    anim = dict(mode="immediate", frame=dict(duration=frame_ms, redraw=True),
                transition=dict(duration=0), fromcurrent=True)
    jump = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))

    y0, y1 = ep.ylim
    left_y = [y1, y0] if (ep.scene is not None and ep.scene.invert_y) else [y0, y1]
    layout = dict(
        template="plotly_white",
        hovermode="closest",
        margin=dict(l=50, r=20, t=95, b=95),
        xaxis=dict(domain=[0.0, 0.5], range=_round(ep.xlim, COORD_DIGITS), zeroline=False,
                   showgrid=False, constrain="domain"),
        yaxis=dict(range=_round(left_y, COORD_DIGITS), scaleanchor="x", scaleratio=1,
                   zeroline=False, showgrid=False, constrain="domain"),
        xaxis2=dict(domain=[0.64, 1.0], anchor="y2", title=dict(text="V of the candidate SE-state",
                                                                 standoff=4),
                    hoverformat=f".{COORD_DIGITS}g", zeroline=False),
        yaxis2=dict(anchor="x2", tickmode="array", showgrid=True, zeroline=False,
                    tickfont=dict(size=10 if ep.max_agents <= 30 else 8)),
        legend=dict(orientation="h", traceorder="normal", x=0.0, y=1.0, xanchor="left",
                    yanchor="bottom", font=dict(size=11)),
        annotations=[dict(text="◆ agent · grey: cannot act · numbers: decision order · "
                               "arrows: chosen actions · ○ chosen · × greedy",
                          xref="paper", yref="paper", x=0.0, y=0.0, xanchor="left",
                          yanchor="top", yshift=-22, showarrow=False,
                          font=dict(size=11, color="#555555"))],
        updatemenus=[dict(type="buttons", direction="left", x=0.0, y=0.0, xanchor="left",
                          yanchor="top", pad=dict(t=45), showactive=False,
                          buttons=[dict(label="▶", method="animate", args=[None, anim]),
                                   dict(label="❚❚", method="animate", args=[[None], jump])])],
        sliders=[dict(active=0, x=0.09, y=0.0, len=0.91, xanchor="left", yanchor="top",
                      pad=dict(t=40, b=0), currentvalue=dict(visible=False),
                      steps=[dict(label=lab, method="animate", args=[[str(i)], jump])
                             for i, lab in enumerate(labels)])],
    )
    layout = _merge(layout, layouts[0])
    fig = go.Figure(data=data, layout=layout,
                    frames=[go.Frame(name=str(i), data=[dict(type="scatter", **d) for d in fr],
                                     traces=dynamic, layout=lay)
                            for i, (fr, lay) in enumerate(zip(per_frame, layouts))])
    return fig


def episode_page(frames: Sequence[Frame], path: PathLike, title: str = "",
                 max_edges: int = 500, seed: int = 0, frame_ms: int = 700) -> PathLike:
    """Write the episode as one self-contained interactive HTML page (plotly.js inlined:
    no server, no network) with a slider over its steps; see :func:`episode_figure`.

    Args:
        frames (list of Frame): The steps of the episode.
        path (str or os.PathLike): The HTML file to write (its folder must exist).
        title (str, optional): Page and figure title. (default: :obj:`""`)
        max_edges (int, optional): At most this many edges drawn per step.
            (default: :obj:`500`)
        seed (int, optional): Seed of the edge thinning. (default: :obj:`0`)
        frame_ms (int, optional): Milliseconds per step when playing. (default: :obj:`700`)

    Returns:
        The ``path`` written.

    Raises:
        ValueError: As :func:`episode_figure`, or ``path`` is not a file path in an
            existing folder.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"path must be a file path (got {path!r})")
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise ValueError(f"path's folder {folder} does not exist")
    fig = episode_figure(frames, title=title, max_edges=max_edges, seed=seed, frame_ms=frame_ms)
    html = fig.to_html(include_plotlyjs=True, full_html=True, auto_play=False, default_height="96vh",
                       config=dict(displaylogo=False, responsive=True))
    if title:
        import html as _html
        html = html.replace("<head>", f"<head><title>{_html.escape(title)}</title>", 1)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(html)
    return path
