"""Checks of the StarCraft II back-end against real ``s2clientprotocol`` messages.

Run by ``tests/test_sc2.py`` in a subprocess with
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` (not collected on its own: the name
does not start with ``test_``). The game is replaced by :class:`FakeStarCraft2Env`, a
stand-in for the running game that holds ``raw_pb2.Unit`` records and plays scripted
battles; nothing here imports ``smac``.
"""
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pytest
import torch

if os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION") != "python":
    raise RuntimeError("run these checks through tests/test_sc2.py, which sets "
                       "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python")

from s2clientprotocol import common_pb2, raw_pb2  # noqa: E402

from acegnn.envs.smac.sc2 import SC2Config, SC2Task, ally_unit_types, sc2_units  # noqa: E402
from acegnn.envs.smac.units import UNIT_TYPES, battle_schema  # noqa: E402
from acegnn.graph import unit_index  # noqa: E402

T = {name: float(i) for i, name in enumerate(UNIT_TYPES)}  # type column of each name
MARINE = 1970  # a map-specific ally id (SMAC's maps give agents their own unit types)


def unit(tag, unit_type, owner, x, y, health, health_max, shield=0.0, shield_max=0.0,
         energy=0.0, cooldown=0.0):
    return raw_pb2.Unit(tag=tag, unit_type=unit_type, owner=owner,
                        pos=common_pb2.Point(x=x, y=y), health=health, health_max=health_max,
                        shield=shield, shield_max=shield_max, energy=energy,
                        weapon_cooldown=cooldown)


# Conversion of unit records -----------------------------------------------------------
def test_marines_read_as_smac_normalises():
    agents = {0: unit(1, MARINE, 1, 10.5, 12.25, 30, 45, cooldown=6),
              1: unit(2, MARINE, 1, 11.0, 12.0, 0, 45, cooldown=3)}  # dead: SMAC sets health 0
    enemies = {0: unit(3, 48, 2, 20.0, 14.5, 45, 45, cooldown=0),
               1: unit(4, 48, 2, 21.0, 13.0, 9, 45, cooldown=15)}
    got = sc2_units(agents, enemies, ally_unit_types("marines", MARINE))
    m = T["marine"]
    expected = torch.tensor([[m, 10.5, 12.25, 30 / 45, 0.0, 6 / 15, 1.0],
                             [m, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                             [m, 20.0, 14.5, 1.0, 0.0, 0.0, 1.0],
                             [m, 21.0, 13.0, 0.2, 0.0, 0.0, 1.0]])  # an enemy's cooldown: 0
    assert got.dtype == torch.float32 and got.shape == (4, 7)
    assert torch.allclose(got, expected, atol=1e-6)


def test_shields_and_medivac_energy():
    # stalkers_and_zealots: ally ids stalker = min, zealot = min + 1
    agents = {0: unit(1, 1900, 1, 5.0, 6.0, 40, 80, shield=20, shield_max=80, cooldown=7),
              1: unit(2, 1901, 1, 6.0, 6.0, 100, 100, shield=0, shield_max=50, cooldown=0)}
    enemies = {0: unit(3, 73, 2, 9.0, 9.0, 100, 100, shield=50, shield_max=50, cooldown=11),
               1: unit(4, 74, 2, 9.5, 9.0, 80, 80, shield=40, shield_max=80, cooldown=35)}
    got = sc2_units(agents, enemies, ally_unit_types("stalkers_and_zealots", 1900))
    s, z = T["stalker"], T["zealot"]
    expected = torch.tensor([[s, 5.0, 6.0, 0.5, 0.25, 0.2, 1.0],
                             [z, 6.0, 6.0, 1.0, 0.0, 0.0, 1.0],
                             [z, 9.0, 9.0, 1.0, 1.0, 0.0, 1.0],
                             [s, 9.5, 9.0, 1.0, 0.5, 0.0, 1.0]])
    assert torch.allclose(got, expected, atol=1e-6)
    # MMM: marauder, marine, medivac; a medivac's column is its energy over 200
    agents = {0: unit(1, 1970, 1, 1.0, 2.0, 125, 125, cooldown=5),
              1: unit(2, 1971, 1, 1.0, 3.0, 45, 45, cooldown=3),
              2: unit(3, 1972, 1, 2.0, 2.0, 75, 150, energy=50, cooldown=9)}
    enemies = {0: unit(4, 54, 2, 8.0, 8.0, 150, 150, energy=100),
               1: unit(5, 51, 2, 8.0, 9.0, 0, 125, cooldown=25)}
    got = sc2_units(agents, enemies, ally_unit_types("MMM", 1970))
    expected = torch.tensor([[T["marauder"], 1.0, 2.0, 1.0, 0.0, 0.2, 1.0],
                             [T["marine"], 1.0, 3.0, 1.0, 0.0, 0.2, 1.0],
                             [T["medivac"], 2.0, 2.0, 0.5, 0.0, 0.25, 1.0],
                             [T["medivac"], 8.0, 8.0, 1.0, 0.0, 0.5, 1.0],
                             [T["marauder"], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(got, expected, atol=1e-6)


def test_bad_records_raise():
    ally = {0: unit(1, MARINE, 1, 1.0, 1.0, 45, 45)}
    types = ally_unit_types("marines", MARINE)
    with pytest.raises(ValueError, match=r"enemy 0 has unit type 98, which is not one"):
        sc2_units(ally, {0: unit(2, 98, 2, 2.0, 2.0, 300, 300)}, types)  # a spine crawler
    with pytest.raises(ValueError, match=r"ally 0 has unit type 48"):  # the enemy's id
        sc2_units({0: unit(1, 48, 1, 1.0, 1.0, 45, 45)}, {}, types)
    with pytest.raises(ValueError, match=r"enemy units must be keyed 0..0.*got keys \[1\]"):
        sc2_units(ally, {1: unit(2, 48, 2, 2.0, 2.0, 45, 45)}, types)
    with pytest.raises(ValueError, match="ally 0 is alive with health_max 0"):
        sc2_units({0: unit(1, MARINE, 1, 1.0, 1.0, 45, 0)}, {}, types)


# A stand-in for the running game ------------------------------------------------------
@dataclass
class Battle:
    """A scripted battle: every unit's health after each step (row 0: the start; 0 =
    dead), each step's reward and how the last step ends: ``"won"``, ``"lost"``,
    ``"limit"`` (SMAC's time limit) or ``"restart"`` (SMAC's ``(0, True, {})`` after it
    relaunched the game)."""

    allies: List[List[float]]
    enemies: List[List[float]]
    rewards: List[float]
    end: str


class FakeStarCraft2Env:
    """Stand-in for the running game: the part of ``smac.env.StarCraft2Env`` that
    SC2Task uses, over ``raw_pb2.Unit`` records. Battles are played from ``battles`` in
    turn, one per ``reset()``; availability follows SMAC's rules (dead: no-op only; alive:
    stop, the four moves, attack every live enemy or, for a medivac, heal every live
    non-medivac ally), without ranges or terrain."""

    def __init__(self, map_name: str, seed: int, continuing_episode: bool = False, *,
                 allies: List, enemies: List, battles: List[Battle], map_type: str = "marines",
                 map_size=(32, 24), episode_limit: int = 3, medivac: Optional[int] = None,
                 sloppy_dead: bool = False, **kwargs) -> None:
        self.map_name, self.seed, self.continuing_episode = map_name, seed, continuing_episode
        self.kwargs = kwargs
        self.templates = (allies, enemies)
        self.battles, self.map_type, self.episode_limit = battles, map_type, episode_limit
        self.map_x, self.map_y = map_size
        self.n_agents, self.n_enemies = len(allies), len(enemies)
        self.medivac, self.sloppy_dead = medivac, sloppy_dead
        self.resets, self.closed, self.received = 0, False, []
        self.agents: Dict = {}
        self.enemies: Dict = {}

    def get_total_actions(self) -> int:
        return 6 + self.n_enemies

    def _show(self, t: int) -> None:
        battle = self.battle
        for units, templates, health in ((self.agents, self.templates[0], battle.allies),
                                         (self.enemies, self.templates[1], battle.enemies)):
            for i, template in enumerate(templates):
                u = raw_pb2.Unit()
                u.CopyFrom(template)
                u.health = health[t][i]
                units[i] = u

    def reset(self):
        self.resets += 1
        self.battle = self.battles[(self.resets - 1) % len(self.battles)]
        self.t = 0
        self._show(0)
        return None, None

    def get_avail_actions(self) -> List[List[int]]:
        out = []
        for i, u in self.agents.items():
            row = [0] * self.get_total_actions()
            if u.health > 0 or self.sloppy_dead:
                row[1:6] = [1] * 5
                if u.unit_type == self.medivac:
                    targets = {j: a for j, a in self.agents.items() if a.unit_type != self.medivac}
                else:
                    targets = self.enemies
                for j, t in targets.items():
                    row[6 + j] = int(t.health > 0)
            if u.health <= 0:
                row[0] = 1
            out.append(row)
        return out

    def step(self, actions):
        avail = self.get_avail_actions()
        for i, a in enumerate(actions):
            assert avail[i][a] == 1, f"Agent {i} cannot perform action {a}"
        self.received.append(list(actions))
        self.t += 1
        self._show(self.t)
        last = self.t == len(self.battle.rewards)
        if last and self.battle.end == "restart":
            return 0, True, {}
        info = {"battle_won": last and self.battle.end == "won"}
        if last and self.battle.end == "limit" and self.continuing_episode:
            info["episode_limit"] = True
        return self.battle.rewards[self.t - 1], last, info

    def close(self) -> None:
        self.closed = True


def marines(n_allies=2, n_enemies=2):
    return ([unit(1 + i, MARINE, 1, 10.0 + i, 12.0, 45, 45) for i in range(n_allies)],
            [unit(100 + j, 48, 2, 20.0 + j, 12.0, 45, 45) for j in range(n_enemies)])


#: 2 marines vs 2: won in two steps, lost in one, cut at the limit after three.
WIN = Battle([[45, 45], [45, 20], [30, 20]], [[45, 45], [0, 45], [0, 0]], [5.0, 15.0], "won")
LOSS = Battle([[45, 45], [0, 0]], [[45, 45], [45, 40]], [0.5], "lost")
LIMIT = Battle([[45, 45], [45, 45], [0, 45], [0, 45]], [[45, 45]] * 4, [0.0, 1.0, 0.0], "limit")


@dataclass
class Games:
    """A ``make_env`` that builds stand-ins and remembers them."""

    battles: List[Battle]
    extra: Dict = field(default_factory=dict)
    made: List[FakeStarCraft2Env] = field(default_factory=list)

    def __call__(self, **kwargs) -> FakeStarCraft2Env:
        allies, enemies = self.extra.get("units") or marines()
        rest = {k: v for k, v in self.extra.items() if k != "units"}
        env = FakeStarCraft2Env(allies=allies, enemies=enemies, battles=self.battles,
                                **rest, **kwargs)
        self.made.append(env)
        return env


def stop_all(task):
    return torch.ones(task.num_envs, task.n_agents, dtype=torch.long)  # action 1: stop


def first_available(graphs):
    """A policy: every agent's first available slot (stop if alive, no-op if dead)."""
    avail = graphs["action"].available.view(-1, graphs["action"].available.numel() //
                                            graphs["ally"].x.size(0))
    return avail.float().argmax(1)


# The task -----------------------------------------------------------------------------
def test_games_are_built_as_smac_needs_them():
    games = Games([WIN])
    cfg = SC2Config(map_name="3m", num_envs=3, difficulty="5", step_mul=4)
    task = SC2Task(cfg.map_name, cfg.num_envs, 7, cfg.env_kwargs(), make_env=games)
    assert len(games.made) == 3 and all(g.resets == 1 for g in games.made)
    assert all(g.map_name == "3m" and g.continuing_episode for g in games.made)
    assert all(g.kwargs == {"difficulty": "5", "step_mul": 4, "game_version": None}
               for g in games.made)
    seeds = [g.seed for g in games.made]
    assert len(set(seeds)) == 3
    again = Games([WIN])
    SC2Task("3m", 3, 7, make_env=again)
    assert [g.seed for g in again.made] == seeds  # same seed, same game seeds
    assert task.spec.map_size == (32.0, 24.0) and task.spec.slots == 8 and task.n_agents == 2
    assert task.obs_spec == {"units": ((4, 7), torch.float32), "avail": ((2, 8), torch.bool)}
    assert task.noop_action == 0 and task.state_dict() is None
    assert task.time_limit == 3 and repr(task) == "SC2Task(map_name=3m, num_envs=3)"


def test_a_won_battle_terminates_and_resets():
    games = Games([WIN, LOSS])
    task = SC2Task("2m", 2, 0, make_env=games)
    start = task.observe()
    assert start["units"].shape == (2, 4, 7) and bool(start["units"][..., 6].all())
    tr = task.step(stop_all(task))
    assert tr.reward.tolist() == [5.0, 5.0]
    assert not tr.terminated.any() and not tr.truncated.any() and not tr.dropped.any()
    assert tr.next_obs["units"][0, :, 3].tolist() == pytest.approx([1.0, 20 / 45, 0.0, 1.0])
    assert tr.info["enemies_alive"].tolist() == [0.5, 0.5]
    assert games.made[0].received == [[1, 1]]
    tr = task.step(stop_all(task))
    assert tr.reward.tolist() == [15.0, 15.0]
    assert tr.terminated.tolist() == [True, True] and tr.truncated.tolist() == [False, False]
    assert tr.info["won"].tolist() == [True, True]
    assert tr.info["allies_alive"].tolist() == [1.0, 1.0]
    assert tr.info["enemies_alive"].tolist() == [0.0, 0.0]
    # next_obs is the battle's last state; observe() the next battle's start
    assert tr.next_obs["units"][:, 2:, 6].eq(0).all()
    assert all(g.resets == 2 for g in games.made)
    assert task.observe()["units"][..., 6].eq(1).all()
    tr = task.step(stop_all(task))  # LOSS: one step, ended by the game, not won
    assert tr.terminated.all() and not tr.truncated.any() and not tr.info["won"].any()
    assert tr.info["allies_alive"].tolist() == [0.0, 0.0] and tr.reward.tolist() == [0.5, 0.5]


def test_the_time_limit_truncates():
    task = SC2Task("2m", 1, 0, make_env=Games([LIMIT]))
    ends = []
    for _ in range(3):
        actions = first_available(task.graphs(task.observe())).view(1, 2)
        tr = task.step(actions)
        ends.append((bool(tr.terminated), bool(tr.truncated)))
    assert ends == [(False, False), (False, False), (False, True)]
    assert not tr.info["won"].any() and tr.info["enemies_alive"].tolist() == [1.0]


def test_dead_agents_keep_only_the_noop():
    for sloppy in (False, True):  # a game that offered a dead unit more is overruled
        task = SC2Task("2m", 1, 0, make_env=Games([LIMIT], {"sloppy_dead": sloppy}))
        task.step(stop_all(task))
        tr = task.step(stop_all(task))  # ally 0 dies
        avail = tr.next_obs["avail"][0]
        assert avail[0].tolist() == [True] + [False] * 7
        assert avail[1].tolist() == [False] + [True] * 7
        g = task.graphs(task.observe())
        assert g["ally"].alive.tolist() == [False, True]
        idx = unit_index(battle_schema(), g)  # every agent has an available action
        assert idx.action_available.view(2, 8)[0].nonzero().view(-1).tolist() == [0]
        with pytest.raises(ValueError, match=r"action 1 of agent 0 in game 0 is not available "
                                             r"\(available: \[0\]\)"):
            task.step(stop_all(task))
        assert len(task.envs[0].received) == 2  # the game never saw the bad action
        tr = task.step(torch.tensor([[0, 1]]))
        assert bool(tr.truncated)


def test_actions_are_checked_before_the_game_sees_them():
    task = SC2Task("2m", 2, 0, make_env=Games([WIN]))
    with pytest.raises(ValueError, match=r"actions must be \[2, 2\] \(got \(2, 3\)\)"):
        task.step(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="action 0 of agent 0 in game 0 is not available"):
        task.step(torch.zeros(2, 2, dtype=torch.long))  # no-op while alive
    with pytest.raises(ValueError, match="action 8 of agent 1 in game 1 is not available"):
        task.step(torch.tensor([[1, 1], [1, 8]]))
    assert all(g.received == [] for g in task.envs)


def test_attacks_and_heals_target_their_nodes():
    # MMM: a marauder, a marine and a medivac (map ids 1970..1972) against three enemies
    allies = [unit(1, 1970, 1, 1.0, 1.0, 125, 125), unit(2, 1971, 1, 2.0, 1.0, 20, 45),
              unit(3, 1972, 1, 3.0, 1.0, 150, 150, energy=60)]
    enemies = [unit(10, 48, 2, 9.0, 9.0, 45, 45), unit(11, 51, 2, 9.0, 8.0, 125, 125),
               unit(12, 54, 2, 9.0, 7.0, 150, 150)]
    hp = [[125, 20, 150]] * 3
    battle = Battle(hp, [[45, 125, 150], [0, 125, 150], [0, 125, 150]], [1.0, 1.0], "won")
    games = Games([battle], {"units": (allies, enemies), "map_type": "MMM", "medivac": 1972})
    task = SC2Task("MMM", 2, 0, make_env=games)
    assert task.spec.healers == (False, False, True) and task.spec.slots == 9
    # the marauder attacks enemy 0, the marine enemy 1, the medivac heals ally 1
    task.step(torch.tensor([[6, 7, 7], [1, 1, 1]]))
    assert games.made[0].received == [[6, 7, 7]]
    g = task.graphs(task.observe())
    schema = battle_schema()
    idx = unit_index(schema, g)
    store = g["action"]
    kind = [schema.action_kinds[int(k)].name for k in store.kind.view(2, 3, 9)[0, :, 6]]
    assert kind == ["attack", "attack", "heal"]
    ally, enemy = schema.node_type_index("ally"), schema.node_type_index("enemy")
    assert store.target_type.view(2, 3, 9)[0, :, 6].tolist() == [enemy, enemy, ally]
    assert store.target.view(2, 3, 9)[0, 2, 6:].tolist() == [0, 1, 2]
    target = idx.action_target.view(2, 3, 9)
    for b in range(2):
        allies_b, enemies_b = idx.flat["ally"][3 * b:3 * b + 3], idx.flat["enemy"][3 * b:3 * b + 3]
        assert target[b, 0, 6:].tolist() == enemies_b.tolist()  # attack j -> enemy j's node
        assert target[b, 1, 6:].tolist() == enemies_b.tolist()
        assert target[b, 2, 6:].tolist() == allies_b.tolist()  # heal j -> ally j's node
    avail = idx.action_available.view(2, 3, 9)[0]
    assert avail[0, 6:].tolist() == [False, True, True]  # enemy 0 died
    assert avail[2, 6:].tolist() == [True, True, False]  # a medivac heals no medivac
    k = len(UNIT_TYPES)
    assert g["ally"].x.view(2, 3, -1)[0, 2, k + 4].item() == pytest.approx(0.3)  # energy 60/200


def test_a_restarted_game_is_dropped():
    restart = Battle([[45, 45], [45, 45]], [[45, 45], [45, 45]], [0.0], "restart")
    games = Games([restart, WIN])
    task = SC2Task("2m", 1, 0, make_env=games)
    tr = task.step(stop_all(task))
    assert tr.dropped.tolist() == [True]
    assert not tr.terminated.any() and not tr.truncated.any() and tr.reward.tolist() == [0.0]
    assert games.made[0].resets == 2  # the next battle started
    tr = task.step(stop_all(task))
    assert tr.dropped.tolist() == [False] and tr.reward.tolist() == [5.0]


def test_evaluate_counts_the_live_agents_actions():
    """Agent 0 moves north, agent 1 attacks the first live enemy; dead agents (no-op) and
    the second game's battle of round 2 (3 battles on 2 games) are not counted."""
    def move_or_attack(graphs):
        avail = graphs["action"].available.view(-1, 8)  # 2 agents a game, 8 slots
        attack = 6 + avail[:, 6:].float().argmax(1)
        acts = torch.where(avail[:, 6:].any(1), attack, torch.ones_like(attack))
        acts[0::2] = 2  # agent 0: north (slot 2)
        return torch.where(avail[:, 0], torch.zeros_like(acts), acts)  # dead: no-op

    games = Games([WIN, LOSS, LIMIT])
    task = SC2Task("2m", 1, 0, make_env=games, eval_envs=2)
    result = task.evaluate(move_or_attack, episodes=3, seed=5)
    # round 1, two won battles: 2 steps x (a move, an attack); round 2, the limit battle:
    # 2 steps x (a move, an attack), then agent 0 is dead and agent 1 attacks
    assert result.mean_steps == pytest.approx(7 / 3)
    assert (result.move_share, result.stop_share, result.attack_share) == \
        pytest.approx((6 / 13, 0.0, 7 / 13))


def test_evaluate_plays_rounds_on_games_of_its_own():
    games = Games([WIN, LOSS, LIMIT])
    task = SC2Task("2m", 1, 0, make_env=games, eval_envs=2)
    result = task.evaluate(first_available, episodes=3, seed=5)
    assert len(games.made) == 3  # one training game, two test games
    # round 1: both games win in 2 steps; round 2: restarted, the first game's battle
    # (the third of the script) is cut at the limit after 3 steps
    assert result.win_rate == pytest.approx(2 / 3)
    assert result.mean_steps == pytest.approx(7 / 3)
    assert result.mean_return == pytest.approx((20 + 20 + 1) / 3)
    assert result.enemies_alive == pytest.approx(1 / 3)
    assert result.allies_alive == pytest.approx((1 + 1 + 0.5) / 3)
    assert result.timeout_rate == pytest.approx(1 / 3) and result.draw_rate == 0.0
    # the live agents' first available action is SMAC's stop (slot 1; no-op is the dead's)
    assert (result.move_share, result.stop_share, result.attack_share) == (0.0, 1.0, 0.0)
    assert games.made[0].resets == 1  # the training game was not touched
    # the same seed again: the same games, restarted first (they are mid-battle)
    again = task.evaluate(first_available, episodes=3, seed=5)
    assert len(games.made) == 3
    assert again.win_rate == pytest.approx(1 / 3) and again.mean_steps == pytest.approx(4 / 3)
    # another seed: new games, the old ones closed
    task.evaluate(first_available, episodes=1, seed=6)
    assert len(games.made) == 4 and games.made[1].closed and games.made[2].closed
    task.close()
    assert all(g.closed for g in games.made)
    with pytest.raises(ValueError, match=r"episodes must be >= 1 \(got 0\)"):
        task.evaluate(first_available, episodes=0)


def test_scene_and_positions_are_in_map_units():
    task = SC2Task("2m", 1, 0, make_env=Games([WIN]))
    scene = task.scene()
    assert scene.xlim == (0.0, 32.0) and scene.ylim == (0.0, 24.0)
    pos = task.unit_positions(task.graphs(task.observe()))
    expected = torch.tensor([[10.0, 12.0], [11.0, 12.0], [20.0, 12.0], [21.0, 12.0]])
    assert torch.allclose(pos, expected)


def test_a_game_that_fails_to_start_closes_the_others():
    games = Games([WIN])
    made = []

    def flaky(**kwargs):
        if len(made) == 2:
            raise RuntimeError("SC2 did not start")
        made.append(games(**kwargs))
        return made[-1]

    with pytest.raises(RuntimeError, match="SC2 did not start"):
        SC2Task("2m", 3, 0, make_env=flaky)
    assert len(made) == 2 and all(g.closed for g in made)


# The installed oxwhirl/smac (docs/sc2.md's recipe), constructed without the game -------
def installed_smac():
    try:
        from smac.env import StarCraft2Env
    except ImportError:
        pytest.skip("oxwhirl/smac is not installed (docs/sc2.md)")
    return StarCraft2Env


def test_the_installed_smac_has_the_maps_and_limits_of_our_tables():
    StarCraft2Env = installed_smac()
    from acegnn.envs.smac.sc2 import SMAC_MAPS
    from acegnn.envs.smac.smax import SCENARIOS
    from acegnn.envs.smac.units import SMAC_ACTIONS

    for name, map_type in SMAC_MAPS.items():
        env = StarCraft2Env(map_name=name)
        assert env.map_type == map_type, name
        assert env.get_total_actions() == SMAC_ACTIONS.first_target + env.n_enemies, name
    smac_maps = [n for n, sc in SCENARIOS.items() if not sc.note]  # SMAX's table of SMAC maps
    assert len(smac_maps) == 15
    for name in smac_maps:
        env, sc = StarCraft2Env(map_name=name), SCENARIOS[name]
        assert (env.n_agents, env.n_enemies, env.episode_limit) == \
            (len(sc.allies), len(sc.enemies), sc.time_limit), name


def test_the_installed_smac_numbers_ally_types_as_we_do():
    StarCraft2Env = installed_smac()
    from acegnn.envs.smac.sc2 import ALLY_TYPE_ORDER, SMAC_MAPS

    for map_type in ALLY_TYPE_ORDER:
        env = StarCraft2Env(map_name=next(n for n, t in SMAC_MAPS.items() if t == map_type))
        env._init_ally_unit_types(MARINE)
        for type_id, name in ally_unit_types(map_type, MARINE).items():
            assert getattr(env, f"{name}_id") == type_id, (map_type, name)


def test_our_unit_features_are_smacs_state():
    """Protocol units (serialised and parsed back) in the installed smac's env: its
    ``get_state_dict`` and our ``sc2_units`` agree on every feature both have."""
    StarCraft2Env = installed_smac()

    def parsed(u):
        return raw_pb2.Unit.FromString(u.SerializeToString())

    for name, agents, enemies in (
            ("3s5z_vs_3s6z",
             [unit(1, 1970, 1, 10.0, 12.0, 60, 80, 20, 80, cooldown=14),
              unit(2, 1971, 1, 11.0, 13.0, 100, 100, 50, 50, cooldown=11),
              unit(3, 1971, 1, 12.0, 11.0, 0, 100, 0, 50)],
             [unit(4, 74, 2, 20.0, 14.0, 80, 80, 40, 80, cooldown=9),
              unit(5, 73, 2, 21.0, 15.0, 30, 100, 0, 50)]),
            ("MMM2",
             [unit(1, 1970, 1, 3.0, 4.0, 125, 125, cooldown=5),
              unit(2, 1971, 1, 3.5, 4.0, 20, 45, cooldown=15),
              unit(3, 1972, 1, 4.0, 5.0, 150, 150, energy=120)],
             [unit(4, 54, 2, 20.0, 20.0, 150, 150, energy=60),
              unit(5, 48, 2, 21.0, 20.0, 45, 45, cooldown=7)])):
        env = StarCraft2Env(map_name=name)
        env.map_x, env.map_y, env.max_distance_x, env.max_distance_y = 32, 32, 24.0, 20.0
        env._init_ally_unit_types(1970)
        env.agents = {i: parsed(u) for i, u in enumerate(agents)}
        env.enemies = {i: parsed(u) for i, u in enumerate(enemies)}
        state = env.get_state_dict()
        ours = sc2_units(env.agents, env.enemies, ally_unit_types(env.map_type, 1970))
        ally, enemy = ours[:len(agents)].double(), ours[len(agents):].double()
        theirs = torch.from_numpy(state["allies"])[:len(agents)]  # the map's other units: absent
        alive = ally[:, 6] > 0
        assert torch.allclose(ally[:, 3], theirs[:, 0])  # health
        assert torch.allclose(ally[:, 5], theirs[:, 1], atol=1e-6)  # cooldown (medivac: energy)
        assert torch.allclose(torch.where(alive, (ally[:, 1] - 16) / 24, 0.0), theirs[:, 2])
        assert torch.allclose(torch.where(alive, (ally[:, 2] - 16) / 20, 0.0), theirs[:, 3])
        ally_shield = theirs[:, 4]
        theirs = torch.from_numpy(state["enemies"])[:len(enemies)]
        assert torch.allclose(enemy[:, 3], theirs[:, 0])
        assert torch.allclose((enemy[:, 1] - 16) / 24, theirs[:, 1])
        assert torch.allclose((enemy[:, 2] - 16) / 20, theirs[:, 2])
        if env.shield_bits_ally:  # protoss
            assert torch.allclose(ally[:, 4], ally_shield)
            assert torch.allclose(enemy[:, 4], theirs[:, 3])
        # an enemy's weapon cooldown is not in SMAC's state (the game does not report it)
        medivac = enemy[:, 0] == T["medivac"]
        assert bool((enemy[~medivac, 5] == 0).all())
