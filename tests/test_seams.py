"""The seams: a task defined outside the package, registered with one call, trained and
evaluated through the CLI's entry points; agents that stop acting; engines that cannot be
snapshotted or that drop steps; missing back-ends; pluggable selectors."""
import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar, Dict, Optional

import pytest
import torch

from acegnn.algos import ACEDQN, ACEDQNConfig, Collector
from acegnn.algos.value_decomposition import (AgentModelConfig, ValueDecomposition,
                                              ValueDecompositionConfig)
from acegnn.buffers import ReplayBuffer
from acegnn.cli import main
from acegnn.config import load_config
from acegnn.envs import (ENVS, EvalResult, MissingBackend, Transition, VecTask, first_episodes,
                         register_env)
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import (ACTION, ActionKind, GraphSchema, build_state, collate,
                          dense_actions, full_edges, only_noop)
from acegnn.nn import ACENetwork, EpsilonGreedy, Forced, ModelConfig, Selector

# A toy task: walkers on a line of L cells walk to a goal cell. A walker that reached the
# goal can no longer act (only its no-op, "stay", is available) but stays in the state.
# The episode ends when every walker is home; each arrival is worth 1.
L, WALKERS, LIMIT = 5, 2, 8
STAY, LEFT, RIGHT = 0, 1, 2
SCHEMA = GraphSchema(
    node_types={"walker": 2, "goal": 1},
    edge_types={("walker", "near", "goal"): 1, ("walker", "near", "walker"): 1},
    agent_types=("walker",),
    action_kinds=(ActionKind("stay"), ActionKind("left"), ActionKind("right")),
)


@dataclass
class LineEval(EvalResult):
    home_rate: float  # episodes in which every walker got home
    mean_steps: float

    success_metric: ClassVar[str] = "home_rate"
    headline: ClassVar[tuple] = ("home_rate", "mean_steps")


class LineTask(VecTask):
    """Walkers start at cells 0 and 1; the goal is cell L - 1. No snapshots."""

    n_agents = WALKERS
    noop_action = STAY
    schema = SCHEMA
    obs_spec = {"pos": ((WALKERS,), torch.int8), "t": ((), torch.int8)}

    def __init__(self, num_envs: int, seed: int, drop_at: Optional[int] = None) -> None:
        self.num_envs, self.drop_at, self.steps = num_envs, drop_at, 0
        self.gen = torch.Generator().manual_seed(seed)
        self.pos = self._starts(num_envs)
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def _starts(self, n: int) -> torch.Tensor:
        return torch.randint(0, 2, (n, WALKERS), generator=self.gen)

    def observe(self) -> Dict[str, torch.Tensor]:
        return {"pos": self.pos.clone(), "t": self.t.clone()}

    def graphs(self, obs):
        states = []
        for pos in obs["pos"].long():
            home = pos == L - 1
            x = {"walker": torch.stack([pos / (L - 1), home.float()], 1),
                 "goal": torch.ones(1, 1)}
            ww = full_edges(WALKERS, WALKERS, same=True)
            ei = {("walker", "near", "goal"): full_edges(WALKERS, 1, same=False),
                  ("walker", "near", "walker"): ww}
            ea = {("walker", "near", "goal"): ((L - 1 - pos) / (L - 1)).float().view(-1, 1),
                  ("walker", "near", "walker"): ((pos[ww[1]] - pos[ww[0]]) / (L - 1)).float().view(-1, 1)}
            live = torch.stack([torch.ones(WALKERS, dtype=torch.bool), pos > 0, pos < L - 1], 1)
            avail = only_noop(live, ~home, STAY)
            states.append(build_state(SCHEMA, x, ei, ea,
                                      dense_actions(SCHEMA, "walker", torch.arange(3), avail)))
        return collate(states)

    def step(self, actions: torch.Tensor) -> Transition:
        home = self.pos == L - 1
        if bool((home & (actions != STAY)).any()):
            raise ValueError("a walker at home acted")
        move = torch.tensor([0, -1, 1])[actions]
        nxt = (self.pos + move).clamp(0, L - 1)
        reward = ((nxt == L - 1) & ~home).sum(1).float()
        self.t += 1
        terminated = (nxt == L - 1).all(1)
        truncated = (self.t >= LIMIT) & ~terminated
        next_obs = {"pos": nxt.clone(), "t": self.t.clone()}
        done = terminated | truncated
        self.pos = torch.where(done[:, None], self._starts(self.num_envs), nxt)
        self.t = self.t.masked_fill(done, 0)
        self.steps += 1
        dropped = None
        if self.drop_at is not None and self.steps == self.drop_at:  # env 0's engine died
            dropped = torch.zeros(self.num_envs, dtype=torch.bool)
            dropped[0] = True
        return Transition(reward, terminated, truncated, next_obs, dropped)

    def evaluate(self, act, episodes: int, seed: int) -> LineEval:
        ep = first_episodes(LineTask(episodes, seed), act, LIMIT)
        return LineEval(home_rate=float(ep.terminated.float().mean()),
                        mean_steps=float(ep.length.float().mean()))


@dataclass
class LineConfig:
    name: str = "line"
    num_envs: int = 4
    """Walker lines stepped together."""

    def make(self, seed: int) -> LineTask:
        return LineTask(self.num_envs, seed)


TINY = ["train.total_samples=768", "train.samples_per_collect=128", "train.batch_size=32",
        "train.updates_per_collect=4", "train.learning_starts=128", "train.eval_every=256",
        "train.eval_episodes=8", "train.checkpoint_every=256", "train.eps_decay=512",
        "train.progress=false", "model.hidden=16", "train.stop_on_success=false"]


@pytest.fixture
def line_env():
    register_env("line", LineConfig)  # the one call that makes the task available
    yield
    ENVS.unregister("line")


def write_config(tmp_path, algo="ace_dqn"):
    path = tmp_path / "line.yaml"
    path.write_text(f"env:\n  name: line\nalgo:\n  name: {algo}\n")
    return str(path)


def run_line(tmp_path, name, *extra, algo="ace_dqn"):
    return main(["train", write_config(tmp_path, algo), *TINY, f"run.dir={tmp_path}",
                 f"run.name={name}", *extra])


@pytest.mark.parametrize("algo", ["ace_dqn", "qmix"])
def test_a_task_from_outside_trains_and_evaluates_through_the_cli(tmp_path, line_env, capsys, algo):
    assert run_line(tmp_path, "a", algo=algo) == 0
    run = tmp_path / "a"
    header = (run / "eval.csv").read_text().splitlines()[0]
    assert header == "samples,home_rate,mean_steps"  # the task's own metrics, in order
    assert main(["eval", str(run), "--episodes", "4"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out) == {"checkpoint", "samples", "home_rate", "mean_steps"}
    assert out["samples"] == 768 and 1 <= out["mean_steps"] <= LIMIT


def test_resume_of_a_task_without_snapshots_restarts_its_episodes(tmp_path, line_env, capsys):
    assert run_line(tmp_path, "cut", "train.halt_after=512") == 3
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "cut")]) == 0
    err = capsys.readouterr().err
    assert err.count("cannot restore its environments") == 1
    state = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert state["samples"] == 768 and state["task"] is None and state["updates"] == 24


def test_a_missing_backend_names_the_extra_to_install(tmp_path, capsys):
    register_env("line", LineConfig, extra="line", requires=("acegnn_no_such_engine",))
    try:
        assert run_line(tmp_path, "x") == 2
    finally:
        ENVS.unregister("line")
    err = capsys.readouterr().err
    assert "env.name=line needs acegnn_no_such_engine" in err
    assert "pip install -e '.[line]'" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_the_config_of_a_missing_backend_loads_when_asked_to(tmp_path):
    register_env("line", LineConfig, extra="line", requires=("acegnn_no_such_engine",))
    try:
        with pytest.raises(MissingBackend, match="needs acegnn_no_such_engine"):
            load_config(None, ["env.name=line"])
        cfg = load_config(None, ["env.name=line", "train.device=cpu"], backend=False)
    finally:
        ENVS.unregister("line")
    assert isinstance(cfg.env, LineConfig)


def test_registering_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_env("spiders_fly", LineConfig)


def test_each_learner_owns_its_model_config(tmp_path, line_env, capsys):
    assert run_line(tmp_path, "v", "model.conv=gatv2", algo="vdn") == 2
    err = capsys.readouterr().err
    assert "conv" in err and "model.hidden" in err and "model.layers" in err
    assert not (tmp_path / "v").exists()
    assert run_line(tmp_path, "g", "model.conv=gatv2", "train.total_samples=256") == 0


def walk(g):
    """Every walker that can walks right; walkers at home take their no-op."""
    return (g[ACTION].available.view(-1, 3) * torch.arange(1, 4)).argmax(1)


def test_first_episodes_by_hand():
    ep = first_episodes(LineTask(6, seed=2), walk, LIMIT)
    start = ep.start["pos"]
    assert set(start.view(-1).tolist()) == {0, 1}  # both starts occur
    assert ep.length.tolist() == (L - 1 - start.min(1).values).tolist()  # the slower walker
    assert ep.returns.tolist() == [2.0] * 6 and bool(ep.terminated.all())
    cut = first_episodes(LineTask(6, seed=2), walk, 2)  # nobody is home after 2 steps
    assert cut.length.tolist() == [2] * 6 and not bool(cut.terminated.any())
    assert cut.returns.tolist() == [0.0] * 6


def test_collector_drops_the_steps_of_a_restarted_engine():
    task = LineTask(3, seed=0, drop_at=2)
    stored = []
    collector = Collector(task, stored.append)
    stats = collector.run(walk, 4)
    assert [s.actions.size(0) for s in stored] == [3, 2, 3, 3]
    assert collector.samples == 11 and stats["dropped_episodes"] == 1.0
    # walking right from 0 or 1 gets both home in 3 or 4 steps; env 0 restarted at step 2,
    # so its first episode is not counted
    assert collector.ep_length[0] <= 2


# Agents that can no longer act ----------------------------------------------------------
def states_with_dead_agents(seed=0):
    """SMAC-like states (stop is slot 0) in which some allies are dead."""
    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema()
    states, dead = [], []
    for na, ne in [(3, 2), (2, 3), (4, 4)]:
        s = random_state(schema, na, ne, g, mask_prob=0.3)
        alive = torch.ones(na, dtype=torch.bool)
        alive[1] = False
        avail = s[ACTION].available.view(na, -1)
        s[ACTION].available = only_noop(avail, alive, 0).view(-1)
        states.append(s)
        dead.append(~alive)
    return schema, states, torch.cat(dead)


def test_only_noop_leaves_the_noop_alone_to_dead_agents():
    avail = torch.tensor([[True, True, False], [False, True, True]])
    out = only_noop(avail, torch.tensor([True, False]), 0)
    assert out.tolist() == [[True, True, False], [True, False, False]]
    with pytest.raises(ValueError, match="noop must be a slot"):
        only_noop(avail, torch.tensor([True, False]), 3)


def test_dead_agents_in_the_rollout_and_ace_dqn():
    torch.manual_seed(0)
    schema, states, dead = states_with_dead_agents()
    net = ACENetwork(schema, hidden=16)
    b = collate(states)
    for sel in (None, EpsilonGreedy(1.0)):
        ro = net.rollout(b, order="random", selector=sel, generator=torch.Generator().manual_seed(1))
        assert bool((ro.actions[dead] == 0).all())
        idx = ro.encoded.index
        valued = ~torch.isnan(ro.candidate_values)
        per_agent = torch.bincount(idx.action_agent[valued], minlength=idx.num_agents)
        assert bool((per_agent[dead] == 1).all()) and bool((per_agent[~dead] > 1).all())
    bad = ro.actions.clone()
    bad[dead.nonzero()[0]] = 1  # a dead agent moving
    with pytest.raises(ValueError, match="not available"):
        net.rollout(b, selector=Forced(bad))
    lrn = ACEDQN(schema, ACEDQNConfig(), ModelConfig(hidden=16))
    acts = lrn.act(b, 1.0, torch.Generator().manual_seed(0))
    assert bool((acts[dead] == 0).all())
    m = lrn.update(b, acts, torch.ones(3), torch.zeros(3, dtype=torch.bool), b)
    assert torch.isfinite(torch.tensor(m["td_loss"]))


@pytest.mark.parametrize("method", ["vdn", "qtran"])
def test_dead_agents_in_the_baselines_and_replay(method):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    schema = smac_like_schema()
    states = [random_state(schema, 3, 2, g) for _ in range(4)]
    alive = torch.tensor([[True, False, True]] * 4)
    for s, a in zip(states, alive):
        s[ACTION].available = only_noop(s[ACTION].available.view(3, -1), a, 0).view(-1)
    b = collate(states)
    lrn = ValueDecomposition(schema, ValueDecompositionConfig(name=method),
                             AgentModelConfig(hidden=16), example=b)
    acts = lrn.act(b, 1.0, torch.Generator().manual_seed(0)).view(4, 3)
    assert bool((acts[:, 1] == 0).all()) and bool((acts[:, [0, 2]] > 0).any())
    buf = ReplayBuffer(8, {"alive": ((3,), torch.bool)}, 3)
    buf.add({"alive": alive}, acts, torch.ones(4), torch.zeros(4, dtype=torch.bool), {"alive": alive})
    s = buf.sample(6, torch.Generator().manual_seed(0))
    assert bool((s.actions[:, 1] == 0).all())
    m = lrn.update(b, acts.view(-1), torch.ones(4), torch.zeros(4, dtype=torch.bool), b)
    assert torch.isfinite(torch.tensor(m["loss"]))


def test_evaluation_with_agents_that_stop_acting():
    # the greedy choice of walkers that are home must be their no-op, or step() raises
    right = lambda g: torch.full((g.num_graphs * WALKERS,), RIGHT)  # noqa: E731
    with pytest.raises(ValueError, match="a walker at home acted"):
        LineTask(4, 0).evaluate(right, 4, 0)
    torch.manual_seed(0)
    lrn = ACEDQN(SCHEMA, ACEDQNConfig(), ModelConfig(hidden=16))
    result = LineTask(4, 0).evaluate(lambda g: lrn.act(g), 16, 0)
    assert 0.0 <= result.home_rate <= 1.0 and result.metrics().keys() == {"home_rate", "mean_steps"}


# Selectors ------------------------------------------------------------------------------
class Lowest(Selector):
    """Picks the candidate of lowest value: a selector the rollout does not know."""

    def select(self, cands, generator=None):
        vmin = torch.full((cands.num_agents,), float("inf")).scatter_reduce(
            0, cands.agent, cands.values, reduce="amin")
        rows = torch.full((cands.num_agents,), -1)
        is_min = cands.values == vmin[cands.agent]
        rows[cands.agent[is_min]] = cands.rows[is_min]
        return rows[cands.acting]


def test_a_new_selector_plugs_into_the_rollout():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    schema = smac_like_schema()
    b = collate([random_state(schema, 3, 2, g), random_state(schema, 2, 4, g)])
    net = ACENetwork(schema, hidden=16)
    ro = net.rollout(b, selector=Lowest())
    idx = ro.encoded.index
    for agent in range(idx.num_agents):
        rows = (idx.action_agent == agent).nonzero().view(-1)
        vals = ro.candidate_values[rows]
        ok = ~torch.isnan(vals)
        assert ro.action_ids[agent] == rows[ok][vals[ok].argmin()]
        assert ro.greedy_ids[agent] == rows[ok][vals[ok].argmax()] != ro.action_ids[agent]


def test_evaluation_result_success_and_metrics():
    r = LineEval(home_rate=0.5, mean_steps=3.0)
    assert not r.succeeded and r.metrics() == {"home_rate": 0.5, "mean_steps": 3.0}
    assert dataclasses.replace(r, home_rate=1.0).succeeded


# Encoders ------------------------------------------------------------------------------
def test_a_registered_encoder_is_chosen_by_name(tmp_path, line_env):
    from torch import nn

    from acegnn.nn import UNIT_CONVS, register_unit_conv

    @register_unit_conv("test_self_only")
    class SelfOnly(nn.Module):  # ignores the edges: an ablation
        def __init__(self, schema, hidden):
            super().__init__()

        def reset_parameters(self):
            pass

        def forward(self, h_dict, edge_index_dict, edge_emb_dict):
            return h_dict

    try:
        g = torch.Generator().manual_seed(0)
        schema = smac_like_schema()
        s = random_state(schema, 3, 2, g)
        moved = s.clone()
        for et in schema.edge_types:
            moved[et].edge_attr = torch.randn(moved[et].edge_attr.shape, generator=g)
        values = {}
        for conv in ("ace", "test_self_only"):
            torch.manual_seed(0)
            net = ACENetwork(schema, hidden=16, conv=conv)
            values[conv] = [net.rollout(collate([x])).chosen_value for x in (s, moved)]
        assert not torch.allclose(*values["ace"])  # the paper's step reads the edges
        assert torch.equal(*values["test_self_only"])  # this one does not
        assert run_line(tmp_path, "c", "model.conv=test_self_only",
                        "train.total_samples=256") == 0
    finally:
        UNIT_CONVS.pop("test_self_only")


def test_the_progress_bar_shows_the_tasks_headline_metrics(tmp_path, line_env, capsys):
    assert run_line(tmp_path, "bar", "train.progress=true", "train.stop_on_success=true") == 0
    err = capsys.readouterr().err
    assert "samples (to 768 or first success)" in err
    assert "home_rate=" in err and "mean_steps=" in err and "success_rate" not in err


def test_the_command_line_walks_down_and_nothing_calls_back_up():
    """cli -> run (wiring) -> config -> the components and loops: no module of the
    package imports a layer above its own (read from the source, imports inside
    functions included)."""
    import ast
    import pathlib

    import acegnn

    root = pathlib.Path(acegnn.__file__).parent
    above = {"acegnn.cli": {"acegnn.cli"}, "acegnn.run": {"acegnn.cli", "acegnn.run"},
             "acegnn.config": {"acegnn.cli", "acegnn.run", "acegnn.config"}}
    edges = set()
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("acegnn",) + path.relative_to(root).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            edges |= {(module, n) for n in names if n.startswith("acegnn")}
    # the walk sees the imports inside functions (cli imports run in its commands)
    assert ("acegnn.cli", "acegnn.run") in edges and ("acegnn.run", "acegnn.config") in edges
    # a component may import none of the three layers; each layer none above it
    upward = sorted(f"{m} imports {n}" for m, n in edges
                    if n in above.get(m, set(above)) and n != m)
    assert upward == []
