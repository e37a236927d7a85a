"""Recorded episodes, `acegnn viz` and the drawn TensorBoard episode."""
import json
import os

import pytest
import torch

from acegnn.algos.trainer import greedy
from acegnn.cli import main
from acegnn.config import load_config, make_learner, make_task
from acegnn.envs import first_episodes
from acegnn.viz.episode import episode_task, record_episodes

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5.yaml")
TINY = ["train.total_samples=1024", "train.samples_per_collect=256", "train.batch_size=32",
        "train.updates_per_collect=2", "train.learning_starts=256", "train.eval_every=512",
        "train.eval_episodes=4", "train.checkpoint_every=512", "train.progress=false",
        "model.hidden=16", "train.stop_on_success=false"]


@pytest.mark.parametrize("order", ["default", "random"])
def test_recorded_episodes_are_the_greedy_policys(order):
    cfg = load_config(CONFIG, ["model.hidden=16", f"algo.order={order}"])
    learner = make_learner(cfg, make_task(cfg))
    episodes = record_episodes(episode_task(cfg.env, 6, seed=3), learner, seed=5)
    played = first_episodes(episode_task(cfg.env, 6, seed=3), greedy(learner, 5), 20)
    assert [len(e) for e in episodes] == played.length.tolist()
    assert [sum(f.reward for f in e) for e in episodes] == played.returns.tolist()
    start = played.start["positions"]  # (row, col) of spider 0, spider 1, fly
    for e, episode in enumerate(episodes):
        first = episode[0]
        assert first.step == 0 and [f.step for f in episode] == list(range(len(episode)))
        assert first.pos.tolist() == start[e][:, [1, 0]].float().tolist()  # x = col, y = row
        for f in episode:  # the drawn choice is the greedy candidate
            assert (f.chosen == f.greedy).all()
            best = [f.cand_value[f.candidates_of(a)].max() for a in range(f.num_agents)]
            assert f.cand_value[f.chosen].tolist() == best


def test_recording_needs_a_learner_with_candidate_values():
    cfg = load_config(CONFIG.replace(".yaml", "_baselines.yaml"), ["model.hidden=16"])
    learner = make_learner(cfg, make_task(cfg))
    with pytest.raises(ValueError, match="decides with rollout"):
        record_episodes(episode_task(cfg.env, 2, seed=0), learner)
