"""The Google Research Football scenarios the task plays, and who controls whom in them.

A scenario is gfootball's own file (``gfootball/scenarios/<level>.py``) or a layout
written here as data (:class:`Layout`). The engine processes register a layout as a
gfootball scenario module before they create their games. The task controls the left
players listed in :attr:`GRFScenario.agents`. Every other left player (always the keeper)
plays by gfootball's built-in AI, and the right team is gfootball's opponent AI.

* ``academy_3_vs_1_with_keeper``: gfootball's file. Left players 1-3 against a centre
  back and the keeper.
* ``academy_counterattack_hard``: the official ACE code's reduced copy of gfootball's
  file (:data:`ACE_COUNTERATTACK_HARD`). Our keeper and left players 1-4 against the
  keeper and two centre backs.
* ``academy_counterattack_hard_11v11``: gfootball's own 11 vs 11 file. Left players 7-10
  are the agents; the other left players are not units of the graph.

Coordinates are gfootball's: ``x`` in ``[-1, 1]`` (our goal at ``-1``), ``y`` in
``[-0.42, 0.42]``, growing downwards (action ``bottom`` raises ``y``). A scenario file
places the right team mirrored: a right player added at ``(x, y)`` stands at
``(-x, -y)`` (:meth:`Layout.positions`).

See docs/grf.md ("The scenarios") for where each scenario comes from.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

#: gfootball's player roles (``e_PlayerRole_<name>``) a :class:`Layout` may name.
ROLES = ("GK", "CB", "LB", "RB", "DM", "CM", "LM", "RM", "AM", "CF")

Player = Tuple[float, float, str]  # (x, y, role)


@dataclass(frozen=True)
class Layout:
    """A scenario written as data, built into gfootball's scenario builder.

    Args:
        ball (tuple): The ball's start ``(x, y)``.
        left (tuple): The left team: ``(x, y, role)`` per player, the keeper first.
        right (tuple): The right team, in its own (mirrored) frame, as gfootball's
            scenario files write it.
        game_duration (int, optional): Frames before gfootball ends the game.
            (default: :obj:`400`, the academy scenarios')
        deterministic (bool, optional): gfootball's ``deterministic`` (the engine's
            randomness off). (default: :obj:`False`)
        end_on_possession_change (bool, optional): End when the other team gets the
            ball. (default: :obj:`True`, the academy scenarios')
    """

    ball: Tuple[float, float]
    left: Tuple[Player, ...]
    right: Tuple[Player, ...]
    game_duration: int = 400
    deterministic: bool = False
    end_on_possession_change: bool = True

    def __post_init__(self) -> None:
        for side in ("left", "right"):
            team = getattr(self, side)
            if not team:
                raise ValueError(f"a layout needs players on the {side} team (got none)")
            for x, y, role in team:
                if role not in ROLES:
                    raise ValueError(f"unknown player role {role!r} on the {side} team "
                                     f"(known: {list(ROLES)})")
                if not (-1.0 <= x <= 1.0 and -0.42 <= y <= 0.42):
                    raise ValueError(f"a {side} player must stand inside the pitch, x in "
                                     f"[-1, 1] and y in [-0.42, 0.42] (got ({x}, {y}))")
        if self.game_duration < 1:
            raise ValueError(f"game_duration must be >= 1 (got {self.game_duration})")

    def build(self, builder: Any) -> None:
        """gfootball's ``build_scenario(builder)`` of this layout."""
        from gfootball.scenarios import Team  # the engine's enums, in the engine process
        import gfootball.scenarios as roles

        cfg = builder.config()
        cfg.game_duration = self.game_duration
        cfg.deterministic = self.deterministic
        cfg.offsides = False
        cfg.end_episode_on_score = True
        cfg.end_episode_on_out_of_play = True
        cfg.end_episode_on_possession_change = self.end_on_possession_change
        builder.SetBallPosition(*self.ball)
        for team, players in ((Team.e_Left, self.left), (Team.e_Right, self.right)):
            builder.SetTeam(team)
            for x, y, role in players:
                builder.AddPlayer(x, y, getattr(roles, f"e_PlayerRole_{role}"))

    def positions(self) -> Dict[str, Tuple[Tuple[float, float], ...]]:
        """Start positions in the pitch's coordinates: ``left``, ``right`` (unmirrored)
        and ``ball``."""
        return {"left": tuple((x, y) for x, y, _ in self.left),
                "right": tuple((-x, -y) for x, y, _ in self.right),
                "ball": (tuple(self.ball),)}


@dataclass(frozen=True)
class GRFScenario:
    """A scenario and the players the learner controls.

    Args:
        name (str): The name configs use (``env.scenario``).
        n_left (int): Left players (the keeper included); every one has a controller.
        n_right (int): Right players (the keeper included).
        agents (tuple of int): The left players the learner controls, by index.
        level (str, optional): gfootball's scenario file; :obj:`None` with a layout.
        layout (Layout, optional): The scenario as data, when it is not gfootball's.
        note (str, optional): Where the scenario comes from.
    """

    name: str
    n_left: int
    n_right: int
    agents: Tuple[int, ...]
    level: Optional[str] = None
    layout: Optional[Layout] = None
    note: str = ""

    def __post_init__(self) -> None:
        if (self.level is None) == (self.layout is None):
            raise ValueError(f"scenario {self.name!r} needs a gfootball level or a layout, "
                             f"exactly one (got level={self.level!r}, layout={self.layout})")
        if self.layout is not None and (len(self.layout.left), len(self.layout.right)) != (
                self.n_left, self.n_right):
            raise ValueError(f"scenario {self.name!r}: its layout has {len(self.layout.left)} "
                             f"left and {len(self.layout.right)} right players, not "
                             f"{self.n_left} and {self.n_right}")
        agents = tuple(self.agents)
        if not agents or len(set(agents)) != len(agents) or \
                any(not 0 <= a < self.n_left for a in agents):
            raise ValueError(f"scenario {self.name!r}: agents must be distinct left players in "
                             f"0..{self.n_left - 1} (got {agents})")

    @property
    def n_agents(self) -> int:
        return len(self.agents)

    @property
    def n_units(self) -> int:
        """Units of the graph: the agents, every right player and the ball."""
        return self.n_agents + self.n_right + 1

    @property
    def gfootball_level(self) -> str:
        """The module name gfootball loads (``gfootball.scenarios.<level>``)."""
        return self.level if self.level is not None else f"acegnn_{self.name}"

    def register(self) -> str:
        """Make a layout loadable by gfootball in this process (a module
        ``gfootball.scenarios.acegnn_<name>`` in :data:`sys.modules`, which gfootball's
        ``importlib.import_module`` finds first); returns the level name to create."""
        level = self.gfootball_level
        if self.layout is not None:
            import gfootball.scenarios  # noqa: F401 (the parent package must be loaded)

            module = types.ModuleType(f"gfootball.scenarios.{level}",
                                      f"acegnn scenario {self.name} (a Layout)")
            module.build_scenario = self.layout.build  # type: ignore[attr-defined]
            sys.modules[module.__name__] = module
        return level


#: The official ACE code's copy of academy_counterattack_hard (docs/grf.md, "The scenarios").
ACE_COUNTERATTACK_HARD = Layout(
    ball=(0.26, -0.11),
    left=((-1.0, 0.0, "GK"), (0.5, -0.3161, "CM"), (0.25, -0.1, "LM"), (0.25, 0.1, "RM"),
          (0.35, 0.316102, "CF")),
    right=((-1.0, 0.0, "GK"), (-0.4, -0.06356, "CB"), (-0.4, 0.063559, "CB")),
)

#: Every scenario by name.
SCENARIOS: Dict[str, GRFScenario] = {
    "academy_3_vs_1_with_keeper": GRFScenario(
        "academy_3_vs_1_with_keeper", n_left=4, n_right=2, agents=(1, 2, 3),
        level="academy_3_vs_1_with_keeper", note="gfootball's file"),
    "academy_counterattack_hard": GRFScenario(
        "academy_counterattack_hard", n_left=5, n_right=3, agents=(1, 2, 3, 4),
        layout=ACE_COUNTERATTACK_HARD,
        note="the official ACE code's and CDS's reduced copy: keeper and 4 attackers "
             "against keeper and 2 centre backs"),
    "academy_counterattack_hard_11v11": GRFScenario(
        "academy_counterattack_hard_11v11", n_left=11, n_right=11, agents=(7, 8, 9, 10),
        level="academy_counterattack_hard",
        note="gfootball's file, 11 vs 11 (not the paper's or CDS's); the four attackers "
             "are the agents"),
}


def get_scenario(scenario: "str | GRFScenario") -> GRFScenario:
    """A scenario by name (or itself)."""
    if isinstance(scenario, GRFScenario):
        return scenario
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown GRF scenario {scenario!r} (known: {sorted(SCENARIOS)})")
    return SCENARIOS[scenario]
