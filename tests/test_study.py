"""Studies: the study file's checks, the report against hand computations, and the smoke
study on a local Ray (trained, skipped when finished, a failed trial resumed)."""
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from acegnn.algos.checkpoint import CHECKPOINT
from acegnn.cli import check_study, main
from acegnn.config import load_config
from acegnn.study import finished, load_study, study_records, train_trial, write_report
from acegnn.study import trial as trial_module
from acegnn.study.spec import catalogue
from acegnn.study.trial import DONE, LOG, progress_line, reached, train_command
from acegnn.utils import runs

ROOT = os.path.join(os.path.dirname(__file__), "..")
SMOKE = os.path.join(ROOT, "configs", "studies", "smoke.yaml")
TINY = """\
env: spiders_fly
metric: success_rate
total_samples: 2048
seeds: [0]
variants:
  ace: {config: configs/spiders_fly_5x5.yaml}
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, error", [
    (TINY + "seed: 3\n", "unknown key 'seed' (valid keys: env, metric,"),
    (TINY.replace("seeds: [0]\n", ""), "seeds is missing"),
    (TINY.replace("seeds: [0]", "seeds: [0, 0]"), "seeds must be a non-empty list of distinct"),
    (TINY.replace("seeds: [0]", "seeds: 3"), "(got 3)"),
    (TINY.replace("2048", "0"), "total_samples must be a positive integer (got 0)"),
    (TINY.replace("{config: configs/spiders_fly_5x5.yaml}", "{label: ACE}"),
     "variants.ace needs a config"),
    (TINY.replace("spiders_fly_5x5.yaml}", "nope.yaml}"),
     "variants.ace.config: no file 'configs/nope.yaml'"),
    (TINY.replace("yaml}", "yaml, overides: [a=1]}"), "unknown key variants.ace.'overides'"),
    (TINY.replace("yaml}", "yaml, overrides: [seed=3]}"),
     "variants.ace.overrides: 'seed=3' sets a key the study sets"),
    (TINY + "overrides: [model.hidden]\n", "overrides must be a list of key=value strings"),
    (TINY + "resources: {cpus: 0}\n", "resources.cpus must be a number > 0 (got 0)"),
    (TINY + "resources: {cpu: 1}\n", "unknown key resources.'cpu'"),
    (TINY + "resources: {gpus: -0.5}\n", "resources.gpus must be a number >= 0 (got -0.5)"),
    (TINY.replace("seeds: [0]", "seeds: [[0]]"),
     "seeds must be a non-empty list of distinct integers >= 0 (got [[0]])"),
    (TINY + "scenarios: 3m\n", "scenarios must be a non-empty list"),
    (TINY.replace("variants:\n  ace: {config: configs/spiders_fly_5x5.yaml}", "variants: [ace]"),
     "no variants of env 'spiders_fly' (it has: smax, grf)"),
    (TINY.replace("spiders_fly\n", "smax\n", 1).replace(
        "variants:\n  ace: {config: configs/spiders_fly_5x5.yaml}", "variants: [ace, ace_wo_ai]"),
     "has no smax variant 'ace_wo_ai' (its smax variants: ace, ace_official,"),
    (TINY.replace("spiders_fly\n", "smax\n", 1).replace(
        "variants:\n  ace: {config: configs/spiders_fly_5x5.yaml}", "variants: [ace, ace]"),
     "variants must be distinct variant names"),
    (TINY + "scenarios: [[3m]]\n", "scenarios must be a non-empty list of distinct scenario "
                                    "names (got [['3m']])"),
    (TINY + "mode: best\n", "mode must be max or min"),
    ("- a\n", "the file must be a mapping of keys"),
])
def test_study_file_errors_name_the_key_and_value(tmp_path, text, error):
    with pytest.raises(ValueError, match="s.yaml: ") as e:
        load_study(write(tmp_path, text))
    assert error in str(e.value)


def test_two_trials_may_not_share_a_run_directory(tmp_path):
    text = TINY.replace("  ace: {config: configs/spiders_fly_5x5.yaml}\n",
                        "  a: {config: configs/spiders_fly_5x5.yaml}\n"
                        "  a_b: {config: configs/spiders_fly_5x5.yaml}\n")
    with pytest.raises(ValueError) as e:
        load_study(write(tmp_path, text + "scenarios: [b_c, c]\n"))
    assert str(e.value) == (f"{tmp_path / 's.yaml'}: two trials share the run directory "
                            "a_b_c_seed0: (variant a, scenario b_c, seed 0) and (variant a_b, "
                            "scenario c, seed 0); rename a variant or a scenario")
    assert len(load_study(write(tmp_path, text + "scenarios: [b, c]\n")).trials) == 4


def test_a_variant_of_another_environment_fails_before_training(tmp_path):
    path = write(tmp_path, TINY.replace("env: spiders_fly", "env: smax"))
    with pytest.raises(ValueError, match=r"s.yaml: variant ace: .*spiders_fly_5x5.yaml trains "
                                         r"env.name spiders_fly, and the study's env is smax"):
        check_study(load_study(path), backend=False)


def test_a_wrong_config_key_fails_before_training(tmp_path, capsys):
    path = write(tmp_path, TINY + "scenarios: [3m]\n")  # spiders_fly has no env.scenario
    with pytest.raises(ValueError, match="variant ace, scenario 3m: .*scenario"):
        check_study(load_study(path))
    assert main(["study", path, "--dir", str(tmp_path / "study")]) == 2
    assert "s.yaml: variant ace, scenario 3m: " in capsys.readouterr().err
    assert not (tmp_path / "study").exists()
    assert main(["study", path, "--report", "--dir", str(tmp_path / "study")]) == 2
    assert "no trial in" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(p for p in glob.glob(os.path.join(
    ROOT, "configs", "studies", "*.yaml")) if os.path.basename(p) != "variants.yaml"),
                         ids=os.path.basename)
def test_every_example_study_loads_with_its_configs(path):
    study = load_study(path)
    check_study(study, backend=False)
    names = [t.name for t in study.trials]
    assert len(names) == len(set(names)) == (len(study.variants) * len(study.scenarios)
                                             * len(study.seeds))
    if os.path.basename(path) == "smoke.yaml":
        assert names == ["ace_seed0", "ace_wo_ia_seed0"] and study.total_samples == 2048


def test_every_named_variant_loads_with_its_overrides():
    """Each variant of the catalogue is a valid config of its environment, with the
    algorithm its name says (a wrong file or a misspelt key fails here, not hours into a
    study); a study that names variants gets the catalogue's."""
    algo = {"qmix": "qmix", "ace_ppo": "ace_ppo", "ace_ctde": "ace_ctde"}
    for env in ("smax", "grf"):
        for name, variant in catalogue(env).items():
            cfg = load_config(variant.config, list(variant.overrides), backend=False)
            named = next((a for p, a in algo.items() if name == p or name.startswith(p + "_")),
                         "ace_dqn")  # qmix_cds: QMIX
            assert cfg.env.name == env and cfg.algo.name == named, name
    grf = catalogue("grf")
    probe, wide = grf["ace_official_probe"], grf["ace_official_probe_wide"]
    assert load_config(wide.config, list(wide.overrides), backend=False) == load_config(
        probe.config, [*probe.overrides, "model.passive_width=2432"], backend=False)
    # the recommended football config is the variant whose five seeds made it so
    assert load_config(os.path.join(ROOT, "configs", "grf_3_vs_1_with_keeper_recommended.yaml"),
                       backend=False) == load_config(
        wide.config, [*wide.overrides, "algo.lr_decay_updates=8000"], backend=False)
    decay = grf["ace_official_probe_wide_decay8k"]
    assert load_config(decay.config, list(decay.overrides), backend=False) == load_config(
        wide.config, [*wide.overrides, "algo.lr_decay_updates=8000"], backend=False)
    # the 2s3z config is the variant its runs were trained as, on their map and budget
    layered = catalogue("smax")["ace_rec_layers2_cosine300k"]
    assert load_config(os.path.join(ROOT, "configs", "smax_2s3z_recommended.yaml"),
                       backend=False) == load_config(
        layered.config, [*layered.overrides, "env.scenario=2s3z", "train.total_samples=300000"],
        backend=False)
    ablations = load_study(os.path.join(ROOT, "configs", "studies", "smax_ablations.yaml"))
    assert ablations.variants["ace_wo_ia"] == catalogue("smax")["ace_wo_ia"]
    assert ablations.variants["ace_wo_ia"].overrides == ("model.passive=false",)


def test_trials_are_run_directories_with_their_commands(tmp_path):
    study = load_study(write(tmp_path, TINY.replace("spiders_fly\n", "smax\n")
                             .replace("spiders_fly_5x5.yaml", "smax_5m_vs_6m.yaml")
                             + "scenarios: [3m, 5m_vs_6m]\noverrides: [train.eval_every=99]\n"),
                       str(tmp_path / "study"))
    trial = study.trials[1]
    assert trial.run_dir == str(tmp_path / "study" / "ace_5m_vs_6m_seed0")
    new = train_command(trial, 500, study.overrides)
    assert new[:2] == ["train", os.path.abspath(os.path.join(ROOT, "configs",
                                                             "smax_5m_vs_6m.yaml"))]
    assert new[2:] == ["seed=0", "env.scenario=5m_vs_6m", "train.eval_every=99",
                       f"run.dir={tmp_path / 'study'}", "run.name=ace_5m_vs_6m_seed0",
                       "train.total_samples=500", "train.progress=false"]
    assert new == runs.train_args(trial.config, trial.run_dir, 500, study.overrides,
                                  trial.start)  # scripts/study.py's command
    os.makedirs(trial.run_dir)
    open(os.path.join(trial.run_dir, CHECKPOINT), "w").close()
    assert train_command(trial, 500, study.overrides) == [
        "train", "--resume", trial.run_dir, "train.total_samples=500", "train.progress=false",
        "train.eval_every=99"]
    assert not finished(trial, 500)
    with open(os.path.join(trial.run_dir, DONE), "w") as f:
        json.dump({"total_samples": 500, "samples": 512}, f)
    assert finished(trial, 500) and not finished(trial, 501)


def test_variant_overrides_reach_that_variants_trials_only(tmp_path, capsys):
    """``variant_overrides`` add to one variant's sessions, new and resumed, after the
    study's ``overrides`` (a switch another learner refuses, as QMIX refuses
    ``train.compile``); every trial is checked with its own before training."""
    text = ("env: smax\ntotal_samples: 500\nseeds: [0]\nvariants: [ace, qmix]\n"
            "overrides: [train.eval_every=99]\n"
            "variant_overrides: {ace: [train.compile=true]}\n")
    study = load_study(write(tmp_path, text), str(tmp_path / "study"))
    ace, qmix = study.trials
    assert ace.overrides == ("train.eval_every=99", "train.compile=true")
    assert qmix.overrides == ("train.eval_every=99",)
    assert train_command(ace, 500, ace.overrides)[3:5] == ["train.eval_every=99",
                                                            "train.compile=true"]
    os.makedirs(qmix.run_dir)
    open(os.path.join(qmix.run_dir, CHECKPOINT), "w").close()
    assert train_command(qmix, 500, qmix.overrides)[-1] == "train.eval_every=99"
    assert [o for _, _, o in study.configs()] == [
        ["seed=0", "train.eval_every=99", "train.compile=true"],
        ["seed=0", "train.eval_every=99"]]
    for bad, error in [("{qmx: [train.compile=true]}", "variant_overrides: no variant 'qmx' "
                                                       "in the study (its variants: ace, qmix)"),
                       ("[train.compile=true]", "variant_overrides must be a mapping"),
                       ("{ace: [seed=1]}", "variant_overrides.ace: 'seed=1' sets a key")]:
        with pytest.raises(ValueError, match=re.escape(error)):
            load_study(write(tmp_path, text.replace("{ace: [train.compile=true]}", bad)))
    bad = write(tmp_path, text.replace("{ace: [train.compile=true]}", "{qmix: [train.lr=1]}"))
    assert main(["study", bad, "--dir", str(tmp_path / "s2")]) == 2
    assert "s.yaml: variant qmix: " in capsys.readouterr().err
    assert not (tmp_path / "s2").exists()
    # the switch set for every variant: refused when the study is loaded, not hours in
    bad = write(tmp_path, text.replace("variant_overrides: {ace: [train.compile=true]}\n",
                                       "").replace("99]", "99, train.compile=true]"))
    assert main(["study", bad, "--dir", str(tmp_path / "s3")]) == 2
    assert ("s.yaml: variant qmix: invalid config: train.compile: qmix has no compiled "
            "kernels") in capsys.readouterr().err
    assert not (tmp_path / "s3").exists()


def test_trials_picks_trials_by_name_and_trains_those_only(tmp_path, capsys):
    """``--trials``: shell patterns over the trials' names, kept in the study's order;
    the others are left as they are (here: not trained, though unfinished), and the
    report covers the whole study. A pattern that matches nothing is refused, naming
    the trials."""
    text = TINY.replace("spiders_fly\n", "smax\n", 1).replace(
        "variants:\n  ace: {config: configs/spiders_fly_5x5.yaml}",
        "variants: [ace, qmix]").replace("seeds: [0]", "seeds: [0, 1]").replace(
        "metric: success_rate\n", "")
    path = write(tmp_path, text + "scenarios: [3m]\n")
    study = load_study(path, str(tmp_path / "study"))
    names = lambda s: [t.name for t in s.trials]  # noqa: E731
    assert names(study.only(["qmix_*"])) == ["qmix_3m_seed0", "qmix_3m_seed1"]
    assert names(study.only(["*seed1", "ace_3m_seed0"])) == [
        "ace_3m_seed0", "ace_3m_seed1", "qmix_3m_seed1"]
    assert len(study.trials) == 4  # the study itself is unchanged
    with pytest.raises(ValueError, match=re.escape(
            "--trials 'qmx_*' matches none of the study's trials (ace_3m_seed0, "
            "ace_3m_seed1, qmix_3m_seed0, qmix_3m_seed1)")):
        study.only(["ace_*", "qmx_*"])
    for trial in study.only(["*_seed1"]).trials:  # finished: nothing to train, no Ray
        os.makedirs(trial.run_dir)
        with open(os.path.join(trial.run_dir, DONE), "w") as f:
            json.dump({"total_samples": 2048, "samples": 2048}, f)
        pathlib.Path(trial.run_dir, "eval.csv").write_text("samples,win_rate\n2048,0.5\n")
    assert main(["study", path, "--dir", study.dir, "--trials", "*_seed1"]) == 0
    out = capsys.readouterr().out
    assert f"study s: 2 trials in {study.dir} (--trials: 2 of 4), 2 finished, 0 to train" in out
    assert "| 1 | 2,048 | 0.50 (0.50-0.50) |" in out  # the report of the seeds kept
    assert not os.path.exists(study.trials[0].run_dir)
    assert main(["study", path, "--dir", study.dir, "--trials", "nope"]) == 2
    assert "--trials 'nope' matches none" in capsys.readouterr().err


def test_only_a_run_that_reached_its_budget_or_success_is_finished(tmp_path):
    assert reached({"samples": 2048, "samples_to_success": None}, 2048, False)
    assert reached({"samples": 512, "samples_to_success": 512}, 2048, True)
    # stopped by train.max_minutes, with or without a success on the way
    assert not reached({"samples": 512, "samples_to_success": None}, 2048, True)
    assert not reached({"samples": 512, "samples_to_success": 256}, 2048, False)
    study = load_study(write(tmp_path, TINY), str(tmp_path / "study"))
    (trial,) = study.trials
    os.makedirs(trial.run_dir)
    for done, expected in (({"samples": 2048}, True), ({"samples": 1024}, False),
                           ({"samples": 1024, "samples_to_success": 1024}, True),
                           ({"samples": 1024, "samples_to_success": 1024,
                             "stop_on_success": False}, False)):
        with open(os.path.join(trial.run_dir, DONE), "w") as f:
            json.dump({"total_samples": 2048, **done}, f)
        assert finished(trial, 2048) is expected, done


REAL_POPEN = subprocess.Popen


def fake_child(summary, seen):
    """A ``subprocess.Popen`` for :func:`train_trial` whose child prints ``summary`` and
    exits 0 at once; ``seen`` gets Popen's keyword arguments."""
    def popen(cmd, **kwargs):
        seen.update(kwargs, cmd=cmd)
        return REAL_POPEN([sys.executable, "-c", f"print({json.dumps(json.dumps(summary))})"],
                    **kwargs)
    return popen


def test_a_trial_stopped_short_of_its_budget_is_not_finished(tmp_path, monkeypatch):
    """A session that ends with fewer samples than the budget (train.max_minutes) writes
    no study.json; the next run resumes it. The child runs in the study's cwd."""
    study = load_study(write(tmp_path, TINY), str(tmp_path / "study"))
    (trial,) = study.trials
    seen = {}
    monkeypatch.setattr(trial_module.subprocess, "Popen",
                        fake_child({"samples": 512, "samples_to_success": None}, seen))
    summary = train_trial(trial, study, lambda row: None, poll_s=0.05)
    assert summary["samples"] == 512 and seen["cwd"] == study.cwd == os.getcwd()
    assert not finished(trial, 2048) and not os.path.exists(os.path.join(trial.run_dir, DONE))
    assert "stopped at 512 of 2048 samples" in open(os.path.join(trial.run_dir, LOG)).read()
    monkeypatch.setattr(trial_module.subprocess, "Popen",
                        fake_child({"samples": 2048, "samples_to_success": None}, seen))
    train_trial(trial, study, lambda row: None, poll_s=0.05)
    assert finished(trial, 2048)


def test_a_trial_stopped_by_max_minutes_is_not_finished(tmp_path):
    """The real trainer, stopped by train.max_minutes after its first round."""
    study = load_study(write(tmp_path, TINY + "overrides: [model.hidden=8, "
                             "train.samples_per_collect=256, train.learning_starts=256, "
                             "train.updates_per_collect=1, train.batch_size=8, "
                             "train.eval_every=256, train.eval_episodes=2, "
                             "train.stop_on_success=false, train.max_minutes=0.00001]\n"),
                       str(tmp_path / "study"))
    (trial,) = study.trials
    summary = train_trial(trial, study, lambda row: None, poll_s=0.05)
    assert summary["samples"] == 256 and summary["stop_on_success"] is False
    assert not finished(trial, 2048) and os.path.exists(os.path.join(trial.run_dir, CHECKPOINT))
    assert train_command(trial, 2048, study.overrides)[1] == "--resume"


def test_a_trial_another_process_trains_is_left_alone(tmp_path):
    """A trial whose run directory another process is training (its lock held) fails
    at once, before anything of the run is removed."""
    study = load_study(write(tmp_path, TINY), str(tmp_path / "study"))
    trial = study.trials[0]
    held = runs.lock_run_dir(trial.run_dir)
    try:
        open(os.path.join(trial.run_dir, "train.csv"), "w").close()  # before its checkpoint
        with pytest.raises(RuntimeError, match=f"{trial.name}: .* is being trained by pid "):
            train_trial(trial, study, lambda row: None)
        assert os.path.exists(os.path.join(trial.run_dir, "train.csv"))
    finally:
        held.close()


def test_a_row_being_written_is_not_reported(tmp_path):
    path = tmp_path / "eval.csv"
    path.write_text("samples,win_rate\n256,0.5\n512,0.2")  # 512,0.25 half written
    assert trial_module.last_eval(str(path)) == {"samples": 256.0, "win_rate": 0.5}
    path.write_text("samples,win_rate\n256,0.5\n512,0.25\n")
    assert trial_module.last_eval(str(path)) == {"samples": 512.0, "win_rate": 0.25}
    path.write_text("samples,win")
    assert trial_module.last_eval(str(path)) is None


def test_progress_line_counts_trials_and_the_headline():
    study = load_study(SMOKE)
    line = progress_line(study, {"a": "done", "b": "running", "c": "pending", "d": "done"},
                         {"a": 0.5, "b": 0.25, "c": float("nan"), "d": 1.0})
    assert line == ("study smoke: 2 done, 1 running, 1 pending; success_rate best 1, "
                    "median 0.5 (3 of 4 trials evaluated)")


def fake_trial(study, variant, seed, curve, wall=None):
    """A trial's eval.csv (and study.json when ``wall``) written by hand."""
    (trial,) = [t for t in study.trials if (t.variant, t.seed) == (variant, seed)]
    os.makedirs(trial.run_dir)
    with open(os.path.join(trial.run_dir, "eval.csv"), "w") as f:
        f.write("samples,win_rate,mean_return\n"
                + "".join(f"{s},{w},0\n" for s, w in curve))
    if wall is not None:
        with open(os.path.join(trial.run_dir, DONE), "w") as f:
            json.dump({"total_samples": 3000, "samples": curve[-1][0], "wall_s": wall}, f)


def test_report_median_and_percentiles_over_seeds(tmp_path, capsys):
    study = load_study(write(tmp_path, """\
env: smax
total_samples: 3000
seeds: [0, 1, 2]
scenarios: [3m]
variants:
  ace: {config: configs/smax_5m_vs_6m.yaml, label: ACE}
  qmix: {config: configs/smax_5m_vs_6m_qmix.yaml, label: QMIX-SHARED}
"""), str(tmp_path / "study"))
    fake_trial(study, "ace", 0, [(1000, 0.1), (2000, 0.3), (3000, 0.3)], wall=300.0)
    fake_trial(study, "ace", 1, [(1100, 0.3), (2100, 0.9), (3100, 0.1)], wall=50.0)
    fake_trial(study, "ace", 2, [(1200, 0.9), (2200, 0.5)])  # running: 2 evaluations
    fake_trial(study, "qmix", 0, [(1000, 0.2)])
    assert len(study_records(study)) == 4
    text = write_report(study)
    # evaluation 1: 0.1, 0.3, 0.9 -> median 0.3, percentiles (linear) 0.2 and 0.6; samples
    # 1000, 1100, 1200 -> 1,100; evaluation 2: 0.3, 0.9, 0.5 -> 0.5 (0.4-0.7); the third
    # is cut (seed 2 has not reached it)
    assert "| ACE | 3m | 3 | 1 | 1,100 | 0.30 (0.20-0.60) |" in text
    assert "| ACE | 3m | 3 | 2 | 2,100 | 0.50 (0.40-0.70) |" in text
    assert "| ACE | 3m | 3 | 3 |" not in text
    assert "| QMIX-SHARED | 3m | 1 | 1 | 1,000 | 0.20 (0.20-0.20) |" in text
    # speed over the seeds with a wall-clock: 3000 / 300 = 10 and 3100 / 50 = 62 -> 36;
    # wall-clock 300 and 50 s -> 175 s = 0.05 h; 10M steps at 36 a second: 77.2 h
    assert "| ACE | 3m | 3 | 2,100 | 0.50 (0.40-0.70) | 36 | 0.05 h | 77.2 h (10M) |" in text
    assert (tmp_path / "study" / "report.md").read_text() == text
    assert (tmp_path / "study" / "curves.png").stat().st_size > 1000
    assert main(["study", study.path, "--report", "--dir", study.dir]) == 0
    assert capsys.readouterr().out == text


def test_football_is_reported_by_mean_and_sd(tmp_path):
    study = load_study(write(tmp_path, """\
env: grf
total_samples: 1000
seeds: [0, 1]
variants:
  ace: {config: configs/grf_3_vs_1_with_keeper.yaml}
"""), str(tmp_path / "study"))
    fake_trial(study, "ace", 0, [(1000, 0.2)])
    fake_trial(study, "ace", 1, [(1000, 0.6)])
    # mean 0.4, sd sqrt(0.08) = 0.283
    assert "| ace | - | 2 | 1 | 1,000 | 0.40 (+-0.28) |" in write_report(study)


def test_results_keep_finished_curves_and_report_trials_without_run_directories(tmp_path):
    results = tmp_path / "docs_runs"
    study = load_study(write(tmp_path, f"""\
env: smax
total_samples: 3000
seeds: [0, 1, 2]
scenarios: [3m]
variants:
  ace: {{config: configs/smax_5m_vs_6m.yaml, label: ACE}}
results: {results}
at: [1000, 3000]
window: 500
"""), str(tmp_path / "study"))
    fake_trial(study, "ace", 0, [(1000, 0.1), (3000, 0.3)], wall=300.0)  # finished: kept
    fake_trial(study, "ace", 1, [(1100, 0.5)])  # running: not kept yet
    results.mkdir()
    (results / "ace_3m_seed2.csv").write_text("samples,win_rate\n900,0.7\n3100,0.9\n")
    records = study_records(study)
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    assert (results / "ace_3m_seed0.csv").read_text() == \
        (tmp_path / "study" / "ace_3m_seed0" / "eval.csv").read_text()
    assert (results / "ace_3m_seed0.json").read_text() == \
        (tmp_path / "study" / "ace_3m_seed0" / DONE).read_text()
    assert not (results / "ace_3m_seed1.csv").exists()
    shutil.rmtree(tmp_path / "study")  # a new machine: only the kept files
    # the kept trial is not trained again (nor one of a smaller budget); seed 1 (lost) and
    # seed 2 (a curve kept without its summary) are
    seed0, seed1, seed2 = study.trials
    assert finished(seed0, 3000, str(results)) and finished(seed0, 2000, str(results))
    assert not finished(seed0, 3001, str(results)) and not finished(seed0, 3000)
    assert not finished(seed1, 3000, str(results)) and not finished(seed2, 3000, str(results))
    os.makedirs(seed0.run_dir)  # a run of that name resuming here: its own files decide
    open(os.path.join(seed0.run_dir, CHECKPOINT), "w").close()
    assert not finished(seed0, 3000, str(results))
    shutil.rmtree(seed0.run_dir)
    text = write_report(study)
    # seed 1 (unfinished, not kept) is gone; at 1000 (within 500): 0.1 and 0.7 -> median
    # 0.4, percentiles 0.25 and 0.55; at 3000: 0.3 and 0.9 -> 0.6 (0.45-0.75)
    assert "| ACE | 3m | 2 | 0.40 (0.25-0.55; 2) | 0.60 (0.45-0.75; 2) |" in text
    assert "win rate at 1,000, 3,000 steps, each seed's evaluations within 500 steps" in text


def test_a_kept_curve_is_not_replaced_by_a_shorter_run_of_the_same_name(tmp_path, capsys):
    """Two studies that share ``results`` and a trial's name (the 3m runs to 200k, the
    encoder study's to 100k): the shorter finished run leaves the longer kept curve."""
    results = tmp_path / "docs_runs"
    study = load_study(write(tmp_path, f"""\
env: smax
total_samples: 3000
seeds: [0]
scenarios: [3m]
variants:
  ace: {{config: configs/smax_5m_vs_6m.yaml, label: ACE}}
results: {results}
"""), str(tmp_path / "study"))
    results.mkdir()
    longer = "samples,win_rate\n1000,0.1\n3000,0.3\n5000,0.5\n"
    (results / "ace_3m_seed0.csv").write_text(longer)
    fake_trial(study, "ace", 0, [(1000, 0.2), (3000, 0.4)], wall=300.0)
    (record,) = study_records(study)
    assert (results / "ace_3m_seed0.csv").read_text() == longer
    assert not (results / "ace_3m_seed0.json").exists()
    assert record["curve"] == [(1000, 0.2), (3000, 0.4)]  # the report reads the run's own
    assert "not replaced" in capsys.readouterr().err


@pytest.mark.parametrize("text, error", [
    (TINY + "results: [a]\n", "results must be a directory"),
    (TINY + "at: [0]\n", "at must be a list of positive step counts (got [0])"),
    (TINY + "window: -1\n", "window must be an integer >= 0 (got -1)"),
])
def test_results_at_and_window_are_checked(tmp_path, text, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        load_study(write(tmp_path, text))


# On a local Ray -------------------------------------------------------------------------
class FailedTrial:
    """What :class:`acegnn.study.runner.Progress` reads of a Tune trial that failed."""

    config = {"trial": "ace_seed0"}
    error_file = "/study/.ray/tune/ace_seed0/error.txt"

    def get_error(self):
        return ("Traceback (most recent call last):\n  ...\nRuntimeError: ace_seed0: acegnn "
                "train exited with 1:\n$ acegnn train ...\nacegnn: error: no such map\n")


def test_a_failed_trial_prints_its_error(tmp_path):
    pytest.importorskip("ray")
    import io

    from acegnn.study.runner import Progress

    out = io.StringIO()
    progress = Progress(load_study(write(tmp_path, TINY), str(tmp_path / "study")), 30.0, out)
    progress.on_trial_error(0, [], FailedTrial())
    lines = out.getvalue().splitlines()
    assert lines[0] == "trial ace_seed0 failed for good:"
    assert lines[-4:] == ["  $ acegnn train ...", "  acegnn: error: no such map",
                          "  (the whole error: /study/.ray/tune/ace_seed0/error.txt)",
                          "study s: 0 done, 0 running, 1 failed, 0 pending"]
    out.truncate(0)
    progress.on_trial_recover(0, [], FailedTrial())
    assert "acegnn: error: no such map\n  (the whole error: " in out.getvalue()


def test_a_trial_larger_than_the_cluster_fails_at_once(tmp_path):
    pytest.importorskip("ray")
    from acegnn.study.runner import check_resources, run_study

    study = load_study(write(tmp_path, TINY + "resources: {cpus: 2, gpus: 1}\n"),
                       str(tmp_path / "study"))
    message = (r"s.yaml: a trial needs resources \{cpus: 2, gpus: 1\}, and the Ray cluster "
               r"has \{cpus: 4, gpus: 0\} in all")
    with pytest.raises(ValueError, match=message):
        check_resources(study, {"CPU": 4.0, "memory": 1e9})
    check_resources(study, {"CPU": 2.0, "GPU": 1.0})
    with pytest.raises(ValueError, match=r"needs resources \{cpus: 2, gpus: 1\}, and the Ray "
                                         r"cluster has \{cpus: 1, gpus: 0\}"):
        run_study(study, num_cpus=1)


def study_cli(*args, timeout=1800):  # minutes idle; 900 s was too short under heavy load
    """``acegnn study`` in a child process with one thread; (returncode, stdout, stderr)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "acegnn.cli", "study", *args, "--cpus", "2",
                          "--progress-every", "5"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    return out.returncode, out.stdout, out.stderr


def sessions(run_dir):
    with open(os.path.join(run_dir, LOG)) as f:
        return [line for line in f if line.startswith("$ acegnn train")]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """configs/studies/smoke.yaml trained on a local Ray: (study, stdout)."""
    pytest.importorskip("ray")
    path = tmp_path_factory.mktemp("smoke")
    code, out, err = study_cli(SMOKE, "--dir", str(path))
    assert code == 0, err[-3000:]
    return load_study(SMOKE, str(path)), out


def test_smoke_study_trains_ordinary_runs_and_skips_them_when_finished(smoke):
    from acegnn.run import evaluate_checkpoint

    study, out = smoke
    assert "study smoke: 2 trials in" in out and "0 finished, 2 to train" in out
    assert "study smoke: 2 done, 0 running, 0 pending; success_rate best" in out
    for trial in study.trials:
        for name in ("config.yaml", "train.csv", "eval.csv", CHECKPOINT, DONE, LOG):
            assert os.path.exists(os.path.join(trial.run_dir, name)), (trial.name, name)
        assert finished(trial, 2048) and len(sessions(trial.run_dir)) == 1
        assert evaluate_checkpoint(trial.run_dir, episodes=2)["samples"] == 2048
    assert "| ACE-w/o-IA | - | 1 | 4 | 2,048 |" in out  # the report, printed and written
    assert os.path.exists(os.path.join(study.dir, "report.md"))
    assert os.path.exists(os.path.join(study.dir, "curves.png"))
    mtimes = [os.path.getmtime(os.path.join(t.run_dir, CHECKPOINT)) for t in study.trials]
    code, out, err = study_cli(SMOKE, "--dir", study.dir)  # nothing left: no Ray
    assert code == 0 and "2 finished, 0 to train" in out and "Ray" not in err
    assert mtimes == [os.path.getmtime(os.path.join(t.run_dir, CHECKPOINT))
                      for t in study.trials]


def test_a_failed_trial_and_one_whose_worker_dies_resume_and_end_as_if_uninterrupted(
        smoke, tmp_path):
    """The smoke study again, both trials interrupted after a checkpoint: ``ace``'s first
    session raises after 1024 samples (``train.halt_after``; its checkpoint at 1024), and
    the Ray worker of ``ace_wo_ia`` is killed (SIGKILL) after its checkpoint at 1024,
    its ``acegnn train`` going with it. Tune starts each again, each resumes and
    ends as the smoke study's uninterrupted run. (One study for both: a Ray start less.)"""
    psutil = pytest.importorskip("psutil")
    from test_train_cli import assert_same_run

    text = open(SMOKE).read().replace(
        "    label: ACE\n", "    label: ACE\n    overrides: [train.halt_after=1024]\n")
    assert "halt_after" in text
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    study_dir = tmp_path / "study"
    flaky, killed = study_dir / "ace_seed0", study_dir / "ace_wo_ia_seed0"
    proc = subprocess.Popen([sys.executable, "-m", "acegnn.cli", "study", write(tmp_path, text),
                             "--dir", str(study_dir), "--cpus", "2"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, deadline = killed / "train.csv", time.monotonic() + 600
    while time.monotonic() < deadline and (not log.exists()
                                           or len(log.read_text().splitlines()) < 6):
        time.sleep(0.2)
    trains = [p for p in psutil.process_iter(["cmdline"])
              if {"train", f"run.dir={study_dir}", "run.name=ace_wo_ia_seed0"}
              <= set(p.info["cmdline"] or [])]
    assert len(trains) == 1, "the trial's acegnn train is not running"
    worker = trains[0].parent()
    worker.kill()
    trains[0].wait(timeout=60)  # PR_SET_PDEATHSIG: the training dies with its worker
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    for run_dir in (flaky, killed):
        assert f"trial {run_dir.name} failed; it resumes from its last checkpoint" in out
        first, second = sessions(run_dir)
        assert "--resume" not in first and f"--resume {run_dir} " in second
    assert "halted after 1024 samples" in (flaky / LOG).read_text()
    assert "halted after" not in (killed / LOG).read_text()
    uninterrupted = {t.name: pathlib.Path(t.run_dir) for t in smoke[0].trials}
    assert_same_run(uninterrupted["ace_seed0"], flaky)
    assert_same_run(uninterrupted["ace_wo_ia_seed0"], killed)


@pytest.mark.slow  # a study stopped with Ctrl-C, then run again (about a minute)
def test_a_stopped_study_resumes_its_running_trials(tmp_path):
    pytest.importorskip("ray")
    text = open(SMOKE).read().replace("total_samples: 2048 ", "total_samples: 8192 ")
    path = write(tmp_path, text, "smoke.yaml")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "acegnn.cli", "study", path, "--dir",
                             str(tmp_path / "study"), "--cpus", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "study" / "ace_seed0" / "train.csv"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not log.exists()
                                           or len(log.read_text().splitlines()) < 8):
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "the same command resumes them" in err
    study = load_study(path, str(tmp_path / "study"))
    assert not any(finished(t, 8192) for t in study.trials)
    code, out, err = study_cli(path, "--dir", str(tmp_path / "study"))
    assert code == 0, err[-3000:]
    assert "--resume" in sessions(study.trials[0].run_dir)[1]  # the trial watched above
    for trial in study.trials:
        with open(os.path.join(trial.run_dir, "train.csv")) as f:
            samples = [int(line.split(",")[0]) for line in f.readlines()[1:]]
        assert samples == [256 * k for k in range(1, 33)]


def test_curves_go_on_over_the_seeds_that_remain_only_when_asked():
    """Three SMAX seeds, one stopped after two evaluations: the table's curve ends where
    every seed reached; the figure's goes on over the two that remain (median and 25-75%
    of those two), and each point says how many seeds it holds."""
    from acegnn.study.report import curves
    def record(seed, rates):
        return {"env": "smax", "variant": "ace", "scenario": "3m", "seed": seed,
                "curve": [(10_000 * (i + 1) + seed, r) for i, r in enumerate(rates)]}
    records = [record(0, [0.0, 0.5, 1.0]), record(1, [0.25, 0.75, 0.5]), record(2, [1.0, 0.0])]
    short = curves(records)[("smax", "ace", "3m")]
    assert [p[4] for p in short] == [3, 3]
    # second evaluation: 0.5, 0.75, 0.0 -> median 0.5, quartiles 0.25 and 0.625
    assert short[1] == (20_001, 0.5, 0.25, 0.625, 3)
    long = curves(records, every_seed=False)[("smax", "ace", "3m")]
    assert long[:2] == short
    # third: seeds 0 and 1 alone, at 30,000 and 30,001 -> median steps 30,000.5
    assert long[2] == (30_000.5, 0.75, 0.625, 0.875, 2)
