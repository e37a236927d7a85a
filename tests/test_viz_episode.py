"""Recorded episodes, `acegnn viz` and the drawn TensorBoard episode."""
import json
import os

import pytest

from acegnn.algos.trainer import WALL_CLOCK_COLUMNS, greedy
from acegnn.cli import main
from acegnn.config import load_config
from acegnn.run import make_learner, make_task
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


def read_csv(path):
    import csv

    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK_COLUMNS}
                for r in csv.DictReader(f)]


def test_acegnn_viz_writes_an_animation_and_a_page_per_episode(tmp_path, capsys):
    from PIL import Image

    assert main(["train", CONFIG, *TINY, f"run.dir={tmp_path}", "run.name=r"]) == 0
    capsys.readouterr()
    out = tmp_path / "pictures"
    assert main(["viz", str(tmp_path / "r"), "--episodes", "2", "--seed", "1",
                 "--out", str(out), "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["samples"] == 1024 and len(res["steps"]) == 2
    assert sorted(os.listdir(out)) == ["episode0.gif", "episode0.html", "episode1.gif",
                                       "episode1.html"]
    for k, steps in enumerate(res["steps"]):
        with Image.open(out / f"episode{k}.gif") as gif:
            assert gif.n_frames == steps
        html = (out / f"episode{k}.html").read_text()
        assert html.count("step ") >= steps  # a slider step per frame


def test_a_drawn_episode_in_tensorboard_changes_nothing_else(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["train", CONFIG, *TINY, f"run.dir={tmp_path}", "run.name=plain"]) == 0
    assert main(["train", CONFIG, *TINY, f"run.dir={tmp_path}", "run.name=drawn",
                 "train.log_episode=true"]) == 0
    for name in ("train.csv", "eval.csv"):
        assert read_csv(tmp_path / "plain" / name) == read_csv(tmp_path / "drawn" / name)
    acc = EventAccumulator(str(tmp_path / "drawn" / "tb"), size_guidance={"images": 0})
    acc.Reload()
    images = acc.Images("eval/episode")
    assert [e.step for e in images] and {e.step for e in images} == {512, 1024}
    assert all(e.width > 100 and e.height > 100 for e in images)


def test_a_drawn_episode_needs_an_ace_learner(tmp_path, capsys):
    base = CONFIG.replace(".yaml", "_baselines.yaml")
    assert main(["train", base, *TINY, f"run.dir={tmp_path}", "run.name=b",
                 "train.log_episode=true"]) == 2
    assert "decides with rollout" in capsys.readouterr().err
    assert not (tmp_path / "b" / "checkpoint.pt").exists()
