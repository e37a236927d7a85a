"""Drawing battles with dead units (acegnn.viz on real SMAX states): a dead unit
influences nothing in the network, so the figures and the HTML page leave it out, with
its label and every edge that has it as an end; a dead agent keeps its forced no-op in
the candidate values, marked dead. Spiders-and-Fly (no alive flags) draws as before."""
import dataclasses
import json
import os
import re

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
pytest.importorskip("jaxmarl")

from test_viz_html import _frame_trace, _page_json, _run_chromium, _segments, _trace  # noqa: E402

from acegnn.config import load_config  # noqa: E402
from acegnn.run import make_learner, make_task  # noqa: E402
from acegnn.envs.smac.smax import SMAXTask  # noqa: E402
from acegnn.envs.smac.units import battle_schema  # noqa: E402
from acegnn.graph import unit_index  # noqa: E402
from acegnn.nn import ACENetwork  # noqa: E402
from acegnn.viz.draw import draw_candidates, draw_decision, draw_frame, draw_state  # noqa: E402
from acegnn.viz.frame import frames  # noqa: E402
from acegnn.viz.html import episode_figure, episode_page  # noqa: E402

SPIDERS = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5.yaml")
KILLED = (1, 4)  # battle 0 of 3m: ally 1 and enemy 1 (units: 3 allies, then 3 enemies)
ALIVE = [[True, False, True, True, False, True], [True] * 6]


@pytest.fixture(scope="module")
def battle():
    """Two 3m battles (the size tests/test_smax.py compiles) one step after ally 1 and
    enemy 1 of battle 0 were killed in the engine's state; battle 1 untouched."""
    task = SMAXTask("3m", 2, seed=1)
    s = task._state.state
    health = s.unit_health
    for u in KILLED:
        health = health.at[0, u].set(0.0)
    task._state = task._state.replace(state=s.replace(unit_health=health, unit_alive=health > 0))
    task.step(torch.full((2, 3), task.noop_action))  # every unit stops; the next state shows it
    obs = task.observe()
    g = task.graphs(obs)
    torch.manual_seed(0)
    net = ACENetwork(battle_schema(), hidden=16)
    with torch.no_grad():
        ro = net.rollout(g)
    fs = frames(task.schema, g, ro, task.unit_positions(g), task.scene(), task.noop_action)
    fs = [dataclasses.replace(f, step=k) for k, f in enumerate(fs)]
    return dict(task=task, obs=obs, graphs=g, frames=fs)


@pytest.fixture(scope="module")
def spiders():
    cfg = load_config(SPIDERS, ["model.hidden=16", "env.num_envs=2"])
    task = make_task(cfg)
    net = make_learner(cfg, task).net
    g = task.graphs(task.observe())
    with torch.no_grad():
        ro = net.rollout(g)
    return frames(task.schema, g, ro, task.unit_positions(g), task.scene(), task.noop_action)


def _by_gid(fig, prefix):
    return [a for ax in fig.axes for a in ax.get_children()
            if isinstance(a.get_gid(), str) and a.get_gid().startswith(prefix)]


def _legend(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def _touches(points, p, atol=1e-6):
    return bool(np.any(np.all(np.isclose(np.asarray(points, float), p, atol=atol), axis=-1)))


def test_frames_carry_the_batchs_alive_flags(battle):
    f0, f1 = battle["frames"]
    assert (battle["obs"]["units"][..., 6] > 0).tolist() == ALIVE  # the engine's own flags
    assert f0.alive.tolist() == ALIVE[0] and f1.alive.tolist() == ALIVE[1]
    idx = unit_index(battle_schema(), battle["graphs"])
    assert np.concatenate([f0.alive, f1.alive]).tolist() == idx.unit_alive.tolist()
    assert (f0.num_dead, f1.num_dead) == (2, 0)
    # what the drawings must not show: a dead unit reads (0, 0), the map's corner
    assert (f0.pos[~f0.alive] == 0).all() and (f0.pos[f0.alive] > 1).all()
    # 6 units, 30 edges; 4 live units, 12 edges between them
    assert f0.edges.shape == (2, 30) and int(f0.live_edges.sum()) == 12
    assert f0.live_edges.tolist() == (f0.alive[f0.edges[0]] & f0.alive[f0.edges[1]]).tolist()
    assert f1.live_edges.all()
    # the dead agent has only its no-op; it cannot act
    assert f0.cand_slot[f0.candidates_of(1)].tolist() == [battle["task"].noop_action]
    assert not f0.can_act[f0.agents[1]]


def test_dead_units_their_labels_and_edges_are_not_drawn(battle):
    f = battle["frames"][0]
    dead_pos = f.pos[~f.alive]
    fig, drawn = draw_state(f)
    units = _by_gid(fig, "units:")
    assert sorted(c.get_gid() for c in units) == ["units:ally", "units:enemy"]
    for c in units:
        t = f.type_names.index(c.get_gid().split(":")[1])
        np.testing.assert_array_equal(c.get_offsets(), f.pos[(f.unit_type == t) & f.alive])
    assert sum(len(c.get_offsets()) for c in units) == 4
    (edges,) = _by_gid(fig, "edges")
    segs = np.asarray(edges.get_segments())
    assert segs.shape == (12, 2, 2)
    for p in dead_pos:
        assert not _touches(segs.reshape(-1, 2), p)
    assert all(_touches(f.pos[f.alive], q) for q in segs.reshape(-1, 2))
    assert set(drawn.edges) == set(np.nonzero(f.live_edges)[0].tolist())
    names = {t.get_gid() for t in _by_gid(fig, "name:")}
    assert names == {f"name:{u}" for u in np.nonzero(f.alive)[0]}
    assert "dead (not drawn): 2" in _legend(fig)
    # edge counts count the live edges
    assert "(5 of 12 edges shown)" in draw_state(f, max_edges=5).fig.axes[0].get_title()
    assert "edges shown" not in fig.axes[0].get_title()
    # battle 1: everything drawn, no dead handle
    fig = draw_state(battle["frames"][1]).fig
    assert sum(len(c.get_offsets()) for c in _by_gid(fig, "units:")) == 6
    assert len(_by_gid(fig, "edges")[0].get_segments()) == 30
    assert not any("dead" in t for t in _legend(fig))


def test_a_dead_agent_has_no_arrow_and_its_no_op_is_marked_dead(battle):
    f = battle["frames"][0]
    fig, drawn = draw_decision(f)
    assert sorted(a.agent for a in drawn.arrows + drawn.still) == [0, 2]
    assert {t.get_gid() for t in _by_gid(fig, "order:")} == {"order:0", "order:2"}
    for p in f.pos[~f.alive]:
        assert not any(_touches([a.start, a.end], p) for a in drawn.arrows)
        assert all(not _touches(c.get_offsets(), p) for c in _by_gid(fig, "actions:still"))
    fig, drawn = draw_candidates(f)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert f"{int(f.order[1]) + 1}. ally 1 (dead)" in texts
    assert sum("(dead)" in t for t in texts) == 1
    noop = battle["task"].noop_action
    assert [v[:2] + v[3:] for v in drawn.values if v.agent == 1] == [(1, noop, True, True)]
    fig = draw_frame(f).fig  # what `acegnn viz` and the TensorBoard episode draw
    assert "dead (not drawn): 2" in _legend(fig)
    assert sum(len(c.get_offsets()) for c in _by_gid(fig, "units:")) == 4


def test_limits_without_a_scene_are_the_live_units(battle):
    f = dataclasses.replace(battle["frames"][0], scene=None)
    ax = draw_state(f).fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    live = f.pos[f.alive]
    assert 0 < x0 < live[:, 0].min() and x1 > live[:, 0].max()
    assert 0 < y0 < live[:, 1].min() and y1 > live[:, 1].max()
    fig = episode_figure([f])
    assert fig.layout.xaxis.range[0] > 0 and fig.layout.yaxis.range[0] > 0


def test_page_leaves_dead_units_out(battle, tmp_path):
    f0, f1 = battle["frames"]
    fig = episode_figure([f0, f1])
    key = {u: (float(f"{f0.pos[u, 0]:.3g}"), float(f"{f0.pos[u, 1]:.3g}")) for u in range(6)}
    live = [u for u in range(6) if f0.alive[u]]
    # units: live ones only, in hover and on the plane
    for ti, tname in enumerate(f0.type_names):
        t = _frame_trace(fig, 0, tname, "units")
        us = np.nonzero((f0.unit_type == ti) & f0.alive)[0]
        np.testing.assert_allclose(t.x, f0.pos[us, 0], rtol=1e-3)
        np.testing.assert_allclose(t.y, f0.pos[us, 1], rtol=1e-3)
        assert [re.search(r"<b>(.*?)</b>", s).group(1) for s in t.text] == \
            [f0.unit_name(u) for u in us]
        assert len(_frame_trace(fig, 1, tname, "units").x) == 3
    # edges: each live pair once, none with a dead end
    segs = _segments(_frame_trace(fig, 0, "edges"))
    assert segs == {frozenset((key[a], key[b])) for a in live for b in live if a < b}
    assert len(_segments(_frame_trace(fig, 1, "edges"))) == 15
    # ranks next to live agents only; the dead agent's candidate row is marked dead
    order = _frame_trace(fig, 0, "decision order")
    assert sorted(order.text) == sorted(str(int(f0.order[a]) + 1) for a in (0, 2))
    assert not any("ally 1" in h for h in order.hovertext)
    ticks = list(fig.frames[0].layout.yaxis2.ticktext)
    assert f"#{int(f0.order[1]) + 1} ally 1 (dead)" in ticks and sum("(dead)" in t for t in ticks) == 1
    assert not any("(dead)" in t for t in fig.frames[1].layout.yaxis2.ticktext)
    # the legend entry: a count per step, no point
    names = [fig.frames[k].data[list(fig.frames[k].traces).index(
        _trace(fig, "dead (not drawn): 2", "units"))] for k in (0, 1)]
    assert [d.name for d in names] == ["dead (not drawn): 2", "dead (not drawn): 0"]
    assert list(names[0].x) == [None] and list(names[1].x) == []
    # the written page lists no dead unit
    page = episode_page([f0, f1], tmp_path / "battle.html")
    data = _page_json(page.read_text(encoding="utf-8"), "Plotly.addFrames(")[0]["data"]
    hover = " ".join(s for tr in data for s in (tr.get("text") or []) if isinstance(s, str))
    for u in range(6):
        assert (f"<b>{f0.unit_name(u)}</b>" in hover) == bool(f0.alive[u])


@pytest.mark.browser
def test_page_legend_counts_the_dead_in_headless_chromium(battle, tmp_path):
    js = """<script>
function legend(gd){return Array.from(gd.querySelectorAll('.legendtext')).map(e=>e.textContent).join('|');}
setTimeout(function(){
  var gd=document.getElementsByClassName('plotly-graph-div')[0], out=[legend(gd)];
  window.requestAnimationFrame=function(cb){return setTimeout(function(){cb(performance.now());},16);};
  Plotly.animate(gd,['1'],{mode:'immediate',frame:{duration:0,redraw:true},transition:{duration:0}})
  .then(function(){
    out.push(legend(gd));
    var d=document.createElement('pre'); d.id='dump'; d.textContent=JSON.stringify(out);
    document.body.appendChild(d);});
},1000);
</script></body>"""
    page = episode_page(battle["frames"], tmp_path / "battle.html")
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", js, 1), encoding="utf-8")
    res = _run_chromium(["--dump-dom", page.resolve().as_uri()], tmp_path)
    m = re.search(r'<pre id="dump">(.*?)</pre>', res.stdout, re.S)
    assert m, f"no legend output (rc {res.returncode}):\n{res.stderr[-2000:]}"
    first, second = json.loads(m.group(1).replace("&amp;", "&").replace("&quot;", '"'))
    assert "dead (not drawn): 2" in first.split("|")
    assert "dead" not in second and "ally" in second.split("|")


def test_spiders_and_fly_draws_as_before(spiders):
    for f in spiders:
        assert f.alive.tolist() == [True] * 3 and f.num_dead == 0 and f.live_edges.all()
        fig = draw_decision(f).fig
        assert sum(len(c.get_offsets()) for c in _by_gid(fig, "units:")) == 3
        assert len(_by_gid(fig, "edges")[0].get_segments()) == 6
        assert {t.get_gid() for t in _by_gid(fig, "name:")} == {"name:0", "name:1", "name:2"}
        assert {t.get_gid() for t in _by_gid(fig, "order:")} == {"order:0", "order:1"}
        assert not any("dead" in t for t in _legend(fig))
        assert not any("dead" in t.get_text() for t in draw_candidates(f).fig.axes[0].texts)
    fig = episode_figure(spiders)
    assert [t.name for t in fig.data] == [
        "scene", "edges", "move", "targeted action", "spider", "fly", "decision order",
        *spiders[0].kind_names, "chosen", "greedy"]
    for k, f in enumerate(spiders):
        assert len(_frame_trace(fig, k, "spider", "units").x) + \
            len(_frame_trace(fig, k, "fly", "units").x) == 3
        assert len(_segments(_frame_trace(fig, k, "edges"))) == 3


def test_alive_flags_are_one_per_unit(spiders):
    f = spiders[0]
    assert dataclasses.replace(f, alive=None).alive.tolist() == [True] * 3
    with pytest.raises(ValueError, match=r"alive must have shape \(3,\).*\(2,\)"):
        dataclasses.replace(f, alive=np.array([True, False]))
