"""Figures and animations of frames (acegnn.viz.draw): what is drawn, checked against the
task's positions and the rollout's own tensors."""
import dataclasses
import os

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402

from acegnn.config import load_config  # noqa: E402
from acegnn.run import make_learner, make_task  # noqa: E402
from acegnn.envs.synthetic import random_state, smac_like_schema  # noqa: E402
from acegnn.graph import collate  # noqa: E402
from acegnn.nn import ACENetwork, EpsilonGreedy, Forced  # noqa: E402
from acegnn.viz.draw import (CHOSEN_COLOR, animate, draw_candidates, draw_decision,  # noqa: E402
                             draw_frame, draw_state)
from acegnn.viz.frame import frames  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5.yaml")
SMAC = smac_like_schema()


@pytest.fixture(scope="module")
def spiders():
    """Frames of 8 Spiders-and-Fly states, with the task's own positions and moves."""
    cfg = load_config(CONFIG, ["model.hidden=16"])
    task = make_task(cfg)
    net = make_learner(cfg, task).net
    g = task.graphs(task.observe())
    with torch.no_grad():
        ro = net.rollout(g)
    pos = task.unit_positions(g)
    fs = frames(task.schema, g, ro, pos, task.scene(), task.noop_action)
    names = [task.schema.action_kinds[int(a)].name for a in ro.actions]
    return dict(task=task, frames=fs, pos=pos.numpy(), ro=ro, names=names, n=task.n_agents)


def _smac(num_agents, num_enemies, seed=0, graphs=1, **rollout):
    gen = torch.Generator().manual_seed(seed)
    states = [random_state(SMAC, num_agents, num_enemies, generator=gen) for _ in range(graphs)]
    b = collate(states)
    torch.manual_seed(seed)
    net = ACENetwork(SMAC, hidden=16)
    with torch.no_grad():
        ro = net.rollout(b, **rollout)
    return b, ro


@pytest.fixture(scope="module")
def big():
    """A 27-vs-30 state: 57 units, 3,192 edges, 27 agents with 61 candidates each."""
    b, ro = _smac(27, 30, selector=EpsilonGreedy(0.3), generator=torch.Generator().manual_seed(0))
    return frames(SMAC, b, ro)[0]


def _by_gid(fig, prefix):
    return [a for ax in fig.axes for a in ax.get_children()
            if isinstance(a.get_gid(), str) and a.get_gid().startswith(prefix)]


def test_one_marker_per_unit_at_its_position(spiders):
    f, pos = spiders["frames"][0], spiders["pos"]
    fig, drawn = draw_state(f)
    units = _by_gid(fig, "units:")
    assert all(isinstance(c, PathCollection) for c in units)
    assert sorted(c.get_gid() for c in units) == ["units:fly", "units:spider"]
    assert sum(len(c.get_offsets()) for c in units) == f.num_units == 3
    # graph 0's units come first in the flat order: spider 0, spider 1, fly 0
    spider = next(c for c in units if c.get_gid() == "units:spider")
    fly = next(c for c in units if c.get_gid() == "units:fly")
    np.testing.assert_array_equal(spider.get_offsets(), pos[0:2])
    np.testing.assert_array_equal(fly.get_offsets(), pos[2:3])
    np.testing.assert_allclose(spider.get_edgecolors(), [to_rgba("black")] * 2)  # agents ringed
    # the scene: its grid lines, its limits, rows growing downwards
    scene = spiders["task"].scene()
    (bg,) = _by_gid(fig, "background")
    assert isinstance(bg, LineCollection) and len(bg.get_segments()) == len(scene.lines)
    ax = fig.axes[0]
    assert ax.get_xlim() == scene.xlim and ax.get_ylim() == scene.ylim[::-1]
    (edges,) = _by_gid(fig, "edges")
    assert len(edges.get_segments()) == f.edges.shape[1] == 6
    assert drawn.edges == tuple(range(6)) and drawn.arrows == drawn.values == ()
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["spider", "fly"]


def test_units_that_cannot_act_are_hollow(spiders):
    f = spiders["frames"][0]
    f = dataclasses.replace(f, can_act=np.array([True, False, True]))
    spider = next(c for c in _by_gid(draw_state(f).fig, "units:spider"))
    face = spider.get_facecolors()
    assert face[0][3] == 1.0 and face[1][3] == 0.0


def test_edges_are_thinned_to_max_edges(big):
    E = big.edges.shape[1]
    assert E == 57 * 56 == 3192
    real = {(tuple(big.pos[s]), tuple(big.pos[d])) for s, d in big.edges.T}

    def drawn(**kw):
        fig, record = draw_state(big, **kw)
        lines = _by_gid(fig, "edges")
        segs = [] if not lines else [tuple(map(tuple, s)) for s in lines[0].get_segments()]
        # the record names the drawn edges, in the order drawn
        assert [(tuple(big.pos[s]), tuple(big.pos[d])) for s, d in big.edges.T[list(record.edges)]] \
            == segs
        return fig, segs

    fig, segs = drawn(max_edges=100, seed=1)
    assert len(segs) == 100 and len(set(segs)) == 100 and set(segs) <= real
    assert "100 of 3192 edges" in fig.axes[0].get_title()
    assert drawn(max_edges=100, seed=1)[1] == segs
    assert drawn(max_edges=100, seed=2)[1] != segs
    fig, segs = drawn(max_edges=None)
    assert len(segs) == E and "of" not in fig.axes[0].get_title()
    assert len(drawn(max_edges=E)[1]) == E
    assert drawn(edges=False)[1] == []


def test_targeted_arrows_go_from_the_actor_to_its_target():
    # two states of 3 allies and 4 enemies; slots: 0 stop, 1-4 moves, 5+j attack enemy j,
    # 9+j heal ally j
    gen = torch.Generator().manual_seed(0)
    b = collate([random_state(SMAC, 3, 4, generator=gen) for _ in range(2)])
    positions = torch.rand(14, 2, generator=gen)  # flat order: allies then enemies, per graph
    actions = torch.tensor([5 + 2, 9 + 0, 0,   # state 0: attack enemy 2, heal ally 0, stop
                            1, 5 + 3, 5 + 0])  # state 1: north (no scene: a dot), attacks
    ro = ACENetwork(SMAC, hidden=16).rollout(b, selector=Forced(actions))
    f0, f1 = frames(SMAC, b, ro, positions)
    P = positions.numpy().astype(float)

    def arrow(agent, a, t, kind):
        return (agent, tuple(P[a]), tuple(P[t]), kind)

    fig, drawn = draw_decision(f0)
    assert drawn.arrows == (arrow(0, 0, 3 + 2, "attack"), arrow(1, 1, 0, "heal"))
    assert drawn.still == ((2, "stop"),)
    patches = [p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert sorted(p.get_gid() for p in patches) == ["action:0", "action:1"]
    fig, drawn = draw_decision(f1)
    assert drawn.arrows == (arrow(1, 7 + 1, 7 + 3 + 3, "attack"), arrow(2, 7 + 2, 7 + 3 + 0, "attack"))
    assert drawn.still == ((0, "north"),)
    (dots,) = _by_gid(fig, "actions:still")
    np.testing.assert_allclose(dots.get_offsets(), P[7:8])


def test_move_arrows_are_the_scenes_displacements(spiders):
    moves = dict(spiders["task"].scene().moves)
    pos, names, n = spiders["pos"], spiders["names"], spiders["n"]
    arrows = 0
    for g, f in enumerate(spiders["frames"]):
        drawn = draw_decision(f).drawn
        expected, still = [], []
        for i in range(n):
            kind, start = names[g * n + i], pos[g * 3 + i]  # 3 units per state, agents first
            if kind in moves:
                end = start + np.asarray(moves[kind])
                expected.append((i, tuple(start.astype(float)), tuple(end.astype(float)), kind))
            else:
                still.append((i, kind))
        assert drawn.arrows == tuple(expected) and drawn.still == tuple(still)
        arrows += len(expected)
    assert arrows > 0


def test_order_labels_are_the_decision_order():
    b, ro = _smac(5, 4, order="random", generator=torch.Generator().manual_seed(3))
    rank = ro.rank.tolist()
    assert rank != sorted(rank)
    fig = draw_decision(frames(SMAC, b, ro)[0]).fig
    labels = {t.get_gid(): t.get_text() for t in _by_gid(fig, "order:")}
    assert labels == {f"order:{i}": str(r + 1) for i, r in enumerate(rank)}


def test_candidate_values_are_the_rollouts():
    b, ro = _smac(4, 5, selector=EpsilonGreedy(1.0), generator=torch.Generator().manual_seed(0))
    idx = ro.encoded.index
    expected = []
    for r in torch.nonzero(~torch.isnan(ro.candidate_values)).view(-1).tolist():
        a = int(idx.action_agent[r])
        expected.append((a, int(idx.action_slot[r]), float(ro.candidate_values[r]),
                         int(ro.action_ids[a]) == r, int(ro.greedy_ids[a]) == r))
    assert any(e[3] != e[4] for e in expected)  # some agent explored
    fig, drawn = draw_candidates(frames(SMAC, b, ro)[0], top_k=None)
    shown = drawn.values
    assert sorted(shown) == sorted(expected) and len(shown) == 4 * (5 + 5 + 3)
    assert drawn.hidden == {a: 0 for a in range(4)}
    # groups in decision order, best first within a group
    assert [a for a, *_ in shown] == sorted(a for a, *_ in shown)
    for a in range(4):
        v = [s[2] for s in shown if s[0] == a]
        assert v == sorted(v, reverse=True)
    # the bars: length (from the panel's left edge) is the value; chosen filled, greedy hatched
    ax = fig.axes[0]
    bars = {p.get_gid(): p for p in ax.patches if str(p.get_gid()).startswith("value:")}
    assert len(bars) == len(shown)
    for a, slot, v, chosen, greedy in shown:
        rect = bars[f"value:{a}:{slot}"]
        assert rect.get_x() == pytest.approx(ax.get_xlim()[0])
        assert rect.get_x() + rect.get_width() == pytest.approx(v, abs=1e-6)
        assert (rect.get_facecolor() == to_rgba(CHOSEN_COLOR)) == chosen
        assert bool(rect.get_hatch()) == greedy
    # relative bars: the greedy one at 0, the values kept
    fig, drawn = draw_candidates(frames(SMAC, b, ro)[0], top_k=None, relative=True)
    assert sorted(drawn.values) == sorted(expected)
    for p in fig.axes[0].patches:
        if p.get_hatch():
            assert p.get_x() + p.get_width() == pytest.approx(0.0, abs=1e-6)


def test_top_k_candidates_and_the_chosen_one():
    b, ro = _smac(5, 8, selector=EpsilonGreedy(1.0), generator=torch.Generator().manual_seed(1))
    f = frames(SMAC, b, ro)[0]
    fig, drawn = draw_candidates(f, top_k=3)
    texts = [t.get_text() for t in fig.axes[0].texts]
    explored = 0
    for a in range(5):
        vals = ro.candidate_values[ro.encoded.index.action_agent == a]
        vals = vals[~torch.isnan(vals)]
        assert vals.numel() == 5 + 8 + 4
        shown = [s for s in drawn.values if s.agent == a]
        top3 = sorted(vals.tolist(), reverse=True)[:3]
        assert [s[2] for s in shown[:3]] == pytest.approx(top3)
        chosen = [s for s in shown if s[3]]
        assert len(chosen) == 1 and chosen[0][1] == int(ro.actions[a])
        in_top = chosen[0] in shown[:3]
        explored += not in_top
        assert len(shown) == 3 + (not in_top)
        hidden = 17 - len(shown)
        assert drawn.hidden[a] == hidden
        head = f"{int(ro.rank[a]) + 1}. ally {a}  +{hidden} hidden"
        assert head in texts
    assert explored > 0


def test_large_map_draws_a_bounded_number_of_artists(big):
    # What keeps a 57-unit map fast to draw (scripts/bench_viz.py times it): the edges
    # are one collection of at most max_edges segments, the units one collection per
    # type, and the candidate figure one bar and one label per value shown.
    fig, _ = draw_decision(big)
    (edges,) = _by_gid(fig, "edges")
    assert len(edges.get_segments()) == 500
    assert len(_by_gid(fig, "units:")) == 2
    assert sum(len(ax.get_children()) for ax in fig.axes) <= 2 * 27 + 15  # arrows, order labels
    fig, drawn = draw_candidates(big)
    assert len(drawn.values) <= 27 * 6 and sum(drawn.hidden.values()) > 27 * 50
    children = [a for ax in fig.axes for a in ax.get_children()]
    assert len(children) <= 2 * len(drawn.values) + 27 + 15  # bars, values, agent headers


def test_draw_frame_and_drawing_into_given_axes(spiders):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    f = dataclasses.replace(spiders["frames"][1], step=3, reward=-1.5)
    fig, drawn = draw_frame(f)
    assert plt.get_fignums() == before  # nothing registered with pyplot, nothing shown
    assert fig._suptitle.get_text() == "step 3, reward -1.5"
    assert len(fig.axes) == 2 and not [k for k in vars(fig) if k.startswith("acegnn")]
    # every part drawn, as draw_decision and draw_candidates draw it
    assert drawn.edges and drawn.arrows + drawn.still and drawn.values
    decision, candidates = draw_decision(f).drawn, draw_candidates(f).drawn
    assert drawn == dataclasses.replace(decision, values=candidates.values, hidden=candidates.hidden)
    assert "reward" not in draw_frame(spiders["frames"][1]).fig._suptitle.get_text()
    own, axs = plt.subplots(1, 2)
    try:
        assert draw_state(f, ax=axs[0]).fig is own and draw_candidates(f, ax=axs[1]).fig is own
        assert len(_by_gid(own, "units:")) == 2
    finally:
        plt.close(own)


def test_gif_has_one_frame_per_state(spiders, tmp_path):
    from PIL import Image

    episode = [dataclasses.replace(f, step=t, reward=float(t)) for t, f in enumerate(spiders["frames"][:3])]
    path = animate(episode, tmp_path / "episode.gif", fps=4, dpi=40)
    assert path == str(tmp_path / "episode.gif")
    with Image.open(path) as im:
        assert im.n_frames == 3
        w, h = draw_frame(episode[0]).fig.get_size_inches()
        assert im.size == (round(w * 40), round(h * 40))


def test_mp4_has_one_frame_per_state(spiders, tmp_path):
    import shutil
    import subprocess

    if shutil.which("ffmpeg") is None:  # fail, not skip: scripts/install.sh installs it
        pytest.fail("ffmpeg is not on PATH: run `bash scripts/install.sh`")
    episode = [dataclasses.replace(f, step=t) for t, f in enumerate(spiders["frames"][:4])]
    path = animate(episode, tmp_path / "episode.mp4", fps=4, dpi=40)
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", path], capture_output=True, text=True,
        check=True)
    assert int(probe.stdout.strip()) == 4


def test_bad_animation_paths(spiders, tmp_path, monkeypatch):
    from matplotlib import animation

    fs = spiders["frames"][:2]
    with pytest.raises(ValueError, match=r"\.gif or \.mp4.*'\.avi'"):
        animate(fs, tmp_path / "episode.avi")
    with pytest.raises(ValueError, match="suffix 'none'"):
        animate(fs, tmp_path / "episode")
    monkeypatch.setattr(animation.writers, "is_available", lambda name: False)
    with pytest.raises(ValueError, match="needs ffmpeg"):
        animate(fs, tmp_path / "episode.mp4")
    assert os.listdir(tmp_path) == []


def test_bad_input_is_refused(spiders, tmp_path):
    f = spiders["frames"][0]
    with pytest.raises(ValueError, match="frame must be"):
        draw_state("state")
    with pytest.raises(ValueError, match="max_edges"):
        draw_decision(f, max_edges=-1)
    with pytest.raises(ValueError, match="top_k"):
        draw_candidates(f, top_k=0)
    with pytest.raises(ValueError, match="ax must be"):
        draw_state(f, ax="left")
    with pytest.raises(ValueError, match="figsize"):
        draw_frame(f, figsize=(0, 4))
    with pytest.raises(ValueError, match="at least one Frame"):
        animate([], tmp_path / "e.gif")
    with pytest.raises(ValueError, match="fps"):
        animate([f], tmp_path / "e.gif", fps=0)
    with pytest.raises(ValueError, match="frame must be"):
        animate([f, None], tmp_path / "e.gif")


def test_tiny_figures_and_missing_folders(spiders, tmp_path):
    f = spiders["frames"][0]
    draw_frame(f, figsize=(3, 1)).fig.canvas.draw()  # panels shrink, nothing fails
    with pytest.raises(ValueError, match="does not exist"):
        animate([f], tmp_path / "no" / "e.gif")


@pytest.mark.slow  # a subprocess importing torch: seconds; `make test-all` runs it
def test_bench_viz_runs(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "b.json"
    subprocess.run([sys.executable, "scripts/bench_viz.py", "--cases", "spiders", "--repeats", "1",
                    "--gif-frames", "2", "--json", str(out)],
                   cwd=os.path.join(os.path.dirname(__file__), ".."), check=True, capture_output=True)
    rec = json.loads(out.read_text())["spiders_fly_5x5"]
    assert rec["units"] == 3 and rec["gif"]["frames"] == 2 and rec["gif"]["bytes"] > 0
    assert all(rec[k] > 0 for k in ("draw_state_all_edges_s", "draw_decision_s",
                                    "draw_candidates_s", "draw_frame_s"))
