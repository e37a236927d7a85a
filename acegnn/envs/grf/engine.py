"""Google Research Football games in engine processes, and the supervisor that restarts them.

A :class:`Game` is one gfootball environment with raw observations and the ``v2`` action
set. Our agents take the actions the task sends; every other left player (the keeper)
takes ``builtin_ai``. After each gfootball step a game applies these rules, in order:

1. gfootball ended the episode: ``goal_reward`` and ``won`` if we scored. Any other end
   pays ``end_reward`` with ``reward="cds"`` and 0 with ``reward="paper"``. Terminated.
2. The ball or one of our agents is in our half (``x < 0``): ``end_reward``, terminated,
   ``half_court``.
3. The ``time_limit``-th step: as an end without a goal in rule 1. Terminated with
   ``time_limit_terminal``, else truncated.
4. Otherwise 0.

A finished game is reset at once: its step returns the episode's last state, and the
game then holds the new episode's first.
Available actions: :func:`available_actions`. Each game draws every episode's engine
seed, and the order in which the engine processes the two teams, from its own
generator, so a seed plays the same episodes in any process.

An :class:`EnginePool` splits the games over ``num_workers`` processes started by a
*forkserver* (or Ray actors, ``backend="ray"``) and steps them in parallel. A worker that
dies, raises, or does not answer within ``step_timeout`` seconds is killed and started
again with fresh games. Its environments are marked ``dropped`` for that step, and a
warning is logged.

See docs/grf.md ("The rules", "Engine processes") for the sources of the rules and the
choice of processes.
"""
from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import random
import signal
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from acegnn.envs.grf.scenarios import GRFScenario, get_scenario
from acegnn.utils.ray_local import connect_ray, start_local_ray

log = logging.getLogger(__name__)

#: gfootball's 19 standard actions (``action_set_v1``), in id order: the action slots.
ACTIONS = ("idle", "left", "top_left", "top", "top_right", "right", "bottom_right", "bottom",
           "bottom_left", "long_pass", "high_pass", "short_pass", "shot", "sprint",
           "release_direction", "release_sprint", "sliding", "dribble", "release_dribble")
N_ACTIONS = len(ACTIONS)
A = {name: i for i, name in enumerate(ACTIONS)}
#: ``builtin_ai`` of the ``v2`` action set: the left players the learner does not control.
BUILTIN_AI = 19
#: The flags of a raw observation's ``sticky_actions`` (the sticky actions of ``v2``).
STICKY = ("left", "top_left", "top", "top_right", "right", "bottom_right", "bottom",
          "bottom_left", "sprint", "dribble")
MOVES = ACTIONS[1:9]
#: The rules of :class:`Game`: who pays ``end_reward`` (module docstring).
REWARDS = ("paper", "cds")
#: Which actions :func:`available_actions` offers: ours or the official ACE code's.
ACTION_MASKS = ("ours", "official")
#: Columns of an observation's ``units`` array: position, movement per step and
#: possession. A player's possession is 1 if it owns the ball; the ball's is
#: gfootball's ``ball_owned_team`` (-1 nobody, 0 our team, 1 the right team).
UNIT_COLUMNS = ("x", "y", "z", "dx", "dy", "dz", "possession")


class GameStep(NamedTuple):
    """One step of a game (numpy values)."""

    units: np.ndarray  # [U, 7] the step's last state (before a reset)
    avail: np.ndarray  # [n_agents, 19]
    sticky: np.ndarray  # [n_agents, 10] the agents' sticky_actions flags (STICKY)
    reward: float
    terminated: bool
    truncated: bool
    won: bool
    half_court: bool


def read_units(obs: Dict[str, Any], scenario: GRFScenario) -> np.ndarray:
    """``[n_units, 7]`` float32 (:data:`UNIT_COLUMNS`) of a raw observation: the agents
    (in the order of ``scenario.agents``), every right player, then the ball."""
    left, right = np.asarray(obs["left_team"]), np.asarray(obs["right_team"])
    if (len(left), len(right)) != (scenario.n_left, scenario.n_right):
        raise ValueError(f"the game has {len(left)} left and {len(right)} right players; "
                         f"scenario {scenario.name} has {scenario.n_left} and {scenario.n_right}")
    agents = list(scenario.agents)
    n = len(agents)
    units = np.zeros((scenario.n_units, len(UNIT_COLUMNS)), dtype=np.float32)
    units[:n, 0:2] = left[agents]
    units[:n, 3:5] = np.asarray(obs["left_team_direction"])[agents]
    units[n:-1, 0:2] = right
    units[n:-1, 3:5] = obs["right_team_direction"]
    units[-1, 0:3] = obs["ball"]
    units[-1, 3:6] = obs["ball_direction"]
    team, player = int(obs["ball_owned_team"]), int(obs["ball_owned_player"])
    if team == 0 and player in agents:
        units[agents.index(player), 6] = 1.0
    elif team == 1 and 0 <= player < scenario.n_right:
        units[n + player, 6] = 1.0
    units[-1, 6] = float(team)
    return units


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """Raise a ``ValueError`` naming ``name`` if ``value`` is not one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)} (got {value!r})")


def check_rules(reward: str, action_mask: str) -> None:
    """Raise a ``ValueError`` naming a reward rule or action mask that does not exist."""
    check_choice("reward", reward, REWARDS)
    check_choice("action_mask", action_mask, ACTION_MASKS)


def available_actions(owns: np.ndarray, team: int, sticky: np.ndarray,
                      mask: str = "ours") -> np.ndarray:
    """``[n_agents, 19]`` bool: the actions each agent may take, by gfootball's ids.

    With ``mask="ours"``:

    * ``idle`` and the eight moves: always.
    * ``long_pass``, ``high_pass``, ``short_pass``, ``shot``: the ball owner only.
    * ``sprint`` when the agent is not sprinting, ``release_sprint`` when it is (its
      ``sprint`` flag); ``dribble`` and ``release_dribble`` likewise.
    * ``release_direction`` when one of the eight move flags is set.
    * ``sliding`` when our team does not own the ball.

    ``mask="official"`` is the official ACE code's (``gfootball_academy_env_ace.py``):
    the same, except that ``dribble`` is offered to the ball owner only (when it is not
    dribbling), ``release_direction`` always and ``sliding`` never.

    Args:
        owns (ndarray): ``[n_agents]`` bool, the agent owns the ball.
        team (int): ``ball_owned_team`` (-1, 0 ours, 1 theirs).
        sticky (ndarray): ``[n_agents, 10]`` the agents' ``sticky_actions`` (:data:`STICKY`).
        mask (str, optional): ``"ours"`` or ``"official"`` (above). (default: :obj:`"ours"`)
    """
    check_choice("mask", mask, ACTION_MASKS)
    owns = np.asarray(owns, dtype=bool)
    sticky = np.asarray(sticky).astype(bool)
    if sticky.shape != (owns.size, len(STICKY)):
        raise ValueError(f"sticky_actions must be [{owns.size}, {len(STICKY)}] "
                         f"(got {sticky.shape})")
    sprinting, dribbling = sticky[:, STICKY.index("sprint")], sticky[:, STICKY.index("dribble")]
    moving = sticky[:, :8].any(1)
    avail = np.ones((owns.size, N_ACTIONS), dtype=bool)
    for name in ("long_pass", "high_pass", "short_pass", "shot"):
        avail[:, A[name]] = owns
    avail[:, A["sprint"]], avail[:, A["release_sprint"]] = ~sprinting, sprinting
    avail[:, A["dribble"]], avail[:, A["release_dribble"]] = ~dribbling, dribbling
    avail[:, A["release_direction"]] = moving
    avail[:, A["sliding"]] = team != 0
    if mask == "official":
        avail[:, A["dribble"]] &= owns
        avail[:, A["release_direction"]] = True
        avail[:, A["sliding"]] = False
    return avail


def lean_observations(env: Any) -> None:
    """Make gfootball's ``FootballEnv`` ``env`` hand out its observations without the work
    a game of ours throws away, in place: the same values, about 0.7 ms less CPU a step
    (docs/grf.md, "Throughput").

    gfootball's own path deep-copies the engine's observation twice a step (in
    ``_get_actions`` and ``observation``; the trace's copy in the core's step stays), and
    in each of those two conversions every exposed field once per controlled player, and
    ``_convert_observations`` rotates the whole observation for the right team
    (``flip_observation``) even when no agent plays there. Here every player's
    observation refers to the engine's arrays, which gfootball builds anew each step and
    nothing of ours writes to. Only for an environment whose one player is our agent on
    the left; any other is left as it is. gfootball's ``get_state``/``set_state`` wrapper
    checks the class's name and refuses the lean class (acegnn does not use it).
    """
    from gfootball.env.football_env import FootballEnv

    agent = getattr(env, "_agent", None)
    if (type(env) is FootballEnv and agent is not None and env._players == [agent]
            and agent.num_controlled_right_players() == 0):
        env.__class__ = _lean_class()


@functools.lru_cache(maxsize=None)
def _lean_class() -> type:
    """gfootball's ``FootballEnv`` with :func:`lean_observations`' observation path."""
    from gfootball.env import constants
    from gfootball.env.football_env import FootballEnv

    class LeanFootballEnv(FootballEnv):
        def _convert_observations(self, original, player, left_position, right_position):
            controlled = original["left_agent_controlled_player"]
            sticky = original["left_agent_sticky_actions"]
            out = []
            for x in range(player.num_controlled_left_players()):
                o = {v: original[v] for v in constants.EXPOSED_OBSERVATIONS}
                o["designated"] = original["left_team_designated_player"]
                if left_position + x < len(controlled):
                    o["active"] = controlled[left_position + x]
                    o["sticky_actions"] = np.array(sticky[left_position + x])
                else:
                    o["active"], o["sticky_actions"] = -1, []
                if "frame" in original:
                    o["frame"] = original["frame"]
                out.append(o)
            return out

        def observation(self):
            if not self._cached_observation:
                self._cached_observation = self._convert_observations(
                    self._env._observation, self._agent, self._agent_left_position,
                    self._agent_right_position)
            return self._cached_observation

        def _get_actions(self):  # the agent's actions are all there is to gather
            return self._action_to_list(self._agent.take_action(None))

    return LeanFootballEnv


class Game:
    """One gfootball game of a scenario, with the task's rules (module docstring).

    Args:
        scenario (GRFScenario or str): The scenario.
        seed (int): Seeds the generator of the episodes' engine seeds.
        time_limit (int, optional): Steps before an episode is cut. (default: :obj:`150`)
        goal_reward (float, optional): Reward of a goal. (default: :obj:`100.0`)
        end_reward (float, optional): Reward of a loss: the half-court rule, and with
            ``reward="cds"`` every end but a goal. (default: :obj:`-1.0`)
        reward (str, optional): ``"paper"`` or ``"cds"`` (module docstring).
            (default: :obj:`"paper"`)
        time_limit_terminal (bool, optional): The time limit ends the episode
            (terminated) instead of truncating it. (default: :obj:`True`)
        action_mask (str, optional): The actions offered, ``"ours"`` or ``"official"``
            (:func:`available_actions`). (default: :obj:`"ours"`)
    """

    def __init__(self, scenario: "GRFScenario | str", seed: int, time_limit: int = 150,
                 goal_reward: float = 100.0, end_reward: float = -1.0, reward: str = "paper",
                 time_limit_terminal: bool = True, action_mask: str = "ours") -> None:
        import gfootball.env as football_env

        check_rules(reward, action_mask)
        self.action_mask = action_mask
        self.scenario = get_scenario(scenario)
        self.time_limit, self.goal_reward, self.end_reward = time_limit, goal_reward, end_reward
        self.reward, self.time_limit_terminal = reward, bool(time_limit_terminal)
        self.rng = np.random.default_rng(seed)
        # gfootball draws the order in which the engine processes the two teams once per
        # game, from Python's global random state when the game is made; drawn here from
        # the game's generator instead, so that a seed makes the same game anywhere
        reverse = bool(self.rng.integers(2))
        self.env = football_env.create_environment(
            env_name=self.scenario.register(), representation="raw", rewards="scoring",
            number_of_left_players_agent_controls=self.scenario.n_left,
            other_config_options={"action_set": "v2", "reverse_team_processing": reverse},
            render=False, write_video=False, write_goal_dumps=False,
            write_full_episode_dumps=False)
        lean_observations(self.env.unwrapped)
        self.t = 0
        self.reset()

    def reseed(self, seed: int) -> None:
        """A new episode generator, and a new episode from it."""
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        random.seed(int(self.rng.integers(2 ** 31 - 1)))  # gfootball's next engine seed
        self._read(self.env.reset())
        self.t = 0

    def _read(self, raw: List[Dict[str, Any]]) -> None:
        sc = self.scenario
        obs = raw[0]
        active = [int(o["active"]) for o in raw]
        try:
            self.controller = [active.index(p) for p in sc.agents]
        except ValueError:
            raise RuntimeError(f"gfootball assigned the controllers to the left players "
                               f"{active}; the agents {sc.agents} need one each") from None
        self.units = read_units(obs, sc)
        self.sticky = np.stack([np.asarray(raw[c]["sticky_actions"], dtype=np.float32)
                                for c in self.controller])
        self.avail = available_actions(self.units[:sc.n_agents, 6] > 0,
                                       int(obs["ball_owned_team"]), self.sticky,
                                       self.action_mask)

    def step(self, actions: Sequence[int]) -> GameStep:
        """Step with one action id per agent; a finished episode is reset (the state
        after it is :attr:`units` / :attr:`avail`)."""
        sc = self.scenario
        if len(actions) != sc.n_agents:
            raise ValueError(f"a {sc.name} game needs one action per agent ({sc.n_agents}) "
                             f"(got {list(actions)})")
        full = [BUILTIN_AI] * sc.n_left
        for c, a in zip(self.controller, actions):
            full[c] = int(a)
        raw, _, done, info = self.env.step(full)
        self.t += 1
        self._read(raw)
        units, avail, sticky = self.units, self.avail, self.sticky
        other_end = self.end_reward if self.reward == "cds" else 0.0
        reward, terminated, truncated, won, half = 0.0, False, False, False, False
        if done:
            won = float(info.get("score_reward", 0)) > 0
            reward, terminated = (self.goal_reward if won else other_end), True
        elif units[-1, 0] < 0 or bool((units[:sc.n_agents, 0] < 0).any()):
            reward, terminated, half = self.end_reward, True, True
        elif self.t >= self.time_limit:
            reward = other_end
            terminated, truncated = self.time_limit_terminal, not self.time_limit_terminal
        if terminated or truncated:
            self.reset()
        return GameStep(units, avail, sticky, reward, terminated, truncated, won, half)

    def close(self) -> None:
        self.env.close()


# Engine workers ------------------------------------------------------------------------
class _Games:
    """The games of one engine worker (a process or a Ray actor) and the pool's commands
    to them; each answer is a message ``(command, payload)``, as the pool reads it."""

    def __init__(self, scenario: GRFScenario, seeds: List[int], options: dict) -> None:
        self.games: List[Game] = []
        for s in seeds:
            self.games.append(Game(scenario, s, **options))

    def current(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The games' current states, and the CPU seconds this worker has used."""
        g = self.games
        return (np.stack([x.units for x in g]), np.stack([x.avail for x in g]),
                np.stack([x.sticky for x in g]), time.process_time())

    def handle(self, cmd: str, arg: Any) -> tuple:
        if cmd == "ready":
            return "ready", self.current()
        if cmd == "step":
            steps = [g.step(a) for g, a in zip(self.games, arg)]
            return "step", (tuple(np.stack(v) for v in zip(*steps)), self.current())
        if cmd == "reseed":
            for g, s in zip(self.games, arg):
                g.reseed(s)
            return "reseed", self.current()
        raise ValueError(f"unknown command {cmd!r}")

    def close(self) -> None:
        for g in self.games:
            g.close()
        self.games = []


def _serve(conn: Connection, scenario: GRFScenario, seeds: List[int], options: dict) -> None:
    """An engine process: its games, stepped on request (messages ``(command, arg)``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor ends us, not Ctrl-C
    games: Optional[_Games] = None
    try:
        games = _Games(scenario, seeds, options)
        conn.send(games.handle("ready", None))
        while True:
            cmd, arg = conn.recv()
            if cmd == "close":
                break
            conn.send(games.handle(cmd, arg))
    except (EOFError, BrokenPipeError):
        pass  # the supervisor has gone
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if games is not None:
            games.close()


class _ProcessWorker:
    """An engine process started by the forkserver, and the pool's end of its pipe."""

    def __init__(self, w: int, scenario: GRFScenario, seeds: List[int], options: dict) -> None:
        ctx = _context()
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(theirs, scenario, seeds, options),
                                   name=f"grf-engine-{w}", daemon=True)
        self.process.start()
        theirs.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, cmd: str, arg: Any) -> bool:
        """Send a command; false if the pipe is broken."""
        try:
            self.conn.send((cmd, arg))
            return True
        except (OSError, ValueError):
            return False

    def answer(self, deadline: float) -> Optional[tuple]:
        """The answer to the last command, or None if none came by ``deadline``
        (``time.monotonic``) or the pipe broke."""
        try:
            if self.conn.poll(max(0.0, deadline - time.monotonic())):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        return None

    def gone(self) -> Optional[str]:
        """How the worker ended, or None while it runs."""
        self.process.join(0.5)
        code = self.process.exitcode
        return None if code is None else f"exited with code {code}"

    def close(self) -> None:
        """Ask the worker to end (:meth:`kill` makes sure)."""
        self.send("close", None)

    def join(self, timeout: float) -> None:
        self.process.join(max(0.0, timeout))

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()  # SIGKILL also ends a stopped process
        self.process.join(5.0)
        self.conn.close()


class _RayGames:
    """The engine actor's body: :class:`_Games` whose failures are answers, as an engine
    process sends them."""

    def __init__(self, scenario: GRFScenario, seeds: List[int], options: dict) -> None:
        self.games: Optional[_Games] = None
        self.error: Optional[str] = None
        try:
            self.games = _Games(scenario, seeds, options)
        except BaseException:
            self.error = traceback.format_exc()

    def call(self, cmd: str, arg: Any) -> tuple:
        if self.error is not None:
            return "error", self.error
        try:
            if cmd == "close":
                self.games.close()
                return "close", None
            return self.games.handle(cmd, arg)
        except BaseException:
            return "error", traceback.format_exc()

    def pid(self) -> int:
        return os.getpid()


_RAY_ACTOR: Optional[Any] = None


def _ray_actor() -> Any:
    """:class:`_RayGames` as a Ray actor class (made at the first use)."""
    global _RAY_ACTOR
    if _RAY_ACTOR is None:
        import ray

        _RAY_ACTOR = ray.remote(_RayGames)
    return _RAY_ACTOR


class _RayWorker:
    """An engine worker as a Ray actor (``backend="ray"``): the same games and answers as
    an engine process, on whichever node of the cluster Ray places it."""

    def __init__(self, w: int, scenario: GRFScenario, seeds: List[int], options: dict,
                 cpus: float = 1.0) -> None:
        import ray

        self.ray = ray
        self.actor = _ray_actor().options(num_cpus=cpus, max_restarts=0).remote(
            scenario, seeds, options)
        self.died: Optional[str] = None
        self.ref: Any = None
        self._pid: Optional[int] = None
        self.send("ready", None)  # the process sends it unasked

    @property
    def pid(self) -> int:
        """The actor's process id (on its node)."""
        if self._pid is None:
            self._pid = int(self.ray.get(self.actor.pid.remote(), timeout=60))
        return self._pid

    def send(self, cmd: str, arg: Any) -> bool:
        if self.died is not None:
            return False
        try:
            self.ref = self.actor.call.remote(cmd, arg)
        except Exception as e:  # Ray itself has gone
            self.died = f"{type(e).__name__}: {e}"
            return False
        return True

    def answer(self, deadline: float) -> Optional[tuple]:
        ray = self.ray
        try:
            return ray.get(self.ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            return None
        except ray.exceptions.RayError as e:  # the actor died, its node or its result was lost
            self.died = f"{type(e).__name__}: {str(e).strip()}"
            return None

    def gone(self) -> Optional[str]:
        return None if self.died is None else f"died ({self.died})"

    def close(self) -> None:
        self.send("close", None)

    def join(self, timeout: float) -> None:
        if self.died is None and self.ref is not None:
            try:
                self.ray.get(self.ref, timeout=max(0.0, timeout))
            except Exception:
                pass

    def kill(self) -> None:
        try:
            self.ray.kill(self.actor, no_restart=True)
        except Exception:
            pass  # Ray itself has gone


#: Where the engine workers run (:class:`EnginePool`'s ``backend``).
BACKENDS = ("process", "ray")


_RAY_STARTED_HERE: Optional[str] = None  # the address of the Ray that ray_connect started


def ray_connect(address: Optional[str]) -> float:
    """Make sure Ray runs in this process: connect to the cluster at ``address``
    (``ray.init``'s; ``"auto"``: the cluster this machine is a node of), or without one
    start a Ray on this machine for this process (:func:`start_local_ray`). Nothing if
    Ray runs here already.

    Returns the factor on an engine actor's CPUs: 0 on a Ray started here, whose engines,
    like engine processes, share the machine's cores without reserving any (so that
    training's and evaluation's pools always fit); 1 otherwise."""
    global _RAY_STARTED_HERE
    try:
        import ray
    except ImportError:
        raise ImportError("env.backend: ray needs Ray (pip install -e .[ray])") from None
    if not ray.is_initialized():
        if address is None:
            start_local_ray()
            _RAY_STARTED_HERE = ray.get_runtime_context().gcs_address
        else:
            connect_ray(address)
    return 0.0 if ray.get_runtime_context().gcs_address == _RAY_STARTED_HERE else 1.0


class PoolStep(NamedTuple):
    """One step of every environment of a pool (numpy, batch first)."""

    units: np.ndarray  # [num_envs, U, 7] last states (before resets)
    avail: np.ndarray  # [num_envs, n_agents, 19]
    sticky: np.ndarray  # [num_envs, n_agents, 10]
    reward: np.ndarray  # [num_envs] float32
    terminated: np.ndarray  # [num_envs] bool
    truncated: np.ndarray
    won: np.ndarray
    half_court: np.ndarray
    dropped: np.ndarray  # [num_envs] bool: the environment's process was restarted


_CONTEXT: Optional[Any] = None


def _context():
    """The forkserver context, its server preloaded with this module and gfootball."""
    global _CONTEXT
    if _CONTEXT is None:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload([__name__, "gfootball.env"])
        _CONTEXT = ctx
    return _CONTEXT


class EnginePool:
    """``num_envs`` games of a scenario in ``num_workers`` engine processes.

    Args:
        scenario (GRFScenario or str): The scenario.
        num_envs (int): Games.
        num_workers (int): Engine processes; the games are split into contiguous groups
            as equal as possible (at most ``num_envs`` processes).
        seed (int): Seeds the games (:meth:`reseed` for the scheme).
        time_limit, goal_reward, end_reward, reward, time_limit_terminal, action_mask: The
            rules (:class:`Game`).
        step_timeout (float, optional): Seconds a process may take to answer a step
            before it counts as hung. (default: :obj:`30.0`)
        start_timeout (float, optional): Seconds a process may take to create its games.
            (default: :obj:`120.0`)
        max_restarts (int, optional): Restarts of one process without a successful step
            in between (its start or its steps failing); the next failure stops the pool
            with a ``RuntimeError``. (default: :obj:`3`)
        backend (str, optional): Where the engine workers run: ``"process"``, processes
            on this machine, or ``"ray"``, Ray actors (anywhere in the Ray cluster),
            supervised alike. (default: :obj:`"process"`)
        ray_address (str, optional): With ``backend="ray"``, the Ray cluster to connect
            to if Ray is not running in this process yet (:func:`ray_connect`); None
            starts one on this machine.
        ray_cpus (float, optional): CPUs Ray reserves for each engine actor on a
            cluster; none on a Ray started here (:func:`ray_connect`). (default: :obj:`1.0`)
    """

    def __init__(self, scenario: "GRFScenario | str", num_envs: int, num_workers: int, seed: int,
                 time_limit: int = 150, goal_reward: float = 100.0, end_reward: float = -1.0,
                 reward: str = "paper", time_limit_terminal: bool = True,
                 action_mask: str = "ours", step_timeout: float = 30.0, start_timeout: float = 120.0,
                 max_restarts: int = 3, backend: str = "process",
                 ray_address: Optional[str] = None, ray_cpus: float = 1.0) -> None:
        self.scenario = get_scenario(scenario)
        check_choice("backend", backend, BACKENDS)
        if not ray_cpus > 0:
            raise ValueError(f"ray_cpus must be positive (got {ray_cpus!r})")
        for key, value in (("num_envs", num_envs), ("num_workers", num_workers),
                           ("time_limit", time_limit), ("max_restarts", max_restarts)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{key} must be a positive integer (got {value!r})")
        for key, value in (("step_timeout", step_timeout), ("start_timeout", start_timeout)):
            if not value > 0:
                raise ValueError(f"{key} must be positive seconds (got {value!r})")
        check_rules(reward, action_mask)
        self.num_envs, self.seed = int(num_envs), int(seed)
        self.options = dict(time_limit=int(time_limit), goal_reward=float(goal_reward),
                            end_reward=float(end_reward), reward=reward,
                            time_limit_terminal=bool(time_limit_terminal),
                            action_mask=action_mask)
        self.step_timeout, self.start_timeout = float(step_timeout), float(start_timeout)
        self.max_restarts = int(max_restarts)
        self.groups = [g for g in np.array_split(np.arange(self.num_envs), int(num_workers))
                       if len(g)]
        self.backend, self.ray_cpus = backend, float(ray_cpus)
        if backend == "ray":
            self.ray_cpus *= ray_connect(ray_address)
        sc = self.scenario
        self.units = np.zeros((self.num_envs, sc.n_units, len(UNIT_COLUMNS)), dtype=np.float32)
        self.avail = np.zeros((self.num_envs, sc.n_agents, N_ACTIONS), dtype=bool)
        self.sticky = np.zeros((self.num_envs, sc.n_agents, len(STICKY)), dtype=np.float32)
        self.workers: List[Optional[Any]] = [None] * len(self.groups)
        self.cpu_s = [0.0] * len(self.groups)
        """CPU seconds each engine process has used since it started (as of its last
        answer)."""
        self.restarts = 0
        self.failures = [0] * len(self.groups)
        """Failures of each process since its last successful step."""
        self.events: List[str] = []  # one line per restart
        self._spare_seeds = np.random.SeedSequence([self.seed, 1])  # for restarted games
        try:
            self._start(range(len(self.groups)), self._seeds(self.seed))
        except BaseException:
            self.close()
            raise

    @property
    def num_workers(self) -> int:
        return len(self.groups)

    @property
    def pids(self) -> List[int]:
        """The engine processes' ids, one per worker (a Ray actor's on its node)."""
        return [w.pid for w in self.workers if w is not None]

    def _seeds(self, seed: int) -> List[int]:
        """Game ``b``'s seed: child ``b`` of ``SeedSequence(seed)``, whatever the split."""
        children = np.random.SeedSequence(seed).spawn(self.num_envs)
        return [int(s.generate_state(1)[0]) for s in children]

    def _start(self, which: Sequence[int], seeds: Sequence[int]) -> None:
        """Start the processes ``which`` (in parallel), games seeded ``seeds[env]``."""
        for w in which:
            group = [seeds[b] for b in self.groups[w]]
            if self.backend == "ray":
                self.workers[w] = _RayWorker(w, self.scenario, group, self.options, self.ray_cpus)
            else:
                self.workers[w] = _ProcessWorker(w, self.scenario, group, self.options)
        deadline = time.monotonic() + self.start_timeout
        for w in which:
            msg = self.workers[w].answer(deadline)
            if msg is None or msg[0] != "ready":
                why = self._failure(w, msg, self.start_timeout)
                self._kill(w)
                raise RuntimeError(f"GRF engine process {w} could not start its games: {why}")
            self._store(w, msg[1])

    def _failure(self, w: int, msg: Optional[tuple], timeout: float) -> str:
        """Why worker ``w`` gave no usable answer."""
        if msg is not None and msg[0] == "error":
            return f"raised\n{msg[1]}"
        hung = f"did not answer within {timeout:g} s (hung"
        if self.backend == "ray" and self.ray_cpus > 0:  # or never placed: no CPUs free
            hung += (f", or Ray found no node with {self.ray_cpus:g} free CPUs for it: "
                     f"env.ray_cpus against ray.available_resources()")
        return self.workers[w].gone() or hung + ")"

    def _store(self, w: int, current: Tuple[np.ndarray, np.ndarray, np.ndarray, float]) -> None:
        units, avail, sticky, self.cpu_s[w] = current
        g = self.groups[w]
        self.units[g], self.avail[g], self.sticky[g] = units, avail, sticky

    def _kill(self, w: int) -> None:
        if self.workers[w] is not None:
            self.workers[w].kill()
            self.workers[w] = None

    def _restart(self, w: int, why: str) -> None:
        """Kill process ``w`` and start it again with freshly seeded games, unless it has
        failed ``max_restarts`` restarts without a successful step: then a
        ``RuntimeError``."""
        group = self.groups[w]
        where = f"pid {self.workers[w].pid}" if self.backend == "process" else "a Ray actor"
        msg = (f"GRF engine process {w} ({where}, environments {group[0]}-{group[-1]}) "
               f"{why}; restarting it: the {len(group)} episodes it was playing are dropped")
        log.warning(msg)
        self.events.append(msg.splitlines()[0])
        self._kill(w)
        seeds = np.zeros(self.num_envs, dtype=np.int64)
        while True:
            if self.failures[w] >= self.max_restarts:
                raise RuntimeError(
                    f"GRF engine process {w} failed {self.failures[w] + 1} times in a row "
                    f"without a successful step ({self.failures[w]} restarts, the most "
                    f"max_restarts allows); last failure: {why}")
            self.failures[w] += 1
            children = self._spare_seeds.spawn(len(group))
            seeds[group] = [int(s.generate_state(1)[0]) for s in children]
            self.restarts += 1
            try:
                self._start([w], seeds.tolist())
                return
            except RuntimeError as e:
                why = str(e)
                log.warning("%s; trying again", e)

    def _exchange(self, cmd: str, args: Sequence[Any]) -> Tuple[Dict[int, Any], Dict[int, str]]:
        """Send ``(cmd, args[w])`` to every worker, then gather within ``step_timeout``:
        the answers and the failures by worker."""
        answers: Dict[int, Any] = {}
        failed: Dict[int, str] = {}
        sent = []
        for w, worker in enumerate(self.workers):
            if worker.send(cmd, args[w]):
                sent.append(w)
            else:
                failed[w] = self._failure(w, None, self.step_timeout)
        deadline = time.monotonic() + self.step_timeout
        for w in sent:
            msg = self.workers[w].answer(deadline)
            if msg is None or msg[0] != cmd:
                failed[w] = self._failure(w, msg, self.step_timeout)
            else:
                answers[w] = msg[1]
        return answers, failed

    def step(self, actions: np.ndarray) -> PoolStep:
        """Step every game with ``actions`` ``[num_envs, n_agents]`` (not checked here)."""
        actions = np.asarray(actions)
        answers, failed = self._exchange("step", [actions[g] for g in self.groups])
        B = self.num_envs
        out = PoolStep(np.zeros_like(self.units), np.zeros_like(self.avail),
                       np.zeros_like(self.sticky), np.zeros(B, np.float32),
                       *(np.zeros(B, bool) for _ in range(5)))
        for w, (last, current) in answers.items():
            g = self.groups[w]
            for field, value in zip(out[:8], last):
                field[g] = value
            self._store(w, current)
            self.failures[w] = 0
        for w, why in failed.items():
            self._restart(w, why)
            g = self.groups[w]
            out.units[g], out.avail[g], out.sticky[g] = self.units[g], self.avail[g], self.sticky[g]
            out.dropped[g] = True
        return out

    def reseed(self, seed: int) -> None:
        """Start a new episode in every game, game ``b`` drawing its episodes from child
        ``b`` of ``SeedSequence(seed)``: the same seed plays the same episodes, however
        the games are split over processes."""
        seeds = self._seeds(seed)
        answers, failed = self._exchange("reseed", [[seeds[b] for b in g] for g in self.groups])
        for w, current in answers.items():
            self._store(w, current)
        for w, why in failed.items():
            self._restart(w, why)

    def close(self) -> None:
        """End every engine worker (idempotent)."""
        for worker in self.workers:
            if worker is not None:
                worker.close()
        deadline = time.monotonic() + 5.0
        for w, worker in enumerate(self.workers):
            if worker is not None:
                worker.join(deadline - time.monotonic())
                self._kill(w)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.scenario.name}, num_envs={self.num_envs}, "
                f"num_workers={self.num_workers}, pid {os.getpid()})")
