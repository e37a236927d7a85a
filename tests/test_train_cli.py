"""The real entry point on tiny budgets: smoke, determinism, resume, bad input."""
import csv
import dataclasses
import json
import os
import subprocess

import pytest
import torch

from acegnn.algos.trainer import WALL_CLOCK_COLUMNS
from acegnn.cli import main
from acegnn.config import load_config
from acegnn.utils.provenance import (ARITHMETIC_ENV, code_version, commits, machine,
                                     record_session, sessions)

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5.yaml")
TINY = ["train.total_samples=1536", "train.samples_per_collect=256", "train.batch_size=32",
        "train.updates_per_collect=2", "train.learning_starts=256", "train.eval_every=512",
        "train.eval_episodes=4", "train.checkpoint_every=512", "train.eps_decay=1000",
        "train.progress=false", "model.hidden=16", "env.num_envs=8", "train.buffer_size=4096",
        "train.stop_on_success=false"]


def train(tmp_path, name, *extra):
    return main(["train", CONFIG, *TINY, f"run.dir={tmp_path}", f"run.name={name}", *extra])


def read_csv(path, drop=WALL_CLOCK_COLUMNS):
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def tb_scalars(run, tag):
    """The scalars TensorBoard shows for ``tag``, the event files read in the order they
    were written. TensorBoard reads them in the order of their names
    (``events.out.tfevents.<second>.<host>.<pid>.<counter>``): two sessions of a run started
    in the same second by one process (a test resuming in-process) would be read in the
    wrong order when the counter gains a digit ("10" < "9"), and the resumed session's
    purge would drop the first session's events."""
    import tempfile

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = [f for f in os.listdir(run / "tb") if "tfevents" in f]
    files.sort(key=lambda f: (int(f.split(".")[3]), int(f.split(".")[-1])))
    with tempfile.TemporaryDirectory() as ordered:
        for i, f in enumerate(files):
            os.symlink(os.path.abspath(run / "tb" / f),
                       os.path.join(ordered, f"events.out.tfevents.{i:06d}"))
        acc = EventAccumulator(ordered)
        acc.Reload()
        return [(e.step, e.value) for e in acc.Scalars(tag)]


def assert_same_run(a, b):
    """Two run directories logged the same metrics and ended with the same weights."""
    assert read_csv(a / "train.csv") == read_csv(b / "train.csv")
    assert read_csv(a / "eval.csv") == read_csv(b / "eval.csv")
    for tag in ("eval/success_rate", "train/td_loss"):
        assert tb_scalars(a, tag) == tb_scalars(b, tag), tag
    wa = torch.load(a / "checkpoint.pt", weights_only=True)["learner"]["net"]
    wb = torch.load(b / "checkpoint.pt", weights_only=True)["learner"]["net"]
    for k, v in wa.items():
        assert torch.equal(v, wb[k]), k


def test_smoke_run_writes_logs_and_checkpoint(tmp_path, capsys):
    assert train(tmp_path, "a") == 0
    run = tmp_path / "a"
    for name in ("config.yaml", "train.csv", "eval.csv", "checkpoint.pt"):
        assert (run / name).exists(), name
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(run / "tb"))
    rows = read_csv(run / "train.csv")
    assert [int(r["samples"]) for r in rows] == [256 * i for i in range(1, 7)]
    assert {"td_loss", "epsilon", "episode_return"} <= set(rows[-1])
    net = torch.load(run / "checkpoint.pt", weights_only=True)["learner"]["net"]
    entries = torch.cat([v.flatten().float() for v in net.values()])
    assert float(rows[-1]["zero_weights"]) == int((entries.abs() <= 1e-6).sum()) / len(entries)
    evals = read_csv(run / "eval.csv")
    assert {"success_rate", "mean_steps", "steps_gap"} <= set(evals[0])
    assert main(["eval", str(run), "--episodes", "4"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"success_rate", "steps_gap", "exact_steps_gap", "exact_worst_success"} <= set(out)
    assert out["exact_steps_gap"] == pytest.approx(out["exact_mean_steps"] - 5.5358, abs=1e-3)
    # the same from Python, typed
    from acegnn.run import evaluate_checkpoint

    res = evaluate_checkpoint(str(run), episodes=4)
    assert res["samples"] == out["samples"] == 1536
    assert {**res["evaluation"].metrics(), **res["exact"].metrics()} == {
        k: v for k, v in out.items() if k not in ("checkpoint", "samples")}
    assert type(res["evaluation"]).__name__ == "SpidersFlyEval"


def test_a_run_says_where_its_time_went(tmp_path, capsys):
    assert train(tmp_path, "a", "train.checkpoint_every=512") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    rows = read_csv(tmp_path / "a" / "train.csv", drop=())
    for part in ("collect", "learn", "eval"):
        per_round = [float(r[f"{part}_s"]) for r in rows]
        assert all(t >= 0 for t in per_round)
        assert summary[f"time_{part}_s"] == pytest.approx(sum(per_round), rel=1e-6, abs=1e-9)
    assert summary["time_checkpoint_s"] > 0 and "checkpoint_s" not in rows[0]
    # the rounds that evaluate (every 512 samples: 3 of 6) took longer there than the others
    evals = [float(r["eval_s"]) for r in rows if int(r["samples"]) % 512 == 0]
    others = [float(r["eval_s"]) for r in rows if int(r["samples"]) % 512 != 0]
    assert len(evals) == 3 and min(evals) > max(others)
    assert all(float(r["learn_s"]) > 0 for r in rows)
    line = [ln for ln in captured.err.splitlines() if ln.startswith("time of this session")]
    assert len(line) == 1 and "collect" in line[0] and "%" in line[0]


def test_a_resumed_run_totals_its_time_over_its_sessions(tmp_path, capsys):
    assert train(tmp_path, "a", "train.checkpoint_every=256", "train.halt_after=768") == 3
    run = tmp_path / "a"
    first = torch.load(run / "checkpoint.pt", weights_only=True)["spent_s"]
    assert main(["train", "--resume", str(run)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = read_csv(run / "train.csv", drop=())
    assert [int(r["samples"]) for r in rows] == [256 * i for i in range(1, 7)]
    for part in ("collect", "learn", "eval"):
        # the rows of both sessions, not only those of the second
        total = sum(float(r[f"{part}_s"]) for r in rows)
        assert summary[f"time_{part}_s"] == pytest.approx(total, rel=1e-6, abs=1e-9)
        assert first[part] == pytest.approx(sum(float(r[f"{part}_s"]) for r in rows[:3]),
                                            rel=1e-6, abs=1e-9)
    assert 0 < first["learn"] < summary["time_learn_s"]
    assert first["checkpoint"] > 0  # the checkpoints at 256 and 512 (768's is not in it)
    assert summary["time_checkpoint_s"] > first["checkpoint"]


def test_same_seed_same_logs(tmp_path):
    assert train(tmp_path, "a") == 0
    assert train(tmp_path, "b") == 0
    assert read_csv(tmp_path / "a" / "train.csv") == read_csv(tmp_path / "b" / "train.csv")
    assert read_csv(tmp_path / "a" / "eval.csv") == read_csv(tmp_path / "b" / "eval.csv")
    assert train(tmp_path, "c", "seed=1") == 0
    assert read_csv(tmp_path / "a" / "train.csv") != read_csv(tmp_path / "c" / "train.csv")


def test_a_checkpoint_whose_replay_stores_other_observations_is_refused(tmp_path, capsys):
    assert train(tmp_path, "a", "train.halt_after=768") == 3
    path = tmp_path / "a" / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["buffer"]["obs"]["old"] = state["buffer"]["obs"]["positions"]  # another layout
    torch.save(state, path)
    before = path.read_bytes()
    assert main(["train", "--resume", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "its replay holds the observations ['old', 'positions'], and this task stores " \
        "['positions']" in err and "start a new run" in err
    assert path.read_bytes() == before  # nothing saved is lost


def test_resume_gives_the_same_result(tmp_path):
    assert train(tmp_path, "full") == 0
    assert train(tmp_path, "cut", "train.halt_after=768") == 3  # "killed" after a checkpoint
    cut = tmp_path / "cut"
    assert int(read_csv(cut / "train.csv")[-1]["samples"]) == 768
    first = torch.load(cut / "checkpoint.pt", weights_only=True)["wall_s"]
    assert main(["train", "--resume", str(cut)]) == 0
    assert_same_run(tmp_path / "full", cut)
    # the run's wall-clock adds the sessions up (the bench reports it per run)
    second = torch.load(cut / "checkpoint.pt", weights_only=True)["wall_s"]
    assert 0 < first < second
    # each session of the run names the code that trained it, from where it began
    head = subprocess.run(["git", "-C", os.path.dirname(CONFIG), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    lines = sessions(str(cut))
    assert [s["samples"] for s in lines] == [0, 512]  # resumed from the 512 checkpoint
    assert {s["commit"] for s in lines} == {head} and len(head) == 40
    assert sessions(str(tmp_path / "full"))[0]["samples"] == 0


def test_code_version_names_the_commit_and_whether_tracked_files_differ(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (repo / "new.py").write_text("")  # untracked: not a change to the code that ran
    clean = code_version(str(repo))
    assert (clean["commit"], clean["dirty"]) == (head, False)
    (repo / "a.py").write_text("x = 2\n")
    assert code_version(str(repo))["dirty"] is True
    outside = tmp_path / "plain"
    outside.mkdir()
    assert (code_version(str(outside))["commit"], code_version(str(outside))["dirty"]) == \
        (None, None)
    run = tmp_path / "run"
    run.mkdir()
    record_session(str(run), 0, str(repo))
    record_session(str(run), 512, str(repo))
    record_session(str(run), 1024, str(outside))
    assert [s["samples"] for s in sessions(str(run))] == [0, 512, 1024]
    assert commits(str(run)) == [head + "+modified", "unknown"]
    assert commits(str(outside)) == []  # a run older than the record


def test_a_session_records_the_machines_arithmetic(tmp_path, monkeypatch):
    """The CPU, the vector instructions torch's kernels use and the variables that change
    them, where set: what a rerun on another machine must match to give the same run."""
    for name in ARITHMETIC_ENV:
        monkeypatch.delenv(name, raising=False)
    assert "arithmetic_env" not in machine()
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    line = record_session(str(tmp_path), 0)
    assert line == sessions(str(tmp_path))[0]
    assert line["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert line["arithmetic_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            assert f"model name\t: {line['cpu']}\n" in f.read()


def test_existing_run_is_not_overwritten(tmp_path, capsys):
    assert train(tmp_path, "a") == 0
    ckpt = tmp_path / "a" / "checkpoint.pt"
    before = ckpt.read_bytes()
    assert train(tmp_path, "a") == 2
    assert "already holds a run" in capsys.readouterr().err
    assert ckpt.read_bytes() == before


def test_a_run_being_trained_is_not_touched_by_a_second_process(tmp_path, capsys):
    """While a process holds a run directory's lock (as ``acegnn train`` does while it
    trains), neither a new run of the same name nor a resume starts, and the run's files
    are left as they were, checkpoint or none."""
    from acegnn.utils.runs import lock_run_dir, run_holder

    run = tmp_path / "a"
    held = lock_run_dir(str(run))  # a training before its first checkpoint
    (run / "config.yaml").write_text("the first process's\n")
    assert run_holder(str(run)).startswith(f"pid {os.getpid()} (since ")
    assert train(tmp_path, "a") == 2
    assert f"{run} is being trained by pid {os.getpid()}" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == "the first process's\n"
    held.close()
    assert run_holder(str(run)) is None
    assert train(tmp_path, "a") == 0  # released: trained (and released again)
    before = (run / "checkpoint.pt").read_bytes()
    held = lock_run_dir(str(run))
    assert main(["train", "--resume", str(run), "train.total_samples=2048"]) == 2
    assert "is being trained by pid" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == before
    held.close()


def test_unknown_key_lists_valid_keys(capsys):
    assert main(["train", CONFIG, "algo.learning_rate=0.1"]) == 2
    err = capsys.readouterr().err
    assert "learning_rate" in err and "algo.lr" in err and "train.batch_size" in err


def test_wrong_type_and_bad_names():
    with pytest.raises(ValueError, match="lr"):
        load_config(CONFIG, ["algo.lr=fast"])
    with pytest.raises(ValueError, match="unknown env.name"):
        load_config(CONFIG, ["env.name=starcraft3"])
    with pytest.raises(ValueError, match="algo.optimizer"):
        load_config(CONFIG, ["algo.optimizer=sgd9"])
    with pytest.raises(ValueError, match="not found"):
        load_config("no/such/file.yaml")


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path):
    from acegnn.utils.io import atomic_write, write_text

    path = str(tmp_path / "checkpoint.pt")
    torch.save({"samples": 1}, path)

    def crash(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half a checkpoi")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert torch.load(path) == {"samples": 1}
    atomic_write(path, lambda tmp: torch.save({"samples": 2}, tmp))
    assert torch.load(path) == {"samples": 2} and os.listdir(tmp_path) == ["checkpoint.pt"]
    write_text(str(tmp_path / "a.yaml"), "seed: 3\n")
    assert (tmp_path / "a.yaml").read_text() == "seed: 3\n"


def test_eval_rejects_a_bad_checkpoint(tmp_path, capsys):
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["eval", str(bad)]) == 2
    assert "cannot read the checkpoint" in capsys.readouterr().err


def test_a_wall_clock_limit_stops_after_a_round_and_resume_goes_on(tmp_path, capsys):
    assert train(tmp_path, "full", "train.total_samples=768") == 0
    capsys.readouterr()
    assert train(tmp_path, "timed", "train.total_samples=768",
                 "train.max_minutes=0.000001") == 0  # out of time at once
    timed = tmp_path / "timed"
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["samples"] == 256 == int(read_csv(timed / "train.csv")[-1]["samples"])
    assert torch.load(timed / "checkpoint.pt", weights_only=True)["samples"] == 256
    assert main(["train", "--resume", str(timed), "train.max_minutes=0"]) == 0
    assert_same_run(tmp_path / "full", timed)
    with pytest.raises(ValueError, match="train.max_minutes must be >= 0"):
        load_config(CONFIG, ["train.max_minutes=-1"])


def test_raising_the_budget_on_resume_continues_exactly(tmp_path):
    assert train(tmp_path, "long", "train.total_samples=2048") == 0
    assert train(tmp_path, "short") == 0  # 1536 samples, a smaller replay buffer
    short = tmp_path / "short"
    assert main(["train", "--resume", str(short), "train.total_samples=2048"]) == 0
    assert_same_run(tmp_path / "long", short)
    assert load_config(str(short / "config.yaml")).train.total_samples == 2048


def test_raising_the_budget_of_a_run_whose_buffer_filled_up_is_refused(tmp_path, capsys):
    # 1400 samples asked, 1536 collected (rounds of 256): the 1408-row buffer wrapped
    assert train(tmp_path, "full", "train.total_samples=1400") == 0
    run = tmp_path / "full"
    before = (run / "checkpoint.pt").read_bytes()
    assert main(["train", "--resume", str(run), "train.total_samples=2048"]) == 2
    err = capsys.readouterr().err
    assert "capacity 1408 differs from 2056" in err and "Start a new run" in err
    assert (run / "checkpoint.pt").read_bytes() == before
    assert load_config(str(run / "config.yaml")).train.total_samples == 1400


def test_resuming_a_finished_run_reports_no_rate(tmp_path, capsys):
    assert train(tmp_path, "a") == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["env_steps_per_s"] > 0
    assert main(["train", "--resume", str(tmp_path / "a")]) == 0  # nothing left to train
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["samples"] == first["samples"]
    assert again["env_steps_per_s"] is None  # not 0 steps/s averaged into a benchmark


def test_first_success_is_kept_beside_the_final_checkpoint(tmp_path, monkeypatch):
    from acegnn.algos.trainer import Trainer

    real = Trainer.evaluate

    def succeeds_from_1024(self):  # stands in for a policy that learned: 100% at 1024
        return dataclasses.replace(real(self), success_rate=float(self.samples >= 1024))

    monkeypatch.setattr(Trainer, "evaluate", succeeds_from_1024)
    assert train(tmp_path, "a") == 0  # stop_on_success=false: trains on to 1536
    run = tmp_path / "a"
    first = torch.load(run / "success.pt", weights_only=True)
    final = torch.load(run / "checkpoint.pt", weights_only=True)
    assert (first["samples"], first["samples_to_success"]) == (1024, 1024)
    assert (final["samples"], final["samples_to_success"]) == (1536, 1024)
    assert 0 < first["wall_to_success"] == final["wall_to_success"] <= final["wall_s"]
    assert main(["eval", str(run / "success.pt"), "--episodes", "2"]) == 0
    # a run that stopped at success (before success.pt existed) writes it when resumed
    assert train(tmp_path, "b", "train.stop_on_success=true") == 0
    b = tmp_path / "b"
    assert torch.load(b / "checkpoint.pt", weights_only=True)["samples"] == 1024
    os.remove(b / "success.pt")
    assert main(["train", "--resume", str(b), "train.stop_on_success=false"]) == 0
    again = torch.load(b / "success.pt", weights_only=True)
    assert again["samples"] == 1024
    for k, v in first["learner"]["net"].items():
        assert torch.equal(v, again["learner"]["net"][k]), k


def test_resume_of_a_run_older_than_a_config_key(tmp_path):
    assert train(tmp_path, "full") == 0
    assert train(tmp_path, "old", "train.halt_after=768") == 3
    ckpt = tmp_path / "old" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    del state["config"]["algo"]["lr_schedule"]  # as saved before the key existed
    torch.save(state, ckpt)
    assert main(["train", "--resume", str(tmp_path / "old")]) == 0
    assert_same_run(tmp_path / "full", tmp_path / "old")


def test_resume_with_a_changed_config_is_refused(tmp_path, capsys):
    assert train(tmp_path, "a", "train.halt_after=512") == 3
    assert main(["train", "--resume", str(tmp_path / "a"), "algo.lr=0.1"]) == 2
    assert "different config" in capsys.readouterr().err


def test_oracle_command(capsys):
    assert main(["oracle", "--grid", "5"]) == 0
    out = capsys.readouterr().out
    assert '"capture_within_10": 1.0' in out and '"num_starts": 848' in out


def test_component_checks_at_load_time(tmp_path):
    with pytest.raises(ValueError, match="model.pool"):
        load_config(CONFIG, ["model.pool=median"])
    with pytest.raises(ValueError, match="env.grid_size"):
        load_config(CONFIG, ["env.grid_size=2"])
    with pytest.raises(ValueError, match="train.eval_every"):
        load_config(CONFIG, ["train.eval_every=-1"])
    assert not list(tmp_path.iterdir())


BASELINES = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5_baselines.yaml")


@pytest.mark.parametrize("method", ["iql", "vdn", "qmix", "qtran"])
def test_baseline_smoke_run(tmp_path, method):
    args = [a for a in TINY if not a.startswith("model.hidden")]
    assert main(["train", BASELINES, *args, "model.hidden=16", f"algo.name={method}",
                 f"run.dir={tmp_path}", f"run.name={method}"]) == 0
    rows = read_csv(tmp_path / method / "train.csv")
    assert rows[-1]["td_loss"] != "" and len(read_csv(tmp_path / method / "eval.csv")) == 3


def test_baselines_have_no_graph_model_keys(tmp_path, capsys):
    for key in ("model.conv=gatv2", "model.pool=max", "model.passive=false"):
        with pytest.raises(ValueError, match="valid keys: .*model.hidden, model.layers, model.init"):
            load_config(BASELINES, ["algo.name=vdn", key])
    assert load_config(CONFIG, ["model.conv=gatv2"]).model.conv == "gatv2"
    assert main(["train", BASELINES, "model.pool=sum", f"run.dir={tmp_path}"]) == 2
    assert "pool" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_exact_evaluation_is_logged_and_changes_nothing(tmp_path, capsys):
    assert train(tmp_path, "plain") == 0
    # halted and resumed, with the exact evaluation switched on only when resumed
    assert train(tmp_path, "exact", "train.halt_after=768") == 3
    assert main(["train", "--resume", str(tmp_path / "exact"), "train.exact_eval_every=1024"]) == 0
    capsys.readouterr()
    exact = tmp_path / "exact"
    assert read_csv(exact / "train.csv") == read_csv(tmp_path / "plain" / "train.csv")
    rows, plain = read_csv(exact / "eval.csv"), read_csv(tmp_path / "plain" / "eval.csv")
    assert [r["samples"] for r in rows] == [r["samples"] for r in plain]
    for r, p in zip(rows, plain):
        assert {k: r[k] for k in p} == p
    # only the evaluation at 1024 crossed a multiple of 1024 (evaluations every 512)
    assert [r["samples"] for r in rows if r["exact_steps_gap"]] == ["1024"]
    ours = {k: float(v) for k, v in rows[1].items() if k.startswith("exact_")}
    assert set(ours) == {"exact_success_rate", "exact_worst_success", "exact_mean_steps",
                         "exact_oracle_steps", "exact_steps_gap"}
    assert ours["exact_oracle_steps"] == pytest.approx(5.5358, abs=1e-3)
    # the final policy, evaluated by `acegnn eval` the same way
    assert main(["eval", str(exact), "--episodes", "4"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    again = tmp_path / "again"
    assert train(tmp_path, "again", "train.exact_eval_every=1536") == 0
    last = read_csv(again / "eval.csv")[-1]
    assert last["samples"] == "1536"
    assert float(last["exact_steps_gap"]) == pytest.approx(out["exact_steps_gap"], abs=1e-6)


def test_exact_evaluation_needs_a_task_that_has_one(tmp_path):
    from acegnn.algos.trainer import TrainConfig, Trainer

    with pytest.raises(ValueError, match="train.exact_eval_every: object has no exact"):
        Trainer(object(), None, TrainConfig(exact_eval_every=1024), 0, str(tmp_path))
    with pytest.raises(ValueError, match="train.exact_eval_every must be >= 0"):
        TrainConfig(exact_eval_every=-1)


def test_config_prints_the_resolved_config_with_each_keys_comment(capsys):
    import yaml

    smax = os.path.join(os.path.dirname(CONFIG), "smax_5m_vs_6m.yaml")
    assert main(["config", smax, "env.scenario=3m", "model.conv_kwargs.heads=2",
                 "model.conv=gatv2"]) == 0
    text = capsys.readouterr().out
    assert yaml.safe_load(text) == json.loads(json.dumps(dataclasses.asdict(load_config(
        smax, ["env.scenario=3m", "model.conv_kwargs.heads=2", "model.conv=gatv2"]))))
    assert "  scenario: 3m  # Map name: one of acegnn.envs.smac.smax.SCENARIOS" in text
    assert "  intermediate_discount: true  # Discount between SE-states of one step as in " \
           "Eq. 1 (False: no discount there)." in text
    assert "  conv_kwargs:  # Arguments of the message-passing step" in text
    assert main(["config", smax, "env.scenario=2c_vs_64zg"]) == 2


def test_compiled_kernels_train_as_the_plain_ones(tmp_path, monkeypatch):
    """``train.compile=true`` (ACE's candidates valued by compiled kernels without
    autograd) logs what the plain run logs, to float rounding."""
    from acegnn.nn import value_head

    monkeypatch.setattr(value_head, "_COMPILED", {})
    assert train(tmp_path, "plain") == 0
    assert not value_head._COMPILED
    assert train(tmp_path, "compiled", "train.compile=true") == 0
    assert set(value_head._COMPILED) == {value_head.gathered_pre, value_head.pooled_values,
                                         value_head.dense_pool_stats}  # layers 3, one size
    assert_same_logs_to_rounding(tmp_path / "plain", tmp_path / "compiled")


def assert_same_logs_to_rounding(a, b):
    for name in ("train.csv", "eval.csv"):
        ra_rows, rb_rows = read_csv(a / name), read_csv(b / name)
        assert [r.keys() for r in ra_rows] == [r.keys() for r in rb_rows]
        for ra, rb in zip(ra_rows, rb_rows):
            for k in ra:
                if k != "zero_weights":
                    assert float(ra[k] or "nan") == pytest.approx(float(rb[k] or "nan"), rel=1e-4,
                                                                   abs=1e-6, nan_ok=True), (name, k)


def test_the_compiled_optimizer_trains_as_the_eager_one(tmp_path, monkeypatch):
    """``train.compile_optimizer=true`` steps the optimiser through ``torch.compile``
    and logs what the eager run logs, to float rounding."""
    from acegnn.algos.base import LearnerBase

    compiled = []
    real = LearnerBase.compile_optimizer
    monkeypatch.setattr(LearnerBase, "compile_optimizer",
                        lambda self: compiled.append(self) or real(self))
    assert train(tmp_path, "plain") == 0
    assert train(tmp_path, "compiled", "train.compile_optimizer=true") == 0
    assert len(compiled) == 1 and compiled[0]._compiled_step is not None
    assert_same_logs_to_rounding(tmp_path / "plain", tmp_path / "compiled")
    # cut after a checkpoint and resumed, compiled throughout or switched on at the resume
    for name, before, after in (("both", "true", "true"), ("switched", "false", "true")):
        assert train(tmp_path, name, "train.halt_after=768",
                     f"train.compile_optimizer={before}") == 3
        assert main(["train", "--resume", str(tmp_path / name),
                     f"train.compile_optimizer={after}"]) == 0
        assert_same_logs_to_rounding(tmp_path / "plain", tmp_path / name)
    assert len(compiled) == 4


def test_compile_needs_ace_value_heads(tmp_path, capsys):
    args = [a for a in TINY if not a.startswith("model.hidden")]
    assert main(["train", BASELINES, *args, "algo.name=qmix", "train.compile=true",
                 f"run.dir={tmp_path}", "run.name=q"]) == 2
    assert "train.compile: qmix has no compiled kernels" in capsys.readouterr().err


@pytest.mark.parametrize("flush", [True, False])
def test_denormals_are_flushed_while_training_only(tmp_path, monkeypatch, flush):
    calls = []
    real = torch.set_flush_denormal
    monkeypatch.setattr(torch, "set_flush_denormal", lambda on: calls.append(on) or real(on))
    assert train(tmp_path, "a", f"train.flush_denormal={str(flush).lower()}") == 0
    assert calls == ([True, False] if flush else [])


@pytest.mark.parametrize("keep", [True, False])
def test_the_heap_is_kept_while_training_if_asked(tmp_path, monkeypatch, keep):
    import acegnn.algos.trainer as trainer

    calls = []
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: calls.append(1))
    assert train(tmp_path, "a", f"train.keep_heap={str(keep).lower()}") == 0
    assert calls == ([1] if keep else [])


# Collection overlapped with learning (train.overlap) -------------------------------------
def test_overlap_collects_each_round_with_the_network_before_the_last_updates(tmp_path,
                                                                              monkeypatch):
    """Round k + 1 is collected, during round k's updates, by a copy of the network as it
    was before them; evaluations use the learner itself."""
    from acegnn.algos.trainer import Trainer
    from acegnn.config import load_config
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY + ["train.overlap=true"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    loop = Trainer(task, learner, cfg.train, cfg.seed, str(tmp_path))

    def flat(net):
        return torch.cat([p.detach().flatten() for p in net.parameters()]).clone()

    starts, acts = [], []  # the learner's weights as each round's updates begin; act calls
    learn = loop.learn
    monkeypatch.setattr(loop, "learn", lambda: (starts.append(flat(learner.net)), learn())[1])
    act = type(learner).act

    def recording_act(self, graphs, epsilon=0.0, generator=None):
        acts.append((self is learner, len(starts), flat(self.net), epsilon))
        return act(self, graphs, epsilon, generator)

    monkeypatch.setattr(type(learner), "act", recording_act)
    loop.train()
    rounds = len(starts)
    assert rounds >= 4 and loop.updates == 2 * rounds
    ahead = [(k, w) for own, k, w, eps in acts if not own]
    assert {k for k, _ in ahead} == set(range(1, rounds + 1))  # one round during each updates
    for k, w in ahead:
        assert torch.equal(w, starts[k - 1]), k
    assert not torch.equal(starts[0], starts[-1])  # (the weights did change)
    first = [(k, eps) for own, k, _, eps in acts if own and eps > 0]
    assert first and {k for k, _ in first} == {0}  # the learner collects the first round only
    greedy = [(k, w) for own, k, w, eps in acts if own and eps == 0]
    assert greedy and all(k >= 1 for k, _ in greedy)  # evaluations, after updates: the learner
    assert not any(not own and eps == 0 for own, _, _, eps in acts)  # (the copy only explores)
    assert loop.samples == 256 * (rounds + 1)  # the last round collected is not learned from


def test_overlap_in_a_thread_trains_as_the_same_schedule_without_one(tmp_path, monkeypatch):
    from acegnn.algos.trainer import Trainer

    assert train(tmp_path, "thread", "train.overlap=true") == 0
    assert train(tmp_path, "plain") == 0
    monkeypatch.setattr(Trainer, "_ahead_in_thread", False)
    assert train(tmp_path, "inline", "train.overlap=true") == 0
    assert_same_run(tmp_path / "thread", tmp_path / "inline")
    # the collecting policy's lag changes what is learned
    a = torch.load(tmp_path / "thread" / "checkpoint.pt", weights_only=True)["learner"]["net"]
    b = torch.load(tmp_path / "plain" / "checkpoint.pt", weights_only=True)["learner"]["net"]
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_an_overlapped_run_resumes_exactly(tmp_path):
    assert train(tmp_path, "full", "train.overlap=true") == 0
    assert train(tmp_path, "cut", "train.overlap=true", "train.halt_after=768") == 3
    assert main(["train", "--resume", str(tmp_path / "cut")]) == 0
    assert_same_run(tmp_path / "full", tmp_path / "cut")


def test_overlap_is_refused_by_the_on_policy_loop(tmp_path, capsys):
    ppo = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5_ppo.yaml")
    assert main(["train", ppo, "train.overlap=true", "train.progress=false",
                 f"run.dir={tmp_path}", "run.name=p"]) == 2
    assert "train.overlap is not read by the on-policy loop of ACEPPO" in capsys.readouterr().err


@pytest.mark.parametrize("nstep", [1, 3])
def test_overlap_in_a_thread_matches_the_schedule_without_one_with_n_step_returns(
        tmp_path, monkeypatch, nstep):
    """The held steps pass through the n-step window as they would have at once."""
    from acegnn.algos.trainer import Trainer

    extra = ["train.overlap=true", f"algo.nstep={nstep}", "algo.intermediate_discount=false",
             "train.total_samples=1024"]
    assert train(tmp_path, "thread", *extra) == 0
    monkeypatch.setattr(Trainer, "_ahead_in_thread", False)
    assert train(tmp_path, "inline", *extra) == 0
    assert_same_run(tmp_path / "thread", tmp_path / "inline")


def test_a_failed_update_stops_the_round_collected_ahead(tmp_path, monkeypatch):
    """The training thread raising (a failed update, Ctrl-C) stops the thread collecting
    ahead at its next step; its steps are dropped. The copy that collects values its
    candidates without the compiled kernels, which stay the training thread's."""
    import threading

    from acegnn.algos.trainer import Trainer
    from acegnn.config import load_config
    from acegnn.nn.value_head import ValueHead
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY + ["train.overlap=true", "train.updates_per_collect=50"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    loop = Trainer(task, learner, cfg.train, cfg.seed, str(tmp_path))
    learner.use_compiled(True)  # (flags only: no kernel is called below)
    calls, steps = [], []
    update, explore = loop.update_once, loop._explore
    collecting = threading.Event()

    def failing_update():
        calls.append(1)
        if len(calls) == 3:
            assert collecting.wait(60)  # the thread has taken a step of the next round
            raise RuntimeError("update failed")
        return update()

    def held_explore(graphs):  # the thread's second step waits for the training thread to fail
        if len(steps) == 1:
            collecting.set()
            assert loop._abandon.wait(60)
        try:
            out = explore(graphs)
        except BaseException as e:
            steps.append(type(e).__name__)
            raise
        steps.append("step")
        return out

    monkeypatch.setattr(loop, "update_once", failing_update)
    monkeypatch.setattr(learner, "use_compiled", lambda on=True: 1)
    for m in learner.net.modules():
        if isinstance(m, ValueHead):
            m.compiled = False  # the first round is collected by the learner, eagerly
    loop.collect()
    for m in learner.net.modules():
        if isinstance(m, ValueHead):
            m.compiled = True
    before = len(loop.buffer)
    monkeypatch.setattr(loop, "_explore", held_explore)
    with pytest.raises(RuntimeError, match="update failed"):
        loop.learn()
    assert steps == ["step", "_Abandoned"]  # the step after the failure was not taken
    assert not any(t.name == "acegnn-collect-ahead" for t in threading.enumerate())
    assert len(loop.buffer) == before and loop._held is None and loop._ahead is None
    assert not loop._abandon.is_set() and loop._acting is learner
    heads = [m for m in loop._actor.net.modules() if isinstance(m, ValueHead)]
    assert heads and not any(m.compiled for m in heads)
    assert all(m.compiled for m in learner.net.modules() if isinstance(m, ValueHead))


def test_a_teacher_plays_the_episodes_it_begins(tmp_path):
    """In the teacher's rounds the episodes that begin are the teacher's; an episode
    stays with the policy that began it, also into the next round."""
    from acegnn.algos.trainer import Trainer
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY)
    task = make_task(cfg)
    loop = Trainer(task, make_learner(cfg, task), cfg.train, cfg.seed, str(tmp_path))
    calls = []

    class Fixed:  # a policy that plays one action id everywhere
        def __init__(self, name, action):
            self.name, self.action = name, action

        def act(self, graphs, epsilon=0.0, generator=None):
            calls.append(self.name)
            return torch.full((graphs.num_graphs * task.n_agents,), self.action)

        def state_dict(self):
            return {"action": self.action}

    loop.set_teacher(Fixed("teacher", 1))
    loop._acting = Fixed("learner", 2)
    graphs = task.graphs(task.observe())
    n = task.num_envs  # 8 environments of 2 spiders
    loop._teaching = True
    loop.collector.ep_length = torch.tensor([0, 3, 0, 5, 0, 0, 2, 1])
    got = loop._act_with_teacher(graphs).view(n, -1)
    owner = torch.tensor([True, False, True, False, True, True, False, False])
    assert torch.equal(loop._owner, owner) and calls == ["learner", "teacher"]
    assert torch.equal(got, torch.where(owner.view(n, 1), 1, 2).expand(n, 2))
    loop._teaching = False  # a learner's round: env 2's new episode is the learner's
    loop.collector.ep_length = torch.tensor([4, 4, 0, 6, 1, 1, 3, 2])
    got = loop._act_with_teacher(graphs).view(n, -1)
    owner[2] = False
    assert torch.equal(got, torch.where(owner.view(n, 1), 1, 2).expand(n, 2))
    calls.clear()
    loop._owner[:] = True  # the teacher's episodes only: the learner is not asked
    loop.collector.ep_length = torch.ones(n, dtype=torch.long)
    loop._act_with_teacher(graphs)
    assert calls == ["teacher"]
    assert loop._steps == [4 + 3 + 8, 3 * n]


def test_a_teacher_collects_and_is_not_trained(tmp_path, monkeypatch):
    from acegnn.algos.trainer import Trainer
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY + ["train.teacher_share=0.5"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    teacher = make_learner(load_config(CONFIG, TINY + ["seed=5"]), task)
    before = {k: v.clone() for k, v in teacher.net.state_dict().items()}
    assert any(not torch.equal(v, learner.net.state_dict()[k]) for k, v in before.items())
    loop = Trainer(task, learner, cfg.train, cfg.seed, str(tmp_path))
    loop.set_teacher(teacher)
    acts = []  # (who, the round being collected, epsilon)
    act = type(learner).act

    def recording_act(self, graphs, epsilon=0.0, generator=None):
        acts.append(("teacher" if self is teacher else "learner", loop.rounds, epsilon))
        return act(self, graphs, epsilon, generator)

    monkeypatch.setattr(type(learner), "act", recording_act)
    loop.train()
    assert loop.rounds == 6  # 1536 samples, 256 a round
    teacher_rounds = {k for who, k, eps in acts if who == "teacher" and eps > 0}
    assert {1, 3, 5} <= teacher_rounds and 0 not in teacher_rounds
    assert {0, 2, 4} <= {k for who, k, eps in acts if who == "learner" and eps > 0}
    assert {who for who, _, eps in acts if eps == 0} == {"learner"}  # the evaluations
    assert all(torch.equal(v, before[k]) for k, v in teacher.net.state_dict().items())
    rows = read_csv(tmp_path / "train.csv")
    assert [r["teacher"] for r in rows] == ["0.0", "1.0"] * 3
    shares = [float(r["teacher_steps"]) for r in rows]
    assert shares[0] == 0 and all(x > 0 for x in shares[1::2])
    assert any(0 < x < 1 for x in shares[2::2])  # teacher's episodes ran on into these rounds
    assert loop.samples == 256 * 6 and len(loop.buffer) == loop.samples


@pytest.mark.parametrize("share, rounds", [(1 / 3, [2, 5, 8]), (1.0, list(range(9))),
                                           (0.0, []), (0.75, [1, 2, 3, 5, 6, 7])])
def test_the_teacher_rounds_are_spread_evenly(tmp_path, share, rounds):
    from acegnn.algos.trainer import Trainer
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY + [f"train.teacher_share={share}"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    loop = Trainer(task, learner, cfg.train, cfg.seed, str(tmp_path))
    assert not any(loop.teacher_round(k) for k in range(9))  # no teacher, no teacher rounds
    loop.set_teacher(learner)
    assert [k for k in range(9) if loop.teacher_round(k)] == rounds


def test_a_run_with_a_teacher_resumes_exactly_and_refuses_bad_teachers(tmp_path, capsys):
    assert train(tmp_path, "teacher") == 0
    teacher = str(tmp_path / "teacher")
    third = [f"train.teacher={teacher}", "train.teacher_share=0.34"]  # rounds 2 and 5
    assert train(tmp_path, "student", *third) == 0
    assert [r["teacher"] for r in read_csv(tmp_path / "student" / "train.csv")] == \
        ["0.0", "0.0", "1.0"] * 2
    # halted after 3 rounds, from the checkpoint of round 2: the schedule and the
    # episodes in progress go on as they were
    assert train(tmp_path, "cut", *third, "train.halt_after=768") == 3
    assert torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)["rounds"] == 2
    assert main(["train", "--resume", str(tmp_path / "cut")]) == 0
    assert_same_run(tmp_path / "student", tmp_path / "cut")
    # a teacher that trained on is not the one the run began with
    assert train(tmp_path, "cut2", *third, "train.halt_after=768") == 3
    assert main(["train", "--resume", teacher, "train.total_samples=2048"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "cut2")]) == 2
    assert "is not the teacher this run began with" in capsys.readouterr().err
    assert train(tmp_path, "nowhere", f"train.teacher={tmp_path / 'missing'}") == 2
    assert f"train.teacher={tmp_path / 'missing'}" in capsys.readouterr().err
    # other node features: other graphs
    assert train(tmp_path, "onehot", "env.features=onehot", f"train.teacher={teacher}") == 2
    assert "has another graph schema" in capsys.readouterr().err
    assert train(tmp_path, "ahead", f"train.teacher={teacher}", "train.overlap=true") == 2
    assert "train.teacher: rounds collected ahead" in capsys.readouterr().err
    ppo = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5_ppo.yaml")
    assert main(["train", ppo, f"train.teacher={teacher}", "train.progress=false",
                 f"run.dir={tmp_path}", "run.name=p"]) == 2
    assert "train.teacher is not read by the on-policy loop" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"train.teacher_share must be in \[0, 1\]"):
        load_config(CONFIG, ["train.teacher_share=1.5"])


@pytest.mark.parametrize("fault", ["act", "on_policy"])
def test_a_teacher_that_cannot_explore_on_the_task_is_refused(tmp_path, monkeypatch, fault):
    """A network sized for another task (a baseline's) fails its trial decision; an
    on-policy learner (ACE-PPO) does not explore epsilon-greedily."""
    import acegnn.run as run
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, TINY)
    task = make_task(cfg)
    teacher = make_learner(cfg, task)
    if fault == "act":
        def act(graphs, epsilon=0.0, generator=None):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x40 and 56x16)")

        teacher.act = act
        message = "its ace_dqn policy cannot act on this task: mat1 and mat2 shapes"
    else:
        teacher.loop = "on_policy"
        message = "ace_dqn learns on-policy and does not explore epsilon-greedily"
    own = make_task(cfg)
    monkeypatch.setattr(run, "restore", lambda path: (cfg, {}, own, teacher))
    with pytest.raises(ValueError, match=f"train.teacher=RUN: {message}"):
        run.load_teacher("RUN", task)
