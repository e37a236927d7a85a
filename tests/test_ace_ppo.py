"""ACE-PPO: the SE-state GAE, the policy's log-probabilities and the PPO loss against hand
computations, the logit head beside the value path, config checks, and the real entry
point (train, halt, resume)."""
import math
import os
from types import SimpleNamespace

import pytest
import torch

from acegnn.algos.ace_ppo import (ACEPPO, ACEPPOConfig, RunningMeanStd, expected_first_value,
                                  ppo_loss, se_gae)
from acegnn.algos.collector import Step
from acegnn.algos.on_policy import RolloutStorage
from acegnn.cli import main
from acegnn.config import load_config
from acegnn.envs.base import Transition
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import collate
from acegnn.nn import Forced, ModelConfig, Softmax
from acegnn.utils.runs import read_csv

import reference as R

GAMMA, LAM = 0.9, 0.8

# 2 environments x 3 steps x 2 agents. V(s) of each step, V after agent 1 and agent 2.
FIRST = torch.tensor([[0.5, -1.0], [2.0, 0.3], [1.5, 0.7]])  # [T, E]
VALUES = torch.tensor([[[1.0, 2.0], [-0.5, 0.25]],
                       [[3.0, 4.0], [1.25, -2.0]],
                       [[0.8, 1.6], [0.6, 0.9]]])  # [T, E, n]
REWARD = torch.tensor([[1.0, 0.0], [5.0, 2.0], [0.0, -1.0]])
# env 0: step 1 terminates (a new episode at step 2), the round ends after step 2;
# env 1: step 0 hits the time limit, the round ends after step 2
TERMINATED = torch.tensor([[False, False], [True, False], [False, False]])
CUT = torch.tensor([[False, True], [False, False], [True, True]])
BOOT = torch.tensor([[99.0, 7.0], [99.0, 99.0], [3.0, -4.0]])  # 99: never read


def test_se_gae_by_hand():
    g, gl = GAMMA, GAMMA * LAM
    out = se_gae(FIRST, VALUES, REWARD, TERMINATED, CUT, BOOT, GAMMA, LAM)
    V, F = VALUES, FIRST
    # env 0, step 2 (last step of the round, cut: bootstrap 3.0)
    d_end2 = 0.0 + g * 3.0 - V[2, 0, 1]
    a2_agent2 = g * V[2, 0, 1] - V[2, 0, 0] + gl * d_end2
    a2_agent1 = g * V[2, 0, 0] - F[2, 0] + gl * a2_agent2
    # env 0, step 1 terminates: the last SE-state bootstraps from 0, nothing follows
    d_end1 = 5.0 - V[1, 0, 1]
    a1_agent2 = g * V[1, 0, 1] - V[1, 0, 0] + gl * d_end1
    # env 0, step 0: the paper's sum over adjacent SE-states into step 1, which ends
    a0_agent1 = ((g * V[0, 0, 0] - F[0, 0]) + gl * (g * V[0, 0, 1] - V[0, 0, 0])
                 + gl ** 2 * (1.0 + g * V[1, 0, 0] - V[0, 0, 1])
                 + gl ** 3 * (g * V[1, 0, 1] - V[1, 0, 0]) + gl ** 4 * d_end1)
    a0_agent2 = ((g * V[0, 0, 1] - V[0, 0, 0]) + gl * (1.0 + g * V[1, 0, 0] - V[0, 0, 1])
                 + gl ** 2 * (g * V[1, 0, 1] - V[1, 0, 0]) + gl ** 3 * d_end1)
    # env 1, step 0 hits the time limit: bootstrap 7.0, nothing of step 1 flows back
    a0_env1_agent2 = (g * V[0, 1, 1] - V[0, 1, 0]) + gl * (0.0 + g * 7.0 - V[0, 1, 1])
    # env 1, step 1 -> step 2 -> cut (bootstrap -4.0)
    d_end = -1.0 + g * -4.0 - V[2, 1, 1]
    a1_env1_agent1 = ((g * V[1, 1, 0] - F[1, 1]) + gl * (g * V[1, 1, 1] - V[1, 1, 0])
                      + gl ** 2 * (2.0 + g * V[2, 1, 0] - V[1, 1, 1])
                      + gl ** 3 * (g * V[2, 1, 1] - V[2, 1, 0]) + gl ** 4 * d_end)
    expected = {(2, 0, 0): a2_agent1, (2, 0, 1): a2_agent2, (1, 0, 1): a1_agent2,
                (0, 0, 0): a0_agent1, (0, 0, 1): a0_agent2, (0, 1, 1): a0_env1_agent2,
                (1, 1, 0): a1_env1_agent1}
    for key, value in expected.items():
        assert out.advantages[key].item() == pytest.approx(float(value), abs=1e-5), key
    # every entry against the forward sum of the paper, term by term
    for (t, e, j), value in _forward_sums().items():
        assert out.advantages[t, e, j].item() == pytest.approx(value, abs=1e-5), (t, e, j)
    # lambda-returns: advantage + the value of the SE-state the decision was made at
    assert out.returns[1, 0, 0].item() == pytest.approx(float(out.advantages[1, 0, 0] + F[1, 0]))
    assert out.returns[0, 0, 1].item() == pytest.approx(float(a0_agent2 + V[0, 0, 0]))
    assert out.returns[1, 0, 2].item() == pytest.approx(float(d_end1 + V[1, 0, 1]))
    assert out.returns[0, 1, 2].item() == pytest.approx(float(g * 7.0))


def _forward_sums():
    """A(a_{j+1} | s_{a_1:j}) as the paper writes it: sum over k of (gamma lambda)^k times
    the k-th temporal difference along the chain of SE-states, until the episode ends
    (termination: bootstrap 0) or is cut (bootstrap BOOT)."""
    T, E, n = VALUES.shape
    out = {}
    for e in range(E):
        for t0 in range(T):
            for j in range(n):
                total, k, t, i = 0.0, 0, t0, j  # i: actions taken in step t so far
                while True:
                    v = FIRST[t, e] if i == 0 else VALUES[t, e, i - 1]
                    if i < n:
                        delta = GAMMA * VALUES[t, e, i] - v
                        total += (GAMMA * LAM) ** k * float(delta)
                        k, i = k + 1, i + 1
                        continue
                    if TERMINATED[t, e]:
                        nxt = 0.0
                    elif CUT[t, e]:
                        nxt = float(BOOT[t, e])
                    else:
                        nxt = float(VALUES[t + 1, e, 0])
                    total += (GAMMA * LAM) ** k * (float(REWARD[t, e]) + GAMMA * nxt - float(v))
                    if TERMINATED[t, e] or CUT[t, e]:
                        break
                    k, t, i = k + 1, t + 1, 1  # s_{a_1:n} -> s'_{a_1}
                out[(t0, e, j)] = total
    return out


# The policy ------------------------------------------------------------------------------
SIZES = [(2, 3), (3, 2), (1, 1), (4, 3)]


class WithHead:
    """The network as the reference reads it, with ``head`` as its value head."""

    def __init__(self, net, head):
        self.net, self.value_head = net, head

    def __getattr__(self, name):
        return getattr(self.net, name)


def make(seed=0, mask_prob=0.4, **model):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema()
    states = [random_state(schema, na, ne, g, mask_prob=mask_prob) for na, ne in SIZES]
    lrn = ACEPPO(schema, ACEPPOConfig(), ModelConfig(hidden=16, **model))
    with torch.no_grad():  # logits far from uniform, so that mistakes show
        lrn.net.logit_head.out[-1].weight.mul_(20.0)
    return lrn, states


@pytest.mark.parametrize("model", [{}, {"pool": "mean_max", "layers": 2}])
def test_log_probs_sum_to_the_naive_joint_log_prob(model):
    lrn, states = make(**model)
    net = lrn.net
    sel = Softmax()
    ro = net.rollout(collate(states), order="random", selector=sel, logit_head=net.logit_head,
                     generator=torch.Generator().manual_seed(3))
    idx = ro.encoded.index
    logit_net = WithHead(net, net.logit_head)
    joint_checked = 0
    for gi, d in enumerate(states):
        agents = (idx.agent_batch == gi).nonzero().view(-1)
        order = sorted(range(len(agents)), key=lambda i: int(ro.rank[agents[i]]))
        chosen = ro.actions[agents].tolist()
        with torch.no_grad():
            logits = R.reference_candidates(logit_net, d, order, chosen)
            values = R.reference_candidates(net, d, order, chosen)
        joint = 0.0
        for step, agent, vals in zip(logits, order, values):
            slots = sorted(step)
            l = torch.stack([step[s] for s in slots])
            log_p = l - torch.logsumexp(l, 0)
            mine = log_p[slots.index(chosen[agent])].item()
            joint += mine
            entropy = -(log_p.exp() * log_p).sum().item()
            assert ro.selection["log_prob"][agents[agent]].item() == pytest.approx(mine, abs=1e-5)
            assert ro.selection["entropy"][agents[agent]].item() == pytest.approx(entropy, abs=1e-5)
            rows = (idx.action_agent == agents[agent]).nonzero().view(-1)
            for s in slots:  # the rollout's logits and values of every candidate
                row = rows[idx.action_slot[rows] == s].item()
                assert ro.candidate_logits[row].item() == pytest.approx(step[s].item(), abs=1e-4)
                assert ro.candidate_values[row].item() == pytest.approx(vals[s].item(), abs=1e-5)
        per_graph = ro.selection["log_prob"][agents].sum().item()
        assert per_graph == pytest.approx(joint, abs=1e-4)
        joint_checked += 1
        assert joint < 0  # the logits are sharp, not every choice is certain
    assert joint_checked == len(states)


def test_explore_needs_equal_agent_counts():
    lrn, states = make(seed=1)
    with pytest.raises(ValueError, match="same number of agents"):
        lrn.explore(collate(states), torch.Generator().manual_seed(0))


def test_explore_and_teacher_forcing_agree():
    torch.manual_seed(0)
    from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema

    lrn = ACEPPO(spiders_fly_schema(), ACEPPOConfig(order="random"), ModelConfig(hidden=16))
    pos = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]], [[3, 3], [0, 3], [1, 1]]])
    g = spiders_fly_graphs(pos, 5)
    actions, ex = lrn.explore(g, torch.Generator().manual_seed(0))
    log_prob, entropy, value = lrn.evaluate_actions(g, actions, ex["rank"])
    assert torch.allclose(log_prob, ex["log_prob"].view(-1), atol=1e-6)
    assert torch.allclose(value[:, 0], ex["first_value"], atol=1e-6)
    assert torch.allclose(value[:, 1:], ex["value"], atol=1e-6)
    (log_prob.sum() + entropy.sum() + value.sum()).backward()
    assert lrn.net.logit_head.out[-1].weight.grad.abs().sum() > 0
    assert lrn.net.value_head.out[-1].weight.grad.abs().sum() > 0


def test_logit_head_changes_nothing_of_the_value_path():
    lrn, states = make(seed=2, mask_prob=0.3)
    net, b = lrn.net, collate(states)
    plain = net.rollout(b, order="random", generator=torch.Generator().manual_seed(5))
    both = net.rollout(b, order="random", generator=torch.Generator().manual_seed(5),
                       logit_head=net.logit_head)  # greedy on values, as without
    for field in ("actions", "rank", "chosen_value", "max_value", "greedy_ids", "final_units"):
        assert torch.equal(getattr(plain, field), getattr(both, field)), field
    assert torch.equal(torch.isnan(plain.candidate_values), torch.isnan(both.candidate_values))
    valued = ~torch.isnan(plain.candidate_values)
    assert torch.equal(plain.candidate_values[valued], both.candidate_values[valued])
    assert plain.candidate_logits is None
    assert torch.equal(torch.isnan(both.candidate_logits), ~valued)
    forced = Forced(plain.actions)
    chosen = net.rollout(b, order=plain.rank, selector=forced, values="chosen")
    assert torch.allclose(chosen.chosen_value, both.chosen_value, atol=1e-6)
    with pytest.raises(ValueError, match="values='all'"):
        net.rollout(b, selector=forced, values="chosen", logit_head=net.logit_head)
    with pytest.raises(ValueError, match="logit head"):
        net.rollout(b, selector=Softmax())


def test_softmax_selector_samples_the_policy():
    """Sampled frequencies follow the softmax, and unavailable actions are never taken."""
    from acegnn.nn import CandidateTable

    logits = torch.tensor([[1.0, 0.0, 2.0, 5.0]]).repeat(20000, 1)
    valid = torch.tensor([[True, True, True, False]]).repeat(20000, 1)
    rows = torch.arange(4).repeat(20000, 1)
    table = CandidateTable(rows, torch.zeros_like(logits), valid, torch.arange(20000),
                           torch.zeros(20000, dtype=torch.long), 20000, logits)
    sel = Softmax()
    sel.start(SimpleNamespace(num_agents=20000))  # all a sampling selector reads of the index
    col, stats = sel.select_column(table, torch.Generator().manual_seed(0))
    freq = torch.bincount(col, minlength=4).float() / 20000
    p = torch.softmax(torch.tensor([1.0, 0.0, 2.0]), 0)
    assert freq[3] == 0
    assert torch.allclose(freq[:3], p, atol=0.01)
    assert torch.allclose(stats["log_prob"], p.log()[col], atol=1e-6)


def test_expected_first_value_is_the_policy_weighted_value():
    lrn, states = make(seed=4)
    net = lrn.net
    ro = net.rollout(collate(states), selector=Softmax(greedy=True), logit_head=net.logit_head,
                     max_steps=1)
    got = expected_first_value(ro)
    idx = ro.encoded.index
    for gi in range(len(states)):
        rows = (idx.action_agent == ro.first_agent[gi]).nonzero().view(-1)
        rows = rows[~torch.isnan(ro.candidate_values[rows])]
        p = torch.softmax(ro.candidate_logits[rows], 0)
        assert got[gi].item() == pytest.approx((p * ro.candidate_values[rows]).sum().item(), abs=1e-5)


def test_round_advantages_follow_ranks_times_and_environments():
    """The learner lays a round out for se_gae: rows by (step, environment), agents by
    the position they decided at; a missing row (a dropped step) is left out."""
    from acegnn.algos.on_policy import Trajectories
    from acegnn.envs.spiders_fly import spiders_fly_schema

    lrn = ACEPPO(spiders_fly_schema(), ACEPPOConfig(gamma=GAMMA, gae_lambda=LAM, value_norm=False),
                 ModelConfig(hidden=8))
    T, E, n = VALUES.shape
    keep = [(t, e) for t in range(T) for e in range(E) if (t, e) != (1, 1)]
    time = torch.tensor([t for t, _ in keep])
    env = torch.tensor([e for _, e in keep])
    rank = torch.tensor([[1, 0] if (t + e) % 2 else [0, 1] for t, e in keep])
    # per agent (batch order): agent i decided at position rank[i]
    after = torch.stack([VALUES[t, e][rank[k]] for k, (t, e) in enumerate(keep)])
    cut = CUT.clone()
    cut[0, 1] = True  # env 1 is not followed after step 0 (its step 1 was dropped)
    data = Trajectories({}, {}, torch.zeros(len(keep), n, dtype=torch.long), REWARD[time, env],
                        TERMINATED[time, env], torch.zeros(len(keep), dtype=torch.bool),
                        cut[time, env], time, env, {"rank": rank}, T, E)
    adv, ret = lrn._advantages(data, FIRST[time, env], after, BOOT[time, env])
    ref = se_gae(FIRST, VALUES, REWARD, TERMINATED, cut, BOOT, GAMMA, LAM)
    for k, (t, e) in enumerate(keep):
        for i in range(n):
            assert adv[k, i].item() == pytest.approx(ref.advantages[t, e, rank[k, i]].item(), abs=1e-6)
            assert ret[k, 1 + i].item() == pytest.approx(ref.returns[t, e, 1 + rank[k, i]].item(), abs=1e-6)
        assert ret[k, 0].item() == pytest.approx(ref.returns[t, e, 0].item(), abs=1e-6)


# The loss ------------------------------------------------------------------------------
@pytest.mark.parametrize("value_clip", [0.0, 0.3])
@pytest.mark.parametrize("adv_norm", [False, True])
def test_ppo_loss_by_hand(value_clip, adv_norm):
    g = torch.Generator().manual_seed(0)
    D, V = 7, 9
    log_prob = torch.randn(D, generator=g) * 0.3 - 1.0
    old = log_prob + torch.randn(D, generator=g) * 0.2  # ratios around 1, several clipped
    adv = torch.randn(D, generator=g) * 2.0
    ent = torch.rand(D, generator=g)
    value, old_v, target = (torch.randn(V, generator=g) for _ in range(3))
    eps, wv, we = 0.1, 0.7, 0.02
    out = ppo_loss(log_prob, old, adv, ent, value, old_v, target, eps, value_clip, wv, we, adv_norm)
    # by hand, one element at a time
    a = adv.tolist()
    if adv_norm:
        mean = sum(a) / D
        std = math.sqrt(sum((x - mean) ** 2 for x in a) / D)
        a = [(x - mean) / (std + 1e-8) for x in a]
    pg, kl, clipped = 0.0, 0.0, 0
    for i in range(D):
        rho = math.exp(log_prob[i].item() - old[i].item())
        pg += -min(rho * a[i], min(max(rho, 1 - eps), 1 + eps) * a[i]) / D
        kl += ((rho - 1) - math.log(rho)) / D
        clipped += abs(rho - 1) > eps
    vl = 0.0
    for i in range(V):
        v, o, r = value[i].item(), old_v[i].item(), target[i].item()
        sq = (v - r) ** 2
        if value_clip > 0:
            sq = max(sq, (o + min(max(v - o, -value_clip), value_clip) - r) ** 2)
        vl += 0.5 * sq / V
    entropy = ent.mean().item()
    assert 0 < clipped < D
    assert out.policy_loss.item() == pytest.approx(pg, abs=1e-6)
    assert out.value_loss.item() == pytest.approx(vl, abs=1e-6)
    assert out.entropy.item() == pytest.approx(entropy, abs=1e-6)
    assert out.loss.item() == pytest.approx(pg + wv * vl - we * entropy, abs=1e-6)
    assert out.approx_kl.item() == pytest.approx(kl, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(clipped / D)


def test_running_mean_std_matches_the_whole_stream():
    rms = RunningMeanStd()
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, generator=g) * 3 + 2 for n in (5, 40, 1, 17)]
    for p in parts:
        rms.update(p)
    x = torch.cat(parts).double()
    assert rms.mean.item() == pytest.approx(x.mean().item(), abs=1e-4)
    assert rms.var.item() == pytest.approx(x.var(correction=0).item(), rel=1e-3)
    y = torch.tensor([0.5, -1.0])
    assert torch.allclose(rms.denormalize(rms.normalize(y)), y, atol=1e-6)


# The round's storage ----------------------------------------------------------------------
def _step(envs, reward, terminated, truncated):
    k = len(envs)
    obs = {"x": torch.tensor(envs, dtype=torch.float).view(k, 1)}
    tr = Transition(torch.tensor(reward), torch.tensor(terminated), torch.tensor(truncated),
                    {"x": obs["x"] + 0.5})
    return Step(obs, torch.zeros(k, 2, dtype=torch.long), tr, {"env": torch.tensor(envs)})


def test_storage_cuts_time_limits_round_ends_and_dropped_steps():
    st = RolloutStorage(3)
    st.add(_step([0, 1, 2], [0.0, 0.0, 1.0], [False, False, True], [False, True, False]))
    st.add(_step([0, 2], [0.0, 0.0], [False, False], [False, False]))  # env 1 was dropped
    st.add(_step([0, 1, 2], [2.0, 0.0, 0.0], [True, False, False], [False, False, False]))
    data = st.trajectories()
    assert data.time.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert data.env.tolist() == [0, 1, 2, 0, 2, 0, 1, 2]
    # env 1 step 0: time limit; env 0 step 2: terminated (no cut); round end: envs 1, 2
    assert data.cut.tolist() == [False, True, False, False, False, False, True, True]
    st2 = RolloutStorage(2)
    st2.add(_step([1], [0.0], [False], [False]))
    st2.add(_step([0, 1], [0.0, 0.0], [False, False], [False, False]))
    assert st2.trajectories().cut.tolist() == [False, True, True]
    with pytest.raises(ValueError, match="extras"):
        RolloutStorage(1).add(Step({}, torch.zeros(1, 1), None, {}))


# Config and the entry point ---------------------------------------------------------------
@pytest.mark.parametrize("key,value,match", [
    ("clip_ratio", 0.0, "algo.clip_ratio"), ("gae_lambda", 1.5, "algo.gae_lambda"),
    ("value_clip_ratio", -0.1, "algo.value_clip_ratio"), ("optimizer", "sgd", "algo.optimizer"),
    ("order", "backwards", "algo.order"), ("lr", 0.0, "algo.lr"),
    ("entropy_weight", float("inf"), "algo.entropy_weight")])
def test_config_validation(key, value, match):
    with pytest.raises(ValueError, match=match):
        ACEPPOConfig(**{key: value})


CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5_ppo.yaml")
# 7 minibatches of 48 rows > 256 rows a round: a second pass, with recomputed advantages
TINY = ["train.total_samples=1536", "train.samples_per_collect=256", "train.batch_size=48",
        "train.updates_per_collect=7", "train.eval_every=512", "train.eval_episodes=4",
        "train.checkpoint_every=512", "train.progress=false", "model.hidden=16",
        "model.layers=1", "env.num_envs=8", "train.stop_on_success=false"]


def train(tmp_path, name, *extra):
    return main(["train", CONFIG, *TINY, f"run.dir={tmp_path}", f"run.name={name}", *extra])


def test_shipped_configs_load():
    for name in ("spiders_fly_5x5_ppo.yaml", "smax_5m_vs_6m_ppo.yaml"):
        path = os.path.join(os.path.dirname(__file__), "..", "configs", name)
        cfg = load_config(path)
        assert cfg.algo.name == "ace_ppo" and isinstance(cfg.algo, ACEPPOConfig)


def test_off_policy_keys_are_refused(tmp_path, capsys):
    assert train(tmp_path, "a", "train.eps_decay=10") == 2
    assert "train.eps_decay is not read by the on-policy loop" in capsys.readouterr().err
    assert train(tmp_path, "b", "algo.clip_ratio=2") == 2
    assert "algo.clip_ratio must be in (0, 1)" in capsys.readouterr().err


def logged(path):
    """A run's CSV rows without the wall-clock columns."""
    from acegnn.algos.trainer import WALL_CLOCK_COLUMNS

    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_COLUMNS} for row in read_csv(path)]


def test_train_then_resume_gives_the_same_run(tmp_path):
    assert train(tmp_path, "full") == 0
    assert train(tmp_path, "cut", "train.halt_after=768") == 3  # "killed" after a checkpoint
    cut = tmp_path / "cut"
    assert main(["train", "--resume", str(cut)]) == 0
    full = tmp_path / "full"
    rows = logged(full / "train.csv")
    assert [int(r["samples"]) for r in rows] == [256 * i for i in range(1, 7)]
    assert {"loss", "policy_loss", "value_loss", "entropy", "approx_kl"} <= set(rows[-1])
    assert logged(cut / "train.csv") == rows
    assert logged(cut / "eval.csv") == logged(full / "eval.csv")
    wa = torch.load(full / "checkpoint.pt", weights_only=True)["learner"]
    wb = torch.load(cut / "checkpoint.pt", weights_only=True)["learner"]
    assert "buffer" not in torch.load(full / "checkpoint.pt", weights_only=True)
    assert any(k.startswith("logit_head.") for k in wa["net"])
    for k, v in wa["net"].items():
        assert torch.equal(v, wb["net"][k]), k
    assert torch.equal(wa["value_norm"]["var"], wb["value_norm"]["var"])
    assert main(["eval", str(full), "--episodes", "4"]) == 0


# The update step against mistakes that a loss computed by hand would not show ---------------
def pool_learner(**cfg):
    """ACE-PPO on 8 synthetic states of 2 agents each, observations ``{"i": index}``."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    schema = smac_like_schema()
    pool = [random_state(schema, 2, 3, g, mask_prob=0.3) for _ in range(8)]
    lrn = ACEPPO(schema, ACEPPOConfig(value_norm=False, **cfg), ModelConfig(hidden=16))

    def graphs(obs):
        return collate([pool[int(i)] for i in obs["i"]])

    return lrn, graphs


def a_minibatch(lrn, graphs, rows=(0, 1, 2, 3)):
    obs = {"i": torch.tensor(rows)}
    actions, ex = lrn.explore(graphs(obs), torch.Generator().manual_seed(1))
    m, n = ex["log_prob"].shape
    return (graphs(obs), actions.view(m, n), ex["rank"], ex["log_prob"], ex["choice"],
            torch.cat([ex["first_value"].unsqueeze(1), ex["value"]], 1))


def taken_log_prob(lrn, g, actions, rank):
    with torch.no_grad():
        log_prob, _, _ = lrn.evaluate_actions(g, actions, rank)
    return log_prob.view(actions.shape)


def test_a_step_makes_a_decision_with_positive_advantage_more_likely():
    lrn, graphs = pool_learner(value_weight=0.0, entropy_weight=0.0, clip_ratio=0.2, lr=1e-3)
    g, actions, rank, old, choice, old_out = a_minibatch(lrn, graphs)
    b, i = (choice).nonzero()[0].tolist()  # a decision with a choice
    advantage = torch.zeros_like(old)
    advantage[b, i] = 1.0  # better than expected; the others as expected
    before = taken_log_prob(lrn, g, actions, rank)
    lrn._step(g, actions, rank, old, advantage, choice, old_out, old_out)
    after = taken_log_prob(lrn, g, actions, rank)
    assert after[b, i] > before[b, i] + 1e-4


def test_the_ratio_is_to_the_collecting_policy_and_clips_its_gradient():
    """Decisions already far more likely than when collected (ratio e > 1 + clip) with a
    positive advantage: the clipped objective is flat, so the step changes nothing."""
    lrn, graphs = pool_learner(value_weight=0.0, entropy_weight=0.0, clip_ratio=0.2,
                               adv_norm=False, lr=1e-3)
    g, actions, rank, current, choice, old_out = a_minibatch(lrn, graphs)
    weights = [p.detach().clone() for p in lrn.net.parameters()]
    m = lrn._step(g, actions, rank, current - 1.0, torch.ones_like(current), choice, old_out,
                  old_out)
    assert m["clip_fraction"] == 1.0
    assert all(torch.equal(p, w) for p, w in zip(lrn.net.parameters(), weights))
    lrn._step(g, actions, rank, current, torch.ones_like(current), choice, old_out, old_out)
    assert not all(torch.equal(p, w) for p, w in zip(lrn.net.parameters(), weights))


def test_cut_rows_bootstrap_from_the_next_state_in_the_advantages(monkeypatch):
    """A round of 2 steps x 2 environments whose last steps are cut (the round ends): the
    advantages read V of the next SE-state there, in expectation over the first agent."""
    import acegnn.algos.ace_ppo as ace_ppo
    from acegnn.algos.on_policy import Trajectories

    lrn, graphs = pool_learner()
    obs, nxt = {"i": torch.tensor([0, 1, 2, 3])}, {"i": torch.tensor([4, 5, 6, 7])}
    actions, ex = lrn.explore(graphs(obs), torch.Generator().manual_seed(1))
    cut = torch.tensor([False, False, True, True])
    data = Trajectories(obs, nxt, actions.view(4, 2), torch.ones(4), torch.zeros(4, dtype=torch.bool),
                        torch.zeros(4, dtype=torch.bool), cut, torch.tensor([0, 0, 1, 1]),
                        torch.tensor([0, 1, 0, 1]), ex, 2, 2)
    with torch.no_grad():
        ro = lrn.net.rollout(collate([graphs({"i": torch.tensor([k])}).get_example(0)
                                      for k in (6, 7)]),
                             selector=Softmax(greedy=True), logit_head=lrn.net.logit_head,
                             max_steps=1)
        expected = expected_first_value(ro)
    seen = []

    def spy(*args):
        seen.append(args[5].clone())  # the bootstrap, [T, E]
        return se_gae(*args)

    monkeypatch.setattr(ace_ppo, "se_gae", spy)
    lrn.learn(data, graphs, updates=1, batch_size=4)
    assert torch.allclose(seen[0][1], expected, atol=1e-6) and bool((expected != 0).all())
