"""n-step returns (``algo.nstep``): the transitions stored against a hand computation,
drops, the learners' targets, one step as before, and resume."""
import os

import pytest
import torch

from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
from acegnn.algos.base import QLearningConfig
from acegnn.algos.trainer import TrainConfig, Trainer
from acegnn.algos.value_decomposition import (AgentModelConfig, ValueDecomposition,
                                              ValueDecompositionConfig)
from acegnn.buffers.replay import NStepWindow, ReplayBuffer
from acegnn.envs import EvalResult, Transition, VecTask
from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema
from acegnn.nn import ModelConfig

import reference as R

G = 0.9  # gamma


# A scripted task: per environment, a list of (reward, end) per step, end one of "",
# "term", "trunc" or "drop" (the engine restarted: the step never reaches the sink).
# Observations count the steps of each environment: step c is taken from c and leads
# to c + 1, or to -(c + 1) where the episode ends (the true last state); the next episode
# starts from c + 1 again, so every stored state says which step it belongs to.
class ScriptedTask(VecTask):
    n_agents = 1
    schema = None
    obs_spec = {"c": ((), torch.int16), "e": ((), torch.int8)}

    def __init__(self, script):
        self.script, self.num_envs = script, len(script)
        self.c = torch.zeros(self.num_envs, dtype=torch.long)

    def observe(self):
        return {"c": self.c.clone(), "e": torch.arange(self.num_envs)}

    def graphs(self, obs):
        return obs  # the idle learner reads nothing

    def step(self, actions):
        rows = [self.script[e][int(self.c[e])] for e in range(self.num_envs)]
        reward = torch.tensor([r for r, _ in rows])
        end = [e for _, e in rows]
        terminated = torch.tensor([e == "term" for e in end])
        truncated = torch.tensor([e == "trunc" for e in end])
        dropped = torch.tensor([e == "drop" for e in end])
        nxt = torch.where(terminated | truncated, -(self.c + 1), self.c + 1)
        self.c += 1
        return Transition(reward, terminated, truncated, {"c": nxt, "e": torch.arange(self.num_envs)},
                          dropped)

    def evaluate(self, act, episodes, seed):
        return EvalResult()


class Idle:
    """A learner that acts 0 and records its updates."""

    config_class, model_class = QLearningConfig, dict

    def __init__(self, nstep):
        self.cfg = QLearningConfig(gamma=G, nstep=nstep)
        self.calls = []

    def act(self, graphs, epsilon=0.0, generator=None):
        return torch.zeros(graphs["c"].size(0), dtype=torch.long)

    def update(self, graphs, actions, reward, terminated, next_graphs, generator=None, **nstep):
        self.calls.append(nstep)
        return {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def trainer(tmp_path, script, nstep=3, steps_per_round=3):
    task = ScriptedTask(script)
    cfg = TrainConfig(samples_per_collect=steps_per_round * task.num_envs, buffer_size=64,
                      learning_starts=10**6, progress=False)
    return Trainer(task, Idle(nstep), cfg, seed=0, run_dir=str(tmp_path))


def stored(buf, env=None):
    """The buffer's rows (of environment ``env``, or all), in storage order:
    (env, c, R, c of s_{t+1}, c of s_{t+m}, discount, terminated)."""
    rows = [(int(buf.obs["e"][i]), int(buf.obs["c"][i]), float(buf.reward[i]),
             int(buf.next_obs["c"][i]), int(buf.boot_obs["c"][i]), float(buf.discount[i]),
             bool(buf.terminated[i])) for i in range(len(buf))]
    return [r for r in rows if env is None or r[0] == env]


def assert_rows(got, want):
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert g[:2] == w[:2] and g[3:5] == w[3:5] and g[6] == w[6], (g, w)
        assert g[2] == pytest.approx(w[2], rel=1e-6) and g[5] == pytest.approx(w[5], rel=1e-6), (g, w)


# Env 0: an episode of 4 steps that terminates, then one still running.
# Env 1: an episode truncated after 2 steps (fewer than nstep), one truncated after 4.
SCRIPT = [
    [(1.0, ""), (2.0, ""), (4.0, ""), (8.0, "term"), (16.0, ""), (32.0, ""), (64.0, "")],
    [(3.0, ""), (5.0, "trunc"), (7.0, ""), (11.0, ""), (13.0, ""), (17.0, "trunc"), (19.0, "")],
]


def test_stored_transitions_by_hand(tmp_path):
    """nstep = 3, gamma = 0.9, rounds of 3 steps: R = sum_{k<m} gamma^k r_{t+k}, the
    bootstrap state after m steps, discount gamma^m or 0 after a termination; a truncated
    episode bootstraps from its true last state; steps pending at a round's end are
    stored in the next round; every step is stored once."""
    tr = trainer(tmp_path, SCRIPT)
    tr.collect()  # steps 0-2 | 3-5 | 6
    tr.collect()
    tr.cfg.samples_per_collect = 2
    tr.collect()
    want = [  # in storage order: per step, the environments in order
        # step 1: env 1 truncated after 2 steps
        (1, 0, 3 + G * 5, 1, -2, G ** 2, False), (1, 1, 5, -2, -2, G, False),
        # step 2: env 0's first transition is complete
        (0, 0, 1 + G * 2 + G ** 2 * 4, 1, 3, G ** 3, False),
        # step 3 (a new round): env 0 terminates, its pending steps 1 and 2 with it
        (0, 1, 2 + G * 4 + G ** 2 * 8, 2, -4, 0.0, False), (0, 2, 4 + G * 8, 3, -4, 0.0, False),
        (0, 3, 8, -4, -4, 0.0, True),
        # step 4: env 1's step 2
        (1, 2, 7 + G * 11 + G ** 2 * 13, 3, 5, G ** 3, False),
        # step 5: env 1 truncated; its steps 3-5 bootstrap from its last state
        (1, 3, 11 + G * 13 + G ** 2 * 17, 4, -6, G ** 3, False),
        (1, 4, 13 + G * 17, 5, -6, G ** 2, False), (1, 5, 17, -6, -6, G, False),
        # step 6 (a new round): env 0's step 4
        (0, 4, 16 + G * 32 + G ** 2 * 64, 5, 7, G ** 3, False),
    ]
    assert_rows(stored(tr.buffer), want)
    assert tr.samples == 14 and len(tr.window) == 3  # env 0's steps 5, 6; env 1's step 6
    # what is still pending leaves the window once, as at a time limit
    tr._add(tr.window.flush(torch.arange(2)))
    assert_rows(stored(tr.buffer)[len(want):], [
        (0, 5, 32 + G * 64, 6, 7, G ** 2, False), (0, 6, 64, 7, 7, G, False),
        (1, 6, 19, 7, 7, G, False)])
    assert len(tr.window) == 0
    steps = sorted(r[:2] for r in stored(tr.buffer))
    assert steps == [(e, c) for e in range(2) for c in range(7)]  # every step, once


def test_a_dropped_step_ends_its_environments_chain(tmp_path):
    """Env 1's engine restarts at its step 3: that step never reaches the sink, and the
    steps before it are real and stored, bootstrapping from the last state reached (3)
    with gamma^m as at a time limit (discarding them would lose steps that nstep = 1
    stores); the steps after the drop start a new chain."""
    script = [[(1.0, "")] * 7,
              [(3.0, ""), (5.0, ""), (7.0, ""), (11.0, "drop"), (13.0, ""), (17.0, ""), (19.0, "")]]
    tr = trainer(tmp_path, script, steps_per_round=7)
    stats = tr.collect()
    assert stats["dropped_episodes"] == 1.0 and tr.samples == 13
    assert_rows(stored(tr.buffer, env=1), [
        (1, 0, 3 + G * 5 + G ** 2 * 7, 1, 3, G ** 3, False),
        (1, 1, 5 + G * 7, 2, 3, G ** 2, False), (1, 2, 7, 3, 3, G, False),  # flushed at the drop
        (1, 4, 13 + G * 17 + G ** 2 * 19, 5, 7, G ** 3, False),  # not chained across it
    ])
    assert [r[1] for r in stored(tr.buffer, env=0)] == [0, 1, 2, 3, 4]  # env 0 unaffected
    assert int(tr.window.count[1]) == 2  # steps 5 and 6


def test_window_keeps_pending_steps_across_a_checkpoint_and_flushes_on_fresh_episodes(tmp_path):
    """A checkpoint holds the pending steps; a task that cannot be snapshotted starts new
    episodes on resume, so they are stored then, bootstrapping from their last state."""
    tr = trainer(tmp_path / "a", SCRIPT)
    tr.collect()  # steps 0-2: env 0's steps 1, 2 pending; env 1's step 2
    state = tr.state_dict()
    assert state["nstep_window"]["count"].tolist() == [2, 1]
    again = trainer(tmp_path / "b", SCRIPT)
    again.load_state_dict(state)
    assert len(again.window) == 0
    assert_rows(stored(again.buffer)[3:], [
        (0, 1, 2 + G * 4, 2, 3, G ** 2, False), (0, 2, 4, 3, 3, G, False),
        (1, 2, 7, 3, 3, G, False)])


def test_one_step_stores_and_updates_as_before(tmp_path):
    """nstep = 1: no window, no extra fields or memory, every step stored as it came, and
    the learner's update called without the n-step keywords."""
    tr = trainer(tmp_path, SCRIPT, nstep=1)
    assert tr.window is None and tr.buffer.boot_obs is None and tr.buffer.discount is None
    plain = ReplayBuffer(64, ScriptedTask.obs_spec, 1)
    assert tr.buffer.nbytes == plain.nbytes
    tr.collect()
    assert tr.buffer.obs["c"][:6].tolist() == [0, 0, 1, 1, 2, 2]
    assert tr.buffer.next_obs["c"][:6].tolist() == [1, 1, 2, -2, 3, 3]
    assert tr.buffer.reward[:6].tolist() == [1, 3, 2, 5, 4, 7]
    assert "nstep_window" not in tr.state_dict() and "boot_obs" not in tr.state_dict()["buffer"]
    tr.cfg.learning_starts, tr.cfg.updates_per_collect = 0, 2
    tr.learn()
    assert tr.learner.calls == [{}, {}]
    three = trainer(tmp_path / "3", SCRIPT)
    three.collect()
    three.cfg.learning_starts = 0
    three.learn()
    assert set(three.learner.calls[0]) == {"boot_graphs", "discount"}


def test_bad_nstep_and_learners_without_the_keywords(tmp_path):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="algo.nstep"):
            QLearningConfig(nstep=bad)
    from acegnn.config import load_config

    config = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5.yaml")
    with pytest.raises(ValueError, match="algo.nstep"):
        load_config(config, ["algo.nstep=0"])
    with pytest.raises(ValueError, match="nstep >= 2"):
        NStepWindow(1, G, 2, ScriptedTask.obs_spec, 1)

    class Old(Idle):
        def update(self, graphs, actions, reward, terminated, next_graphs, generator=None):
            return {}

    task = ScriptedTask(SCRIPT)
    with pytest.raises(ValueError, match="boot_graphs and discount"):
        Trainer(task, Old(3), TrainConfig(buffer_size=64, progress=False), 0, str(tmp_path))
    Trainer(task, Old(1), TrainConfig(buffer_size=64, progress=False), 0, str(tmp_path))  # fine


# The learners' targets ------------------------------------------------------------------
GRID = 5
S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]]])
S_NEXT = torch.tensor([[[1, 2], [4, 4], [2, 2]], [[1, 1], [0, 2], [4, 1]]])  # s_{t+1}
S_BOOT = torch.tensor([[[2, 2], [3, 4], [2, 1]], [[2, 1], [0, 1], [3, 1]]])  # s_{t+m}
ACTIONS = torch.tensor([2, 0, 4, 3])
RETURN = torch.tensor([3.5, -1.25])  # R_t
DISCOUNT = torch.tensor([G ** 3, 0.0])  # 3 steps; a termination within m steps
TERMINATED = torch.tensor([False, False])  # s_{t+1} is not terminal in either


def graphs(s):
    return spiders_fly_graphs(s, GRID)


def ace(**algo):
    torch.manual_seed(0)
    algo = {"intermediate_discount": False, **algo}  # gamma per environment step throughout
    lrn = ACEDQN(spiders_fly_schema(), ACEDQNConfig(gamma=G, nstep=3, **algo), ModelConfig(hidden=16))
    with torch.no_grad():  # a target network away from the online one
        for p in lrn.target_net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return lrn


def greedy_slot(values):
    return max(values, key=lambda a: values[a])


@pytest.mark.parametrize("double_q", [False, True])
def test_eq1_targets_bootstrap_from_the_state_after_m_steps(double_q):
    """The last agent's target is R + discount * max_a V'(s_{t+m, a}); the first agent's
    keeps max_a V'(s_{a_1, a}) inside the step (no discount there: the n-step return
    discounts per environment step); s_{t+1} is not read."""
    lrn = ace(double_q=double_q)
    td = lrn.td_targets(graphs(S), ACTIONS, RETURN, TERMINATED, graphs(S_NEXT),
                        boot_graphs=graphs(S_BOOT), discount=DISCOUNT)
    ref = []
    for b in range(2):
        s, sb = graphs(S[b:b + 1]), graphs(S_BOOT[b:b + 1])
        chosen = ACTIONS[2 * b:2 * b + 2].tolist()
        t_steps = R.reference_candidates(lrn.target_net, s, [0, 1], chosen)
        t_boot = R.reference_candidates(lrn.target_net, sb, [0], [0, 0])[0]
        if double_q:
            o_steps = R.reference_candidates(lrn.net, s, [0, 1], chosen)
            o_boot = R.reference_candidates(lrn.net, sb, [0], [0, 0])[0]
            inner, boot = t_steps[1][greedy_slot(o_steps[1])], t_boot[greedy_slot(o_boot)]
        else:
            inner, boot = max(t_steps[1].values()), max(t_boot.values())
        ref += [float(inner), float(RETURN[b]) + float(DISCOUNT[b]) * float(boot)]
    assert torch.allclose(td.target, torch.tensor(ref), atol=1e-5)
    one = lrn.td_targets(graphs(S), ACTIONS, RETURN, TERMINATED, graphs(S_BOOT))
    assert not torch.allclose(one.target[1], td.target[1])  # the discount is the replayed one


def test_eq1_with_a_discount_per_se_state_and_n_step_returns_is_refused():
    with pytest.raises(ValueError, match="mixes two discounts"):
        ACEDQNConfig(nstep=3, target="eq1", intermediate_discount=True)
    ACEDQNConfig(nstep=3, target="eq1", intermediate_discount=False)
    ACEDQNConfig(nstep=3, target="last_agent", intermediate_discount=True)
    ACEDQNConfig(nstep=1, target="eq1", intermediate_discount=True)


def test_last_agent_targets_bootstrap_from_the_state_after_m_steps():
    """R + discount * V'(s_{t+m, a'_{1:n}}), a' the online network's greedy decision."""
    lrn = ace(double_q=True, target="last_agent")
    td = lrn.td_targets(graphs(S), ACTIONS, RETURN, TERMINATED, graphs(S_NEXT),
                        boot_graphs=graphs(S_BOOT), discount=DISCOUNT)
    ref = []
    for b in range(2):
        sb = graphs(S_BOOT[b:b + 1])
        a0 = greedy_slot(R.reference_candidates(lrn.net, sb, [0, 1], [0, 0])[0])
        a1 = greedy_slot(R.reference_candidates(lrn.net, sb, [0, 1], [a0, 0])[1])
        final = R.reference_candidates(lrn.target_net, sb, [0, 1], [a0, a1])[1][a1]
        y = float(RETURN[b]) + float(DISCOUNT[b]) * float(final)
        ref += [y, y]
    assert torch.allclose(td.target, torch.tensor(ref), atol=1e-5)


def test_aux_loss_keeps_reading_the_next_state():
    lrn = ace(aux_weight=1.0)
    g, g2 = graphs(S), graphs(S_NEXT)
    _, logs = lrn.loss(g, ACTIONS, RETURN, TERMINATED, g2, boot_graphs=graphs(S_BOOT),
                       discount=DISCOUNT)
    td = lrn.td_targets(g, ACTIONS, RETURN, TERMINATED, g2)
    assert logs["aux_loss"] == pytest.approx(lrn.aux_loss(td.online, g, g2).item(), rel=1e-6)


def test_aux_labels_can_span_the_n_steps():
    """With ``aux_span=nstep`` the labels are s_{t+m} - s_t (the state the target
    bootstraps from), as the official code's n-step samples give them; one step otherwise."""
    g, g2, gb = graphs(S), graphs(S_NEXT), graphs(S_BOOT)
    losses = {}
    for span in ("step", "nstep"):
        lrn = ace(aux_weight=1.0, aux_span=span)
        _, logs = lrn.loss(g, ACTIONS, RETURN, TERMINATED, g2, boot_graphs=gb, discount=DISCOUNT)
        td = lrn.td_targets(g, ACTIONS, RETURN, TERMINATED, g2)
        # the head's prediction and the labels by hand: every feature's change, mean square
        pred = lrn.net.aux_head(td.online.final_units, td.online.encoded.index)
        later = gb if span == "nstep" else g2
        errors = [(pred[t] - (later[t].x - g[t].x)).pow(2) for t in pred]
        ref = sum(e.sum() for e in errors) / sum(e.numel() for e in errors)
        assert logs["aux_loss"] == pytest.approx(ref.item(), rel=1e-6)
        losses[span] = logs["aux_loss"]
    assert losses["step"] != pytest.approx(losses["nstep"], rel=1e-3)  # S_NEXT and S_BOOT differ
    with pytest.raises(ValueError, match="algo.aux_span"):
        ACEDQNConfig(aux_span="episode")


@pytest.mark.parametrize("name", ["iql", "qmix", "qtran"])
def test_baseline_targets_bootstrap_from_the_state_after_m_steps(name):
    """R + discount * Q'_tot(s_{t+m}) (per agent for IQL), at the target agents' greedy
    actions."""
    g = graphs(S)
    torch.manual_seed(0)
    lrn = ValueDecomposition(spiders_fly_schema(), ValueDecompositionConfig(name=name, gamma=G, nstep=3),
                             AgentModelConfig(hidden=16), example=g)
    out = lrn.losses(g, ACTIONS, RETURN, TERMINATED, graphs(S_NEXT), boot_graphs=graphs(S_BOOT),
                     discount=DISCOUNT)
    with torch.no_grad():
        fb = lrn.inputs(graphs(S_BOOT))
        q = lrn.target_net["agent"](fb.agent_obs).masked_fill(~fb.available, float("-inf"))
        best, greedy = q.max(-1)
        if name == "iql":
            ref = RETURN.unsqueeze(1) + DISCOUNT.unsqueeze(1) * best
        elif name == "qmix":
            ref = RETURN + DISCOUNT * lrn.target_net["mixer"](best, fb.state)
        else:
            ref = RETURN + DISCOUNT * lrn.target_net["qtran"].joint_q(fb.state, greedy)
    assert torch.allclose(out.target, ref, atol=1e-6)


@pytest.mark.parametrize("learner", ["ace_eq1", "ace_last", "qmix", "iql"])
def test_one_step_discount_gives_bit_identical_updates(learner):
    """discount = gamma (1 - d) with the bootstrap states s' given is what a one-step
    update (no keywords) computes, to the bit: the same targets, the same weights after."""
    g, g2 = graphs(S), graphs(S_NEXT)
    terminated = torch.tensor([True, False])

    def make():
        torch.manual_seed(0)
        if learner.startswith("ace"):
            target = "eq1" if learner == "ace_eq1" else "last_agent"
            return ACEDQN(spiders_fly_schema(), ACEDQNConfig(gamma=0.97, target=target, lr=1e-2),
                          ModelConfig(hidden=16))
        return ValueDecomposition(spiders_fly_schema(), ValueDecompositionConfig(name=learner, gamma=0.97),
                                  AgentModelConfig(hidden=16), example=g)

    a, b = make(), make()
    for _ in range(3):
        ma = a.update(g, ACTIONS, RETURN, terminated, g2)
        mb = b.update(g, ACTIONS, RETURN, terminated, g2, boot_graphs=g2,
                      discount=0.97 * (~terminated).float())
        assert ma == mb
    for p, q in zip(a.net.parameters(), b.net.parameters()):
        assert torch.equal(p, q)


# Resume -----------------------------------------------------------------------------------
def test_resume_with_pending_steps_gives_the_same_run(tmp_path):
    from test_train_cli import assert_same_run, train

    n = ["algo.nstep=3", "algo.intermediate_discount=false"]
    assert train(tmp_path, "full", *n) == 0
    assert train(tmp_path, "cut", *n, "train.halt_after=768") == 3
    state = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert int(state["nstep_window"]["count"].sum()) > 0  # steps were pending at the cut
    assert state["buffer"]["discount"].unique().numel() > 1  # gamma^3 and shorter ends
    from acegnn.cli import main

    assert main(["train", "--resume", str(tmp_path / "cut")]) == 0
    assert_same_run(tmp_path / "full", tmp_path / "cut")
    full = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    cut = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    for k in ("reward", "discount", "terminated"):
        assert torch.equal(full["buffer"][k], cut["buffer"][k]), k
    assert torch.equal(full["nstep_window"]["count"], cut["nstep_window"]["count"])
