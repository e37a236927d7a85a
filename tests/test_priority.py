"""Prioritized replay (``train.priority_alpha``): the buffer's draws and weights against
hand-computed ones, each learner's weighted TD loss and priorities against a reference
computed from its targets, and the loop that joins them."""
import pytest
import torch

from acegnn.algos.ace_ctde import ACECTDE, ACECTDEConfig
from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
from acegnn.algos.trainer import TrainConfig, Trainer
from acegnn.algos.value_decomposition import (AgentModelConfig, ValueDecomposition,
                                              ValueDecompositionConfig)
from acegnn.buffers.replay import ReplayBuffer
from acegnn.envs.spiders_fly import spiders_fly_schema
from acegnn.nn import ModelConfig

from test_nstep import (ACTIONS, DISCOUNT, RETURN, S, S_BOOT, S_NEXT, SCRIPT, TERMINATED,
                        Idle, ScriptedTask, graphs)
from test_train_cli import read_csv, train

SPEC = {"x": ((), torch.int16)}


def buffer(n, alpha, capacity=None, **kw):
    """A buffer holding rows x = 0 .. n-1."""
    buf = ReplayBuffer(capacity or n, SPEC, 1, alpha=alpha, **kw)
    x = {"x": torch.arange(n, dtype=torch.int16)}
    buf.add(x, torch.zeros(n, 1, dtype=torch.long), torch.zeros(n), torch.zeros(n, dtype=torch.bool), x)
    return buf


def test_rows_are_drawn_in_proportion_to_their_priority_to_the_power_alpha():
    """Priorities 1, 4, 9, 16 with alpha 0.5 give P = 0.1, 0.2, 0.3, 0.4 (alpha 1 would
    give 1/30, 4/30, 9/30, 16/30)."""
    buf = buffer(4, 0.5, priority_eps=1e-9)
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, -4.0, 9.0, 16.0]))  # |error|
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(400):
        s = buf.sample(50, gen)
        assert torch.equal(s.obs["x"].long(), s.index)  # the rows drawn are the rows returned
        counts += torch.bincount(s.index, minlength=4)
    assert torch.allclose(counts / counts.sum(), torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01)


def test_importance_weights_by_hand():
    """w_i = (N P(i))^-beta / max_j (N P(j))^-beta: with P = 0.1 .. 0.4 and beta 0.7,
    (P(i) / 0.1)^-0.7."""
    buf = buffer(4, 0.5, priority_eps=1e-9)
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 16.0]))
    s = buf.sample(64, torch.Generator().manual_seed(1), beta=0.7)
    want = torch.tensor([1.0, 2.0 ** -0.7, 3.0 ** -0.7, 4.0 ** -0.7])[s.index]
    assert torch.allclose(s.weight, want, rtol=1e-6)
    assert set(s.index.tolist()) == {0, 1, 2, 3}
    assert torch.equal(buf.sample(8, beta=0.0).weight, torch.ones(8))  # beta 0: no correction


def test_one_draw_per_slice_of_the_cumulative_sum():
    """Stratified: with equal priorities and as many draws as rows, each row once."""
    buf = buffer(7, 0.6)
    s = buf.sample(7, torch.Generator().manual_seed(3))
    assert s.index.tolist() == list(range(7)) and torch.equal(s.weight, torch.ones(7))


def test_new_rows_come_in_at_the_largest_priority_and_old_rows_keep_theirs():
    """(The buffer holds each priority to the power alpha.)"""
    buf = buffer(3, 0.6, capacity=5, priority_eps=0.5)
    assert buf.priority[:3].tolist() == [1.0, 1.0, 1.0]  # none given yet: 1
    buf.update_priorities(torch.tensor([0, 2]), torch.tensor([3.0, 0.25]))
    powered = torch.tensor([3.5, 1.0, 0.75], dtype=torch.float64) ** 0.6
    assert torch.allclose(buf.priority[:3], powered) and buf.max_priority == 3.5
    buf.update_priorities(torch.tensor([0]), torch.tensor([0.0]))  # lowered: the maximum stays
    x = {"x": torch.tensor([9, 9], dtype=torch.int16)}
    buf.add(x, torch.zeros(2, 1, dtype=torch.long), torch.zeros(2), torch.zeros(2, dtype=torch.bool), x)
    want = torch.tensor([0.5, 1.0, 0.75, 3.5, 3.5], dtype=torch.float64) ** 0.6
    assert torch.allclose(buf.priority[:5], want)


def test_a_uniform_buffer_draws_as_before_and_keeps_no_priorities():
    buf = buffer(10, 0.0)
    s = buf.sample(6, torch.Generator().manual_seed(5))
    want = torch.randint(10, (6,), generator=torch.Generator().manual_seed(5))
    assert torch.equal(s.obs["x"].long(), want) and s.index is None
    assert s.weight is None and buf.priority is None and "priority" not in buf.state_dict()
    with pytest.raises(ValueError, match="keeps no priorities"):
        buf.update_priorities(torch.tensor([0]), torch.tensor([1.0]))


def test_bad_priorities_are_refused_and_change_nothing():
    buf = buffer(4, 0.6)
    before = buf.priority.clone()
    for index, error, match in ((torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]), "NaN"),
                                (torch.tensor([0, 4]), torch.tensor([1.0, 2.0]), "outside"),
                                (torch.tensor([0, 1]), torch.tensor([1.0]), "one shape")):
        with pytest.raises(ValueError, match=match):
            buf.update_priorities(index, error)
    assert torch.equal(buf.priority, before)
    for alpha, eps in ((-0.1, 1e-6), (0.6, 0.0)):
        with pytest.raises(ValueError, match="priority exponent"):
            ReplayBuffer(4, SPEC, 1, alpha=alpha, priority_eps=eps)
    for key, bad in (("priority_alpha", -1.0), ("priority_beta", 1.5), ("priority_eps", 0.0)):
        with pytest.raises(ValueError, match="train.priority_alpha must be >= 0"):
            TrainConfig(**{key: bad})


def test_priorities_survive_a_checkpoint_and_the_draws_go_on_alike():
    a = buffer(6, 0.6)
    a.update_priorities(torch.arange(6), torch.tensor([0.5, 3.0, 1.0, 7.0, 0.1, 2.0]))
    b = ReplayBuffer(6, SPEC, 1, alpha=0.6)
    b.load_state_dict(a.state_dict())
    ga, gb = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for _ in range(3):
        sa, sb = a.sample(5, ga, 0.5), b.sample(5, gb, 0.5)
        assert torch.equal(sa.index, sb.index) and torch.equal(sa.weight, sb.weight)
    assert b.max_priority == a.max_priority
    # a uniform buffer's checkpoint: its rows at priority 1
    c = ReplayBuffer(6, SPEC, 1, alpha=0.6)
    c.load_state_dict(buffer(6, 0.0).state_dict())
    assert c.priority[:6].tolist() == [1.0] * 6
    # a checkpoint of commit 15f681c, which held the priorities themselves
    old = a.state_dict()
    del old["priority_power"]
    old["priority"] = torch.tensor([1.5, 3.0, 1.0, 7.0, 0.1, 2.0], dtype=torch.float64)
    c.load_state_dict(old)
    assert torch.allclose(c.priority[:6], old["priority"] ** 0.6)


# The learners -----------------------------------------------------------------------------
W = torch.tensor([0.25, 1.0])  # the two states' weights (not equal: a swap would show)


def make(name):
    schema, g = spiders_fly_schema(), graphs(S)
    torch.manual_seed(0)
    if name == "ace":
        return ACEDQN(schema, ACEDQNConfig(gamma=0.9, nstep=3, intermediate_discount=False),
                      ModelConfig(hidden=16))
    if name == "ace_ctde":
        return ACECTDE(schema, ACECTDEConfig(gamma=0.9, nstep=3, intermediate_discount=False),
                       ModelConfig(hidden=16))
    return ValueDecomposition(schema, ValueDecompositionConfig(name=name, gamma=0.9, nstep=3),
                              AgentModelConfig(hidden=16), example=g)


ARGS = (graphs(S), ACTIONS, RETURN, TERMINATED, graphs(S_NEXT))
NSTEP = {"boot_graphs": graphs(S_BOOT), "discount": DISCOUNT}


@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_ace_weights_each_states_se_state_terms_and_gives_their_mean_error(loss):
    lrn = make("ace")
    lrn.cfg.loss = loss
    td = lrn.td_targets(*ARGS, **NSTEP)
    state = td.online.encoded.index.agent_batch  # [6]: three agents a state
    terms = torch.nn.functional.mse_loss(td.value, td.target, reduction="none") if loss == "mse" \
        else torch.nn.functional.smooth_l1_loss(td.value, td.target, reduction="none")
    got, logs = lrn.loss(*ARGS, **NSTEP, weights=W)
    assert torch.allclose(got, (terms * W[state]).mean())
    error = (td.value - td.target).abs().detach()
    assert torch.allclose(logs["td_errors"], torch.stack([error[state == i].mean() for i in (0, 1)]))
    plain, plain_logs = lrn.loss(*ARGS, **NSTEP)
    assert torch.allclose(plain, terms.mean()) and "td_errors" not in plain_logs
    assert torch.equal(lrn.loss(*ARGS, **NSTEP, weights=torch.ones(2))[0], plain)


def test_ace_ctde_weights_its_td_loss_only():
    lrn = make("ace_ctde")
    got, logs = lrn.loss(*ARGS, **NSTEP, weights=W)
    td_only, td_logs = ACEDQN.loss(lrn, *ARGS, **NSTEP, weights=W)
    distill, _ = lrn.distill_loss(ARGS[0])
    assert torch.allclose(got, td_only + lrn.cfg.distill_weight * distill)
    assert torch.equal(logs["td_errors"], td_logs["td_errors"])


@pytest.mark.parametrize("name", ["qmix", "vdn", "iql", "qtran"])
def test_value_decomposition_weights_each_samples_td_terms(name):
    lrn = make(name)
    plain = lrn.losses(*ARGS, **NSTEP)
    out = lrn.losses(*ARGS, **NSTEP, weights=W)
    sq = (plain.value - plain.target) ** 2
    td = (sq * (W.unsqueeze(1) if sq.dim() > 1 else W)).mean()
    if name == "qtran":  # the constraint losses unweighted
        assert torch.allclose(out.parts["td_loss"], td)
        assert torch.allclose(out.loss - out.parts["td_loss"], plain.loss - plain.parts["td_loss"])
    else:
        assert torch.allclose(out.loss, td)
    metrics = make(name).update(*ARGS, **NSTEP, weights=W)
    error = (plain.value - plain.target).abs().detach()
    assert torch.allclose(metrics["td_errors"], error.mean(1) if error.dim() > 1 else error)


# The loop ---------------------------------------------------------------------------------
def row_id(obs):
    """Each stored state's step and environment, as one number."""
    return obs["c"].float() + 100 * obs["e"].float()


class Weighed(Idle):
    """Idle, taking weights and answering each sample's TD error: :func:`row_id`."""

    def update(self, graphs, actions, reward, terminated, next_graphs, generator=None,
               weights=None, **nstep):
        self.calls.append({"weights": weights, "id": row_id(graphs)})
        return {"td_loss": 1.0, "td_errors": row_id(graphs)}


def loop(tmp_path, learner, **cfg):
    task = ScriptedTask(SCRIPT)
    cfg = TrainConfig(samples_per_collect=6, buffer_size=64, learning_starts=0, batch_size=4,
                      updates_per_collect=2, total_samples=12, progress=False, **cfg)
    return Trainer(task, learner, cfg, seed=0, run_dir=str(tmp_path))


def test_the_loop_passes_weights_and_stores_the_errors_as_priorities(tmp_path):
    tr = loop(tmp_path, Weighed(1), priority_alpha=0.6, priority_beta=0.4, priority_eps=0.5)
    assert tr.priority_beta() == pytest.approx(0.4)
    tr.collect()
    assert tr.priority_beta() == pytest.approx(0.7)  # 6 of 12 samples: half way to 1
    m = tr.learn()
    assert "td_errors" not in m and m["td_loss"] == 1.0
    assert len(tr.learner.calls) == 2 and all(c["weights"].shape == (4,) for c in tr.learner.calls)
    # every row drawn now holds |its error| + eps; the others are still at 1
    drawn = {float(i) for call in tr.learner.calls for i in call["id"]}
    ids = row_id(tr.buffer.obs)[:len(tr.buffer)]
    assert len(set(ids.tolist())) == len(tr.buffer) == 6 and 0 < len(drawn) < 6
    for i, x in enumerate(ids.tolist()):
        assert tr.buffer.priority[i] == pytest.approx((abs(x) + 0.5) ** 0.6 if x in drawn else 1.0)


def test_a_learner_that_cannot_weigh_is_refused(tmp_path):
    class Old(Idle):  # no weights keyword
        def update(self, graphs, actions, reward, terminated, next_graphs, generator=None):
            return {}

    with pytest.raises(ValueError, match="takes no weights keyword"):
        loop(tmp_path, Old(1), priority_alpha=0.6)
    loop(tmp_path, Old(1))  # uniform: fine

    class Mute(Idle):  # takes weights, answers no errors
        def update(self, *args, weights=None, **kw):
            return {}

    tr = loop(tmp_path, Mute(1), priority_alpha=0.6)
    tr.collect()
    with pytest.raises(TypeError, match="no td_errors"):
        tr.learn()


def test_a_prioritized_run_trains_and_resumes_alike(tmp_path):
    """ACE-DQN on Spiders-and-Fly through the CLI: resumed from its checkpoint, the same
    run as one that was not cut; the checkpoint holds priorities other than the first."""
    prio = ["train.priority_alpha=0.6", "train.priority_beta=0.4"]
    assert train(tmp_path, "full", *prio) == 0
    assert train(tmp_path, "cut", *prio, "train.halt_after=768") == 3
    from acegnn.cli import main

    assert main(["train", "--resume", str(tmp_path / "cut")]) == 0
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert read_csv(full / "train.csv") == read_csv(cut / "train.csv")
    assert read_csv(full / "eval.csv") == read_csv(cut / "eval.csv")
    state = torch.load(full / "checkpoint.pt", weights_only=True)["buffer"]
    assert len(set(state["priority"].tolist())) > 100  # (from 1536 rows: some never drawn)
    assert state["max_priority"] ** 0.6 >= max(1.0, float(state["priority"].max()))
    assert train(tmp_path, "uniform") == 0  # and the priorities changed what was learned
    assert read_csv(tmp_path / "uniform" / "train.csv") != read_csv(full / "train.csv")
