"""The interactive HTML episode page (acegnn.viz.html): figure content, a self-contained
page, and the page rendered by real headless Chromium (tests marked ``browser``)."""
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

try:
    import plotly  # noqa: F401  (needed by acegnn.viz.html)
except ImportError as e:  # fail, not skip: the default run needs the viz extra
    raise ImportError("tests/test_viz_html.py needs plotly (the viz extra): run "
                      "`bash scripts/install.sh`") from e

from acegnn.config import load_config  # noqa: E402
from acegnn.run import make_learner, make_task  # noqa: E402
from acegnn.envs.synthetic import random_state, smac_like_schema  # noqa: E402
from acegnn.graph import collate  # noqa: E402
from acegnn.nn import ACENetwork  # noqa: E402
from acegnn.viz.frame import frames  # noqa: E402
from acegnn.viz.html import candidate_order, episode_figure, episode_page  # noqa: E402

STEPS = 6


@pytest.fixture(scope="module")
def spiders():
    """A Spiders-and-Fly episode of STEPS steps (environment 0, greedy rollouts)."""
    cfg = load_config("configs/spiders_fly_5x5.yaml", ["model.hidden=16", "env.num_envs=2"])
    task = make_task(cfg)
    lrn = make_learner(cfg, task)
    out = []
    with torch.no_grad():
        for t in range(STEPS):
            g = task.graphs(task.observe())
            ro = lrn.net.rollout(g)
            f = frames(task.schema, g, ro, task.unit_positions(g), task.scene())[0]
            tr = task.step(ro.actions.view(task.num_envs, task.n_agents))
            out.append(dataclasses.replace(f, step=t, reward=float(tr.reward[0])))
    return out


@pytest.fixture(scope="module")
def smac():
    """Three SMAC-like states (units on circles, no scene): targeted actions."""
    schema = smac_like_schema()
    gen = torch.Generator().manual_seed(0)
    states = [random_state(schema, 4, 5, gen), random_state(schema, 6, 7, gen),
              random_state(schema, 3, 3, gen)]
    torch.manual_seed(0)
    net = ACENetwork(schema, hidden=16)
    b = collate(states)
    with torch.no_grad():
        ro = net.rollout(b, order="random", generator=torch.Generator().manual_seed(1))
    return frames(schema, b, ro)


def _trace(fig, name, group=None):
    """Index of the base figure's trace ``name`` (in legend group ``group``)."""
    hits = [i for i, t in enumerate(fig.data) if t.name == name and
            (group is None or t.legendgroup == group)]
    assert len(hits) == 1, (name, hits)
    return hits[0]


def _frame_trace(fig, k, name, group=None):
    """Trace ``name`` of animation frame ``k`` (frames hold the dynamic traces only)."""
    i = _trace(fig, name, group)
    fr = fig.frames[k]
    return fr.data[list(fr.traces).index(i)]


def _r(a, digits=4):
    return [None if math.isnan(v) else float(f"{v:.{digits}g}") for v in np.asarray(a, float).tolist()]


def test_one_animation_frame_and_slider_step_per_frame(spiders):
    fig = episode_figure(spiders, title="t")
    assert len(fig.frames) == len(spiders)
    steps = fig.layout.sliders[0].steps
    assert len(steps) == len(spiders)
    assert [s.args[0][0] for s in steps] == [fr.name for fr in fig.frames]
    assert [s.label for s in steps] == [str(f.step) for f in spiders]
    assert len({fr.name for fr in fig.frames}) == len(spiders)
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["▶", "❚❚"]
    # the scene's background is in the base figure only
    assert fig.data[0].name == "scene" and len(fig.data[0].x) == 3 * len(spiders[0].scene.lines)
    for fr in fig.frames:
        assert 0 not in fr.traces and len(fr.traces) == len(fig.data) - 1
        assert f"step {spiders[int(fr.name)].step}" in fr.layout.title.text
    # the grid's rows grow downwards; the plane is drawn to scale
    assert list(fig.layout.yaxis.range) == [4.5, -0.5] and fig.layout.yaxis.scaleanchor == "x"


def test_slider_labels_are_positions_when_steps_repeat(smac):
    assert {f.step for f in smac} == {0}
    fig = episode_figure(smac)
    assert [s.label for s in fig.layout.sliders[0].steps] == ["0", "1", "2"]
    assert fig.layout.yaxis.autorange is None and fig.layout.yaxis.range[0] < fig.layout.yaxis.range[1]


def test_units_that_cannot_act_are_grey_without_arrows():
    schema = smac_like_schema()
    gen = torch.Generator().manual_seed(3)
    states = [random_state(schema, 4, 5, gen), random_state(schema, 3, 3, gen, mask_prob=1.0)]
    torch.manual_seed(0)
    b = collate(states)
    with torch.no_grad():
        fs = frames(schema, b, ACENetwork(schema, hidden=16).rollout(b), noop=0)
    assert fs[0].can_act.all() and not fs[1].can_act[fs[1].agents].any()
    fig = episode_figure(fs)
    grey = _frame_trace(fig, 1, "ally", "units").marker.color
    assert grey == "#c7c7c7"
    assert _frame_trace(fig, 0, "ally", "units").marker.color == "#1f77b4"
    assert len(_frame_trace(fig, 1, "targeted action").x) == 0


@pytest.mark.parametrize("k", [0, STEPS - 1])
def test_unit_markers_at_the_frame_positions(spiders, k):
    fig = episode_figure(spiders)
    f = spiders[k]
    for ti, tname in enumerate(f.type_names):
        t = _frame_trace(fig, k, tname, "units")
        us = np.nonzero(f.unit_type == ti)[0]
        np.testing.assert_allclose(t.x, f.pos[us, 0], rtol=1e-3)
        np.testing.assert_allclose(t.y, f.pos[us, 1], rtol=1e-3)
        agents = f.is_agent[us]
        symbols = [t.marker.symbol] * us.size if isinstance(t.marker.symbol, str) else t.marker.symbol
        assert [s == "diamond" for s in symbols] == agents.tolist()
    # the base figure shows the first frame
    t0 = fig.data[_trace(fig, f.type_names[0], "units")]
    np.testing.assert_allclose(t0.x, spiders[0].pos[spiders[0].unit_type == 0, 0], rtol=1e-3)


def test_unit_hover_shows_name_features_and_embedding_norm(spiders):
    fig = episode_figure(spiders)
    for k in (0, 3):
        f = spiders[k]
        for ti, tname in enumerate(f.type_names):
            t = _frame_trace(fig, k, tname, "units")
            us = np.nonzero(f.unit_type == ti)[0]
            assert len(t.text) == us.size
            for u, text in zip(us.tolist(), t.text):
                assert f.unit_name(u) in text
                assert "[" + ", ".join(f"{v:.3g}" for v in f.features[u]) + "]" in text
                assert f"embedding norm {f.emb_norm[u]:.4g}" in text
            assert fig.data[_trace(fig, tname, "units")].hovertemplate == "%{text}<extra></extra>"


def test_candidate_values_are_the_frames_values(spiders, smac):
    for fs in (spiders, smac):
        fig = episode_figure(fs)
        for k, f in enumerate(fs):
            rows = f.agents_by_order()
            row_of = np.argsort(rows)
            seen = 0
            for ki, kname in enumerate(f.kind_names):
                t = _frame_trace(fig, k, kname, "candidates")
                c = candidate_order(f, ki)
                assert _r(t.x) == _r(f.cand_value[c])
                assert np.asarray(t.y).tolist() == row_of[f.cand_agent[c]].tolist()
                seen += c.size
            assert seen == f.cand_value.size  # every candidate, once
            for name, which in (("chosen", f.chosen), ("greedy", f.greedy)):
                t = _frame_trace(fig, k, name, "candidates")
                assert _r(t.x) == _r(f.cand_value[which[rows]])
            ticks = fig.frames[k].layout.yaxis2.ticktext
            assert list(ticks) == [f"#{r + 1} {f.unit_name(int(f.agents[a]))}"
                                   for r, a in enumerate(rows.tolist())]


def test_candidate_hover_names_agent_kind_target_and_value(smac):
    fig = episode_figure(smac)
    f = smac[1]
    attack = f.kind_names.index("attack")
    i = _trace(fig, "attack", "candidates")
    # the y axis' tick text (the agent) shows in %{y}; attack's targets are all enemies
    assert fig.data[i].hovertemplate == "<b>%{y}</b><br>attack → enemy %{text}<br>V = %{x}<extra></extra>"
    t = _frame_trace(fig, 1, "attack", "candidates")
    c = candidate_order(f, attack)
    assert list(t.text) == [str(j) for j in f.unit_local[f.cand_target[c]].tolist()]
    assert all(f.unit_type[f.cand_target[c]] == f.type_names.index("enemy"))
    stop = fig.data[_trace(fig, "stop", "candidates")]
    assert stop.hovertemplate == "<b>%{y}</b><br>stop<br>V = %{x}<extra></extra>"


def test_action_arrows(spiders, smac):
    fig = episode_figure(spiders)
    moves = 0
    for k, f in enumerate(spiders):
        t = _frame_trace(fig, k, "move")
        x, y = np.asarray(t.x, float), np.asarray(t.y, float)
        n = 0
        for a in f.agents_by_order().tolist():
            d = f.scene.move(f.kind_names[f.action_kind[a]])
            if d is None:
                continue
            p = f.pos[f.agents[a]]
            np.testing.assert_allclose([x[3 * n], y[3 * n]], p, atol=1e-3)
            np.testing.assert_allclose([x[3 * n + 1], y[3 * n + 1]], p + 0.7 * np.asarray(d), atol=1e-3)
            assert f.kind_names[f.action_kind[a]] in t.text[3 * n + 1]
            n += 1
        assert len(t.x) == 3 * n
        moves += n
    assert moves > 0
    fig = episode_figure(smac)
    arrows = 0
    for k, f in enumerate(smac):
        t = _frame_trace(fig, k, "targeted action")
        targeted = (f.action_target >= 0).sum()
        assert len(t.x) == 3 * targeted
        # arrows run from the actor towards its target
        for j, a in enumerate(a for a in f.agents_by_order().tolist() if f.action_target[a] >= 0):
            p0, p1 = f.pos[f.agents[a]], f.pos[f.action_target[a]]
            q = np.array([t.x[3 * j + 1], t.y[3 * j + 1]])
            np.testing.assert_allclose([t.x[3 * j], t.y[3 * j]], p0, atol=1e-3)
            assert np.linalg.norm(q - p1) < np.linalg.norm(p0 - p1)
            u, v = p1 - p0, q - p0
            assert abs(u[0] * v[1] - u[1] * v[0]) < 1e-2  # on the line actor -> target
            arrows += 1
        order = _frame_trace(fig, k, "decision order")
        assert list(order.text) == [str(r + 1) for r in range(f.num_agents)]
    assert arrows > 0


def _segments(t):
    """Unordered point pairs drawn by a gap-separated polyline trace."""
    pts = list(zip(t.x, t.y))
    segs = set()
    for p, q in zip(pts, pts[1:]):
        if None not in p and None not in q:
            segs.add(frozenset((p, q)))
    return segs


@pytest.mark.parametrize("max_edges", [0, 7, 500])
def test_edges_each_pair_once_thinned_to_max_edges(smac, max_edges):
    fig = episode_figure(smac, max_edges=max_edges)
    for k, f in enumerate(smac):
        key = {u: (float(f"{f.pos[u, 0]:.3g}"), float(f"{f.pos[u, 1]:.3g}")) for u in range(f.num_units)}
        pairs = {frozenset((key[a], key[b])) for a, b in f.edges.T.tolist() if a != b}
        t = _frame_trace(fig, k, "edges")
        segs = _segments(t)
        drawn = sum(1 for p, q in zip(zip(t.x, t.y), list(zip(t.x, t.y))[1:])
                    if None not in p and None not in q)
        assert drawn == len(segs)  # no pair twice
        assert segs <= pairs
        assert len(segs) == min(max_edges, len(pairs))
    again = episode_figure(smac, max_edges=max_edges)
    assert again.frames[1].data[0].x == fig.frames[1].data[0].x  # seeded


def _page_json(html, call):
    """The JSON argument list after ``call(`` in the page."""
    i = html.index(call) + len(call)
    dec = json.JSONDecoder()
    i = html.index(",", i) + 1
    val, _ = dec.raw_decode(html[i:].lstrip())
    return val


def test_page_is_self_contained_and_embeds_every_step(spiders, tmp_path):
    path = tmp_path / "spiders.html"
    assert episode_page(spiders, path, title="Spiders & Fly") == path
    html = path.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<html") or html.lstrip().lower().startswith("<!doctype")
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", html, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?(https?:)?//", html, re.I)
    assert "<title>Spiders &amp; Fly</title>" in html
    assert len(html) > 3_000_000  # plotly.js is inlined
    page_frames = _page_json(html, "Plotly.addFrames(")
    assert [fr["name"] for fr in page_frames] == [str(i) for i in range(len(spiders))]
    # floats are rounded in the page: positions of the first step's units
    units = page_frames[0]["data"][3]
    assert units["x"] == _r(spiders[0].pos[spiders[0].unit_type == 0, 0])
    # what the page adds to plotly.js stays small for a short episode
    assert len(html) - _plotlyjs_size() < 150_000


def _plotlyjs_size():
    from plotly.offline import get_plotlyjs
    return len(get_plotlyjs())


def test_bad_input_raises_value_error(spiders, smac, tmp_path):
    with pytest.raises(ValueError, match="frames"):
        episode_figure([])
    with pytest.raises(ValueError, match="frames"):
        episode_figure(spiders[0])
    with pytest.raises(ValueError, match=r"frames\[1\]"):
        episode_figure([spiders[0], "x"])
    with pytest.raises(ValueError, match=r"frames\[1\]"):
        episode_figure([spiders[0], smac[0]])
    with pytest.raises(ValueError, match="max_edges"):
        episode_figure(spiders, max_edges=-1)
    with pytest.raises(ValueError, match="max_edges"):
        episode_figure(spiders, max_edges=2.5)
    bad = dataclasses.replace(spiders[1], pos=spiders[1].pos[:1])
    with pytest.raises(ValueError, match=r"frames\[1\]\.pos"):
        episode_figure([spiders[0], bad])
    with pytest.raises(ValueError, match="path"):
        episode_page(spiders, tmp_path / "missing" / "p.html")
    assert not (tmp_path / "missing").exists()


# --- real headless Chromium ------------------------------------------------------------

def _chromium():
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not on PATH: run `bash scripts/install.sh` (it installs "
                    "Debian's chromium with apt-get), or `apt-get install chromium`")
    return exe


def _run_chromium(args, tmp_path):
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,700",
           "--virtual-time-budget=5000"] + args
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, HOME=str(tmp_path)))
    return res


@pytest.mark.browser
def test_page_renders_in_headless_chromium(spiders, tmp_path):
    from PIL import Image

    page = episode_page(spiders, tmp_path / "episode.html", title="Spiders-and-Fly")
    png = tmp_path / "shot.png"
    res = _run_chromium([f"--screenshot={png}", page.resolve().as_uri()], tmp_path)
    assert png.exists(), f"no screenshot (rc {res.returncode}):\n{res.stderr[-2000:]}"
    img = Image.open(png).convert("RGB")
    assert img.size == (1200, 700)
    a = np.asarray(img)
    colours = np.unique(a.reshape(-1, 3), axis=0).shape[0]
    assert colours > 50, f"only {colours} colours: blank page?"
    non_white = (a < 245).any(axis=2)
    assert non_white.mean() > 0.02, f"only {non_white.mean():.3%} non-white pixels"
    # both panels are drawn: the graph on the left, the candidate values on the right
    band = non_white[100:500]
    assert band[:, :600].mean() > 0.02 and band[:, 640:].mean() > 0.005
    # unit colours are on the page: the spiders' blue and the fly's red
    for rgb in ((31, 119, 180), (214, 39, 40)):
        assert (np.abs(a.astype(int) - rgb).sum(axis=2) < 30).sum() > 30, rgb


HOVER_JS = """<script>
function grab(gd){return Array.from(gd.querySelectorAll('.hovertext')).map(e=>e.textContent).join('|');}
setTimeout(function(){
  var gd=document.getElementsByClassName('plotly-graph-div')[0], out=[], q=%s;
  function step(i){
    if(i==q.length){
      // headless Chromium's virtual time runs timers but no animation frames
      window.requestAnimationFrame=function(cb){return setTimeout(function(){cb(performance.now());},16);};
      Plotly.animate(gd,[LAST],{mode:'immediate',frame:{duration:0,redraw:true},transition:{duration:0}})
      .then(function(){
        out.push(gd.querySelector('.gtitle').textContent);
        out.push(Array.from(gd.querySelectorAll('.yaxislayer-above .y2tick text'))
                 .map(e=>e.textContent).join('|'));
        var d=document.createElement('pre'); d.id='hoverdump';
        d.textContent=JSON.stringify(out); document.body.appendChild(d);});
      return;}
    Plotly.Fx.unhover(gd); Plotly.Fx.hover(gd,[{curveNumber:q[i][0],pointNumber:q[i][1]}],q[i][2]);
    setTimeout(function(){out.push(grab(gd)); step(i+1);},200);}
  step(0);
},1000);
</script></body>"""


@pytest.mark.browser
def test_hover_labels_in_headless_chromium(smac, tmp_path):
    """Hover labels as Chromium draws them: a unit (name, features, embedding norm) and a
    candidate (agent from the axis' tick text, kind, target, V); then a jump to the last
    step as the slider does it."""
    fig = episode_figure(smac)
    f = smac[0]
    enemy = f.type_names.index("enemy")
    u = int(np.nonzero(f.unit_type == enemy)[0][0])
    attack = f.kind_names.index("attack")
    c = candidate_order(f, attack)[0]
    agent_row = int(np.argsort(f.agents_by_order())[f.cand_agent[c]])
    q = [[_trace(fig, "enemy", "units"), 0, "xy"],
         [_trace(fig, "attack", "candidates"), 0, "x2y2"]]
    page = episode_page(smac, tmp_path / "hover.html")
    js = (HOVER_JS % json.dumps(q)).replace("LAST", json.dumps(str(len(smac) - 1)))
    html = page.read_text(encoding="utf-8").replace("</body>", js, 1)
    page.write_text(html, encoding="utf-8")
    res = _run_chromium(["--dump-dom", page.resolve().as_uri()], tmp_path)
    m = re.search(r'<pre id="hoverdump">(.*?)</pre>', res.stdout, re.S)
    assert m, f"no hover output (rc {res.returncode}):\n{res.stderr[-2000:]}"
    unit_label, cand_label, title, ticks = json.loads(
        m.group(1).replace("&amp;", "&").replace("&quot;", '"'))
    assert f.unit_name(u) in unit_label
    assert ", ".join(f"{v:.3g}" for v in f.features[u]) in unit_label
    assert f"embedding norm {f.emb_norm[u]:.4g}" in unit_label
    agent = f.unit_name(int(f.agents[f.cand_agent[c]]))
    assert f"#{agent_row + 1} {agent}" in cand_label
    assert f"attack → {f.unit_name(int(f.cand_target[c]))}" in cand_label
    assert f"V = {f.cand_value[c]:.4g}" in cand_label
    # the slider's animation reaches the last step: its title and its agents' rows
    last = smac[-1]
    assert title.endswith(f"step {len(smac) - 1}")
    assert ticks.split("|") == [f"#{r + 1} {last.unit_name(int(last.agents[a]))}"
                                for r, a in enumerate(last.agents_by_order().tolist())]


def test_page_sizes(spiders, tmp_path):
    """A 100-step 27-vs-30 episode (3,192 edges a state, 500 drawn) stays under 10 MB,
    about 4.4 MB over the inlined plotly.js."""
    schema = smac_like_schema()
    gen = torch.Generator().manual_seed(0)
    states = [random_state(schema, 27, 30, gen) for _ in range(100)]
    torch.manual_seed(0)
    net = ACENetwork(schema, hidden=16)
    b = collate(states)
    with torch.no_grad():
        fs = frames(schema, b, net.rollout(b))
    assert fs[0].edges.shape == (2, 3192)
    big = os.path.getsize(episode_page(fs, tmp_path / "smac.html", max_edges=500))
    assert big < 10_000_000, big
