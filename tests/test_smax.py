"""SMAX battles (jaxmarl 0.2.0) as graphs: features, action ids, dead units, episode ends.

Everything here runs the real SMAX engine; each (scenario, number of battles) compiles
once per process (a few seconds), so the tests share a few task sizes.
"""
import numpy as np
import pytest
import torch

pytest.importorskip("jaxmarl")

from acegnn.envs.smac.smax import (SCENARIOS, SMAX_TYPES, SMAXConfig, SMAXTask,  # noqa: E402
                                   get_scenario, scenario_name, units_scenario)
from acegnn.envs.smac.units import (DISTANCE_SCALE, UNIT_TYPES, ActionTally, BattleEval,  # noqa: E402
                                    battle_schema, sort_key)
from acegnn.envs.base import first_episodes  # noqa: E402
from acegnn.graph import unit_index  # noqa: E402
from acegnn.nn import ACENetwork  # noqa: E402

N = 4  # battles per task in these tests


@pytest.fixture(scope="module")
def task():
    return SMAXTask("5m_vs_6m", N, seed=3)


def jax_state(task):
    s = task._state.state
    return {k: np.asarray(getattr(s, k)) for k in ("unit_positions", "unit_alive", "unit_health",
                                                   "unit_types", "unit_weapon_cooldowns")}


def test_node_and_edge_features_read_the_real_state(task):
    s = jax_state(task)
    g = task.graphs(task.observe())
    k = len(UNIT_TYPES)
    ally, enemy = g["ally"].x.view(N, 5, -1), g["enemy"].x.view(N, 6, -1)
    pos = torch.from_numpy(s["unit_positions"])  # [N, 11, 2]
    assert torch.allclose(ally[..., k:k + 2], pos[:, :5] / 32, atol=1e-6)
    assert torch.allclose(enemy[..., k:k + 2], pos[:, 5:] / 32, atol=1e-6)
    marine = UNIT_TYPES.index("marine")
    assert bool((ally[..., marine] == 1).all()) and float(ally[..., :k].sum()) == N * 5
    assert torch.allclose(ally[..., k + 2], torch.from_numpy(s["unit_health"][:, :5]) / 45.0)
    assert bool((ally[..., k + 3] == 0).all())  # no shields in SMAX

    # edge ally 0 -> enemy 2 of battle 1: distance on two axes, then range flags
    e = g["ally", "near", "enemy"]
    per = e.edge_index.size(1) // N
    src, dst = e.edge_index[:, per:2 * per] - torch.tensor([[5], [6]])
    row = per + int(((src == 0) & (dst == 2)).nonzero())
    delta = pos[1, 5 + 2] - pos[1, 0]
    expected = torch.cat([delta / DISTANCE_SCALE, delta.norm().view(1) / DISTANCE_SCALE,
                          (delta.norm() < 5.0).float().view(1), (delta.norm() < 9.0).float().view(1)])
    assert torch.allclose(e.edge_attr[row], expected, atol=1e-6)


def test_cooldowns_of_allies_only_as_on_starcraft():
    """An ally's weapon cooldown is its fraction of the type's; an enemy's reads 0 (the
    StarCraft II game does not report it), also while SMAX's enemies are cooling down."""
    task = SMAXTask("3m", 2, seed=1)
    gen = torch.Generator().manual_seed(0)
    k, seen = len(UNIT_TYPES), 0
    for _ in range(40):
        avail = task.observe()["avail"]
        task.step(torch.multinomial(avail.float().view(-1, avail.size(-1)), 1, generator=gen)
                  .view(avail.shape[:2]))
        cooldown = torch.from_numpy(jax_state(task)["unit_weapon_cooldowns"])
        x = task.graphs(task.observe())
        ally, enemy = x["ally"].x.view(2, 3, -1), x["enemy"].x.view(2, 3, -1)
        alive = torch.from_numpy(jax_state(task)["unit_alive"]).bool()
        expected = torch.where(alive[:, :3], (cooldown[:, :3] / 0.61).clamp(0, 1), 0.0)
        assert torch.allclose(ally[..., k + 4], expected, atol=1e-6)
        assert bool((enemy[..., k + 4] == 0).all())
        seen += int((cooldown[:, 3:] > 0).sum())
    assert seen > 0  # the enemies did fire


def test_action_ids_follow_smax(task):
    schema = battle_schema()
    obs = task.observe()
    g = task.graphs(obs)
    idx = unit_index(schema, g)
    kinds = [schema.action_kinds[int(k)].name for k in idx.action_kind[:11]]
    assert kinds == ["move_north", "move_east", "move_south", "move_west", "stop"] + ["attack"] * 6
    # attack slot 5 + j of ally i targets enemy j's node
    for a in range(5, 11):
        assert int(idx.action_target[a]) == int(idx.flat["enemy"][a - 5])
    # masks are SMAX's own available actions
    avail = task.engine.env.get_avail_actions(jax_tree_index(task._state, 0))
    ours = idx.action_available.view(N, 5, 11)[0]
    assert torch.equal(ours, torch.from_numpy(np.stack([np.asarray(avail[a]) for a in
                                                        task.engine.env.agents])).bool())


def jax_tree_index(tree, i):
    import jax
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def test_moves_go_where_their_kind_says():
    task = SMAXTask("3m", 2, seed=0)
    before = task.observe()["units"][:, :3, 1:3].clone()
    for slot, (dx, dy) in enumerate([(0, 1), (1, 0), (0, -1), (-1, 0)]):  # N, E, S, W
        task.step(torch.full((2, 3), slot))
        after = task.observe()["units"][:, :3, 1:3].clone()
        d = after - before
        assert bool((d[..., 0] * dx >= 0).all() and (d[..., 1] * dy >= 0).all())
        assert float(d.abs().max()) > 0.1
        moved = d[..., 0].abs() if dx else d[..., 1].abs()
        still = d[..., 1].abs() if dx else d[..., 0].abs()
        assert bool((moved > still).all())
        before = after
    assert SMAX_TYPES[0] == "marine"


def test_dead_units_are_masked_and_only_stop():
    task = SMAXTask("3m", 2, seed=1)
    # allies walk into the enemy and stop: the heuristic enemy kills some of them
    for _ in range(40):
        obs = task.observe()
        alive = obs["units"][:, :3, 6] > 0
        if bool((~alive).any()):
            break
        task.step(torch.full((2, 3), 1))  # east, towards the enemy
    else:
        pytest.fail("no ally died in 40 steps")
    g = task.graphs(obs)
    idx = unit_index(battle_schema(), g)
    dead = ~alive.reshape(-1)
    assert torch.equal(idx.unit_alive[idx.flat["ally"]], ~dead)
    assert bool((g["ally"].x[dead] == 0).all())
    avail = obs["avail"].reshape(-1, obs["avail"].size(-1))
    assert bool((avail[dead].sum(-1) == 1).all()) and bool(avail[dead][:, task.noop_action].all())
    net = ACENetwork(battle_schema(), hidden=16)
    ro = net.rollout(g)
    assert bool((ro.actions[dead] == task.noop_action).all())


def test_time_limit_truncates_and_next_obs_is_the_last_state():
    task = SMAXTask("3m", 2, seed=2, time_limit=3)
    for t in range(3):
        tr = task.step(torch.full((2, 3), 4))
    assert bool(tr.truncated.all()) and not bool(tr.terminated.any())
    assert not bool(tr.info["won"].any())
    # the battles were reset: the new start differs from the true last state
    assert not torch.allclose(task.observe()["units"], tr.next_obs["units"])


def test_a_win_is_every_enemy_dead():
    import jax.numpy as jnp
    task = SMAXTask("3m", 2, seed=4)
    s = task._state.state
    health = s.unit_health.at[0, 3:].set(0.0)  # battle 0: every enemy dies now
    task._state = task._state.replace(state=s.replace(unit_health=health,
                                                      unit_alive=health > 0))
    tr = task.step(torch.full((2, 3), 4))
    assert tr.terminated.tolist() == [True, False] and tr.info["won"].tolist() == [True, False]
    assert not bool(tr.truncated.any())
    assert float(tr.info["enemies_alive"][0]) == 0.0 and float(tr.info["allies_alive"][0]) == 1.0
    assert bool(jnp.all(task._state.state.unit_alive[0]))  # reset after the win


def test_one_network_plays_every_map_size():
    net = ACENetwork(battle_schema(), hidden=16)
    for name, n in [("4m_vs_5m", 4), ("10m_vs_11m", 10), ("3s5z_vs_3s6z", 8)]:
        task = SMAXTask(name, 2, seed=0)
        ro = net.rollout(task.graphs(task.observe()))
        assert ro.actions.shape == (2 * n,)
        task.step(ro.actions.view(2, n))


def test_same_seed_same_battles_and_resume():
    a, b = SMAXTask("3m", 2, seed=7), SMAXTask("3m", 2, seed=7)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        acts = torch.randint(0, 5, (2, 3), generator=gen)
        ta, tb = a.step(acts), b.step(acts)
        assert torch.equal(ta.next_obs["units"], tb.next_obs["units"])
    saved = a.state_dict()
    acts = torch.randint(0, 5, (2, 3), generator=gen)
    first = a.step(acts)
    c = SMAXTask("3m", 2, seed=99)
    c.load_state_dict(saved)
    again = c.step(acts)
    assert torch.equal(first.next_obs["units"], again.next_obs["units"])
    assert torch.equal(first.reward, again.reward)
    with pytest.raises(ValueError, match="does not fit"):
        SMAXTask("5m_vs_6m", 2, seed=0).load_state_dict(saved)


def test_evaluate_is_deterministic_and_reports_outcomes():
    task = SMAXTask("3m", 2, seed=0)
    net = ACENetwork(battle_schema(), hidden=16)
    act = lambda g: net.rollout(g).actions  # noqa: E731
    r1, r2 = task.evaluate(act, episodes=4, seed=5), task.evaluate(act, episodes=4, seed=5)
    assert r1 == r2
    assert 0.0 <= r1.win_rate <= 1.0 and 1 <= r1.mean_steps <= 60
    assert set(r1.metrics()) == {"win_rate", "mean_return", "mean_steps", "allies_alive",
                                 "enemies_alive", "draw_rate", "timeout_rate", "move_share",
                                 "stop_share", "attack_share"}
    assert r1.win_rate + r1.draw_rate + r1.timeout_rate <= 1.0
    assert r1.move_share + r1.stop_share + r1.attack_share == pytest.approx(1.0)


def test_test_battles_count_the_live_agents_actions_by_group():
    """Move, stop and attack shares of the live agents' actions in their first battles,
    against a count by hand from what the policy saw: it attacks its first enemy in range
    every other step, stops every third and moves otherwise; dead agents (whose one
    action is stop) and the steps after a battle's end are left out."""
    seen = []

    def act(g):
        n = g["ally"].alive.numel()
        avail = g["action"].available.view(n, -1)  # [agents, slots]: SMAX's slot order
        t = len(seen)
        a = torch.full((n,), t % 4 if t % 3 else 4, dtype=torch.long)  # a move, or stop
        attack = avail[:, 5:].any(1) & (t % 2 == 0)
        a = torch.where(attack, 5 + avail[:, 5:].float().argmax(1), a)
        a = torch.where(g["ally"].alive, a, 4)  # a dead agent can only stop
        seen.append((g["ally"].alive.view(-1, 3).clone(), a.view(-1, 3).clone()))
        return a

    task = SMAXTask("3m", 2, seed=0)
    r = task.evaluate(act, episodes=3, seed=1)
    counts = torch.zeros(3)
    # the battle lengths: replay the same evaluation's steps (same seed, same policy)
    played = list(seen)
    seen.clear()
    ep = first_episodes(task.test_task(3, 1), act, task.time_limit)
    assert len(seen) == len(played)
    for t, (alive, a) in enumerate(played, start=1):
        for e in range(3):
            if t <= int(ep.length[e]):
                for i in range(3):
                    if bool(alive[e, i]):
                        counts[0 if int(a[e, i]) < 4 else 1 if int(a[e, i]) == 4 else 2] += 1
    want = (counts / counts.sum()).tolist()
    assert [r.move_share, r.stop_share, r.attack_share] == pytest.approx(want)
    assert min(want) > 0
    assert r.allies_alive < 1.0 and r.mean_steps < len(played)  # dead agents, ended battles


def test_an_action_tally_forgets_a_battle_a_restart_voided():
    task = SMAXTask("3m", 2, seed=0)
    g = task.graphs(task.observe())  # every agent alive
    tally = ActionTally(task.spec, 2)
    yes, no = torch.tensor([True, True]), torch.tensor([False, False])
    tally(g, torch.full((2, 3), 4), yes, no)  # stops
    assert tally.counts.tolist() == [[0, 3, 0], [0, 3, 0]]
    # battle 0's step was dropped by a restart: what it had counted goes, this step too
    tally(g, torch.zeros(2, 3, dtype=torch.long), torch.tensor([False, True]),
          torch.tensor([True, False]))  # moves north
    assert tally.counts.tolist() == [[0, 0, 0], [3, 3, 0]]


def test_battle_outcomes_are_told_apart():
    # four battles: won, lost, both sides dead in the same step, cut at the time limit
    info = {"won": torch.tensor([True, False, False, False]),
            "allies_alive": torch.tensor([2 / 3, 0.0, 0.0, 1 / 3]),
            "enemies_alive": torch.tensor([0.0, 1 / 3, 0.0, 1 / 3])}
    r = BattleEval.of(torch.tensor([20.0, 5.0, 11.0, 7.0]), torch.tensor([30, 25, 40, 60]),
                      torch.tensor([True, True, True, False]), info)
    assert (r.win_rate, r.draw_rate, r.timeout_rate) == (0.25, 0.25, 0.25)
    assert (r.mean_return, r.mean_steps) == (10.75, 38.75)
    assert r.allies_alive == pytest.approx(0.25) and r.enemies_alive == pytest.approx(1 / 6)


def test_sorted_order_is_by_type_then_position():
    task = SMAXTask("3s5z_vs_3s6z", 2, seed=0)
    obs = task.observe()
    g = task.graphs(obs)
    net = ACENetwork(battle_schema(), hidden=8)
    ro = net.rollout(g, order="sorted")
    key = sort_key(obs["units"][:, :8]).reshape(-1)
    for b in range(2):
        rows = torch.arange(8) + 8 * b
        by_rank = rows[torch.argsort(ro.rank[rows])]
        assert bool((key[by_rank][1:] >= key[by_rank][:-1]).all())
    stalker = UNIT_TYPES.index("stalker")
    assert int(obs["units"][0, int(by_rank[0]) - 8, 0]) in (stalker, UNIT_TYPES.index("zealot"))


def test_maps_by_their_units():
    m = ("marine",)
    parsed = get_scenario("6m_vs_8m")
    assert (parsed.allies, parsed.enemies, parsed.time_limit) == (m * 6, m * 8, 100)
    assert get_scenario("4m").allies == get_scenario("4m").enemies == m * 4
    mixed = get_scenario("1M2h_vs_24zg")  # zg (zergling) is read before z (zealot)
    assert mixed.allies == ("marauder", "hydralisk", "hydralisk")
    assert mixed.enemies == ("zergling",) * 24
    assert get_scenario("2s_vs_3z").enemies == ("zealot",) * 3
    assert get_scenario("2s3z") is SCENARIOS["2s3z"] and get_scenario("2s3z").time_limit == 120
    for name in ("6m_vs_8m", "4m", "2s3z", "3s_vs_5z", "1M2h_vs_24zg", "27m_vs_30m"):
        sc = get_scenario(name)
        assert scenario_name(sc.allies, sc.enemies) == name
    # listed units: a SMAC map's limit when they are one, SMAX's 100 steps otherwise
    assert units_scenario(m * 3, m * 3).time_limit == 60
    assert units_scenario(["stalker"], ["zealot", "zealot"]).time_limit == 100
    errors = {"2c_vs_64zg": r"colossus \(c\) is not a SMAX unit type",
              "corridor": "not a map listed in SCENARIOS",
              "3x": "unit code 'x' is not a SMAX unit type",
              "3m_vs_4m_vs_5m": "more than two sides", "0m_vs_1m": "a group of 0",
              "6m_vs_": "not a map listed"}
    for name, message in errors.items():
        with pytest.raises(ValueError, match=message):
            get_scenario(name)
        with pytest.raises(ValueError, match=message):
            SMAXConfig(scenario=name)


def test_a_battle_of_listed_units_plays_those_units():
    cfg = SMAXConfig(scenario=None, allies=["marauder", "hydralisk"], enemies=["zergling"] * 3,
                     num_envs=2)
    task = cfg.make(0)
    assert task.scenario == "1M1h_vs_3zg" and task.time_limit == 100 and task.n_agents == 2
    types = [UNIT_TYPES[int(t)] for t in task.observe()["units"][0, :, 0]]
    assert types == ["marauder", "hydralisk", "zergling", "zergling", "zergling"]
    named = SMAXConfig(scenario="1M1h_vs_3zg", num_envs=2).make(0)
    assert torch.equal(named.observe()["units"], task.observe()["units"])  # the same battle
    for bad, message in (({"allies": ["marine"], "enemies": ["marine"]}, "not both"),
                         ({"scenario": None, "allies": ["marine"]}, "together"),
                         ({"scenario": None}, "env.scenario is null"),
                         ({"scenario": None, "allies": ["medivac"], "enemies": ["marine"]},
                          r"\['medivac'\] are not SMAX unit types"),
                         ({"scenario": None, "allies": [], "enemies": ["marine"]}, "is empty")):
        with pytest.raises(ValueError, match=message):
            SMAXConfig(**bad)


def test_bad_config():
    with pytest.raises(ValueError, match="not a map listed"):
        SMAXConfig(scenario="MMM2")
    with pytest.raises(ValueError, match="env.reward_scale"):
        SMAXConfig(reward_scale=0)
    with pytest.raises(ValueError, match="actions must be"):
        SMAXTask("3m", 2).step(torch.zeros(2, 4, dtype=torch.long))
    assert "corridor" in SCENARIOS["6z_vs_24zg"].note


def test_an_unavailable_or_out_of_range_action_is_refused_not_clamped():
    task = SMAXTask("3m", 2, seed=0)
    avail = task.observe()["avail"]
    b, i, a = (int(v) for v in (~avail).nonzero()[0])  # e.g. attacking an enemy out of range
    before = task.observe()["units"].clone()
    actions = torch.zeros(2, 3, dtype=torch.long)
    actions[b, i] = a
    with pytest.raises(ValueError, match=f"action {a} of agent {i} in game {b} is not available"):
        task.step(actions)
    slots = avail.size(2)
    actions[b, i] = slots  # one past the last slot: JAX's indexing would clamp it to the last
    with pytest.raises(ValueError, match=f"action {slots} of agent {i} in game {b} is not"):
        task.step(actions)
    assert torch.equal(task.observe()["units"], before)  # nothing was stepped


def test_train_resume_and_transfer_through_the_cli(tmp_path, capsys):
    """The paper's SMAC config, shrunk: train, resume further, then evaluate the same
    checkpoint on a larger map (zero-shot) and refuse settings an evaluation cannot change."""
    import json
    import subprocess
    import sys

    small = ["train.episodes_per_collect=2", "train.updates_per_collect=1", "train.batch_size=16",
             "train.learning_starts=16", "train.eval_every=100", "train.eval_episodes=2",
             "model.hidden=16", "env.num_envs=2", "env.scenario=3m", "train.progress=false"]
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    import os
    env = dict(os.environ, **env)

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "acegnn.cli", *args], capture_output=True,
                             text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    run = tmp_path / "r"
    first = cli("train", "configs/smax_5m_vs_6m.yaml", *small, "train.total_samples=60",
                f"run.dir={tmp_path}", "run.name=r")
    assert first["samples"] >= 60
    again = cli("train", "--resume", str(run), "train.total_samples=120")
    assert again["samples"] >= 120 > first["samples"]
    rows = (run / "train.csv").read_text().splitlines()
    assert rows[0].count("episode_won") == 1  # the battles' outcome is logged while training
    ev = cli("eval", str(run), "env.scenario=8m_vs_9m", "--episodes", "2")
    assert set(ev) >= {"win_rate", "mean_return", "allies_alive"}
    from acegnn.cli import main  # a refusal needs no process of its own

    capsys.readouterr()
    assert main(["eval", str(run), "model.hidden=8"]) == 2
    assert "only env.* settings" in capsys.readouterr().err


def test_a_task_loads_only_smax_and_keeps_its_compiled_battles(tmp_path):
    """A new process imports SMAX's modules of jaxmarl only (a later ``import jaxmarl``
    still gets the whole package) and leaves the compiled battles in the cache under
    ``XDG_CACHE_HOME``."""
    import os
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from acegnn.envs.smac.smax import SMAXTask\n"
            "task = SMAXTask('3m', 1, seed=0)\n"
            "task.step(torch.zeros(1, 3, dtype=torch.long))\n"
            "print('loaded', sorted(m for m in sys.modules if m.startswith('jaxmarl')))\n"
            "import jaxmarl\n"
            "print('agents', jaxmarl.make('HeuristicEnemySMAX').num_agents)\n")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "XDG_CACHE_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("loaded ", "agents "))]
    assert lines == ["loaded []", "agents 5"], out.stdout  # make: the whole package
    cached = os.listdir(tmp_path / "acegnn" / "jax")
    assert any(n.startswith("jit__step") for n in cached), cached


def test_the_compilation_cache_gives_way_to_the_users():
    """``ACEGNN_JAX_CACHE=0`` or a cache directory JAX already has leave JAX's config
    alone; otherwise the cache is ours, with a size limit (so that JAX locks it)."""
    import types

    from acegnn.envs.smac import smax

    class Config:
        def __init__(self, cache_dir):
            self.jax_compilation_cache_dir, self.updates = cache_dir, {}

        def update(self, key, value):
            self.updates[key] = value

    for env, cache_dir, want in [({}, None, {"jax_compilation_cache_dir": smax.CACHE_DIR,
                                              "jax_compilation_cache_max_size": 2 ** 31}),
                                 ({"ACEGNN_JAX_CACHE": "0"}, None, {}),
                                 ({}, "/elsewhere", {})]:
        jax = types.SimpleNamespace(config=Config(cache_dir))
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("ACEGNN_JAX_CACHE", raising=False)
            for k, v in env.items():
                mp.setenv(k, v)
            smax._compilation_cache(jax)
        assert jax.config.updates == want, env


def test_every_config_file_loads():
    import glob

    from acegnn.config import load_config
    from acegnn.envs import MissingBackend

    for path in sorted(glob.glob("configs/*.yaml")):
        try:
            cfg = load_config(path)
        except MissingBackend as e:  # StarCraft II (oxwhirl/smac) cannot be installed here
            assert "sc2" in path or "grf" in path, path
            assert "install" in str(e)
            continue
        assert cfg.env is not None, path
