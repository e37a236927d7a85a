"""The benchmark scripts run end to end on tiny settings and write their records."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")


def run(args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def refusal(script, args, monkeypatch, capsys):
    """The usage error (exit status 2) of ``scripts/<script>.py`` with ``args``, called in
    this process (a refusal needs no process of its own; each costs seconds of imports)."""
    import importlib

    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        importlib.import_module(script).main(args)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("script", ["bench_spiders.py", "bench_overlap.py", "study.py"])
def test_scripts_that_start_runs_import_no_torch(script):
    """They start each run as an ``acegnn`` process; torch and PyG would add seconds to
    every start of the script (5 s of CPU on this machine) for nothing."""
    code = (f"import runpy, sys; sys.argv = ['{script}', '--help']\n"
            f"try:\n    runpy.run_path('scripts/{script}', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_geometric')))")
    out = run(["-c", code])
    assert out.splitlines()[-1] == "[]"


def test_bench_rollout_writes_records(tmp_path):
    out = tmp_path / "r.json"
    text = run(["scripts/bench_rollout.py", "--sizes", "2x3", "--batches", "2", "--hidden", "8",
                "--min-time", "0.01", "--naive-budget", "0.1", "--json", str(out)])
    (rec,) = json.loads(out.read_text())
    for key in ("agents", "enemies", "batch", "hidden", "efficient_decisions_per_s",
                "naive_decisions_per_s"):
        assert key in rec
    assert (rec["agents"], rec["enemies"], rec["batch"], rec["hidden"]) == (2, 3, 2, 8)
    assert rec["efficient_decisions_per_s"] > 0 and rec["naive_decisions_per_s"] > 0
    assert "ratio" in text


def test_bench_spiders_writes_records(tmp_path):
    out = tmp_path / "s.json"
    args = ["scripts/bench_spiders.py", "--methods", "ace_dqn", "--grids", "5", "--seeds", "0", "--jobs", "1",
            "--max-samples-5", "512", "--gap-episodes", "4", "--run-dir", str(tmp_path),
            "--json", str(out), "--", "train.samples_per_collect=256", "train.batch_size=16",
            "train.updates_per_collect=1", "model.hidden=8", "train.eval_every=256",
            "train.eval_episodes=2", "train.learning_starts=256", "train.stop_on_success=false"]
    text = run(args)
    (rec,) = json.loads(out.read_text())
    for key in ("grid", "seed", "samples_to_100", "steps_gap", "wall_s", "wall_to_100_s"):
        assert key in rec
    assert rec["grid"] == 5 and rec["seed"] == 0 and rec["samples"] == 512
    assert rec["samples_to_100"] is None and rec["steps_gap_at_100"] is None  # 512 samples
    assert rec["config"] == "spiders_fly_5x5.yaml" and rec["overrides"] == args[args.index("--") + 1:]
    # the row names what changes learning, not the bookkeeping (train.stop_on_success)
    assert "| ACE (train.samples_per_collect=256, train.batch_size=16, " in text
    assert "train.learning_starts=256) | 5x5 |" in text
    args[args.index("--max-samples-5") + 1] = "768"  # the same runs, trained further
    run(args)
    (rec,) = json.loads(out.read_text())
    assert rec["samples"] == 768 and rec["env_steps_per_s"] > 0
    text = run(args)  # nothing left to train: the rate is not measured, not 0
    (rec,) = json.loads(out.read_text())
    assert rec["samples"] == 768 and rec["env_steps_per_s"] is None
    assert "| not trained now |" in text


@pytest.mark.slow  # 4 trainings and exact evaluations (a minute or two); `make test-all`
def test_table1_with_baselines_writes_markdown_and_plot(tmp_path):
    md, png = tmp_path / "t.md", tmp_path / "t.png"
    run(["scripts/bench_spiders.py", "--methods", "ace_dqn", "vdn", "--grids", "5", "--seeds",
         "0", "1", "--jobs", "2", "--max-samples-5", "512", "--gap-episodes", "4", "--run-dir",
         str(tmp_path), "--markdown", str(md), "--plot", str(png), "--",
         "train.samples_per_collect=256", "train.batch_size=16", "train.updates_per_collect=1",
         "model.hidden=8", "train.eval_every=256", "train.eval_episodes=2",
         "train.learning_starts=256"])
    table = md.read_text()
    assert "| VDN (train.samples_per_collect=256," in table and "0.19 ± 0.02" in table
    assert "| ACE (train.samples_per_collect=256," in table
    assert png.stat().st_size > 1000


def test_table_from_saved_records(tmp_path):
    """--records makes the table of runs made earlier, in other runs of the script."""
    recs = [{"method": m, "grid": 5, "seed": s, "samples_to_100": n, "samples": 300_000,
             "steps_gap": gap, "steps_gap_at_100": None if n is None else gap + 1,
             "sampled_steps_gap": gap, "wall_to_100_s": None if n is None else 10.0,
             "wall_s": 20.0, "env_steps_per_s": None, "run_dir": "x"}
            for m, s, n, gap in [("ace_dqn", 0, 100_000, 0.5), ("ace_dqn", 1, 120_000, 0.7),
                                 ("qtran", 0, None, 3.0), ("qtran", 1, 200_000, 1.0)]]
    a, b, md = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "t.md"
    a.write_text(json.dumps(recs[:2]))
    b.write_text(json.dumps([dict(recs[1], samples_to_100=140_000), *recs[2:]]))  # seed 1 again
    text = run(["scripts/bench_spiders.py", "--methods", "ace_dqn", "qtran", "vdn", "--grids", "5",
                "--records", str(a), str(b), "--markdown", str(md)])
    table = md.read_text()
    assert "| ACE | 5x5 | 0.12 ± 0.03 | 1.60 ± 0.14 |" in table  # seed 1 from b.json
    assert "| QTRAN | 5x5 | 0.20 ± 0.00 (1 of 2; 1 not reached) | 2.00 ± 0.00 (1 of 2; 1 not reached) |" in table
    assert "VDN" not in table
    assert "| ACE | 5x5 |" in text
    text = run(["scripts/bench_spiders.py", "--methods", "qtran", "--grids", "5", "--seeds", "0",
                "--records", str(b)])
    assert "| QTRAN | 5x5 | not reached | not reached |" in text  # seed 1 not selected


def test_records_of_another_config_or_overrides_are_rows_of_their_own(tmp_path):
    """ACE with the _paper config, and with an option on top, are rows apart from the
    default ACE row; bookkeeping overrides do not split a row."""
    def rec(seed, n, config="spiders_fly_5x5.yaml", overrides=()):
        return {"method": "ace_dqn", "config": config, "overrides": list(overrides), "grid": 5,
                "seed": seed, "samples_to_100": n, "samples": 300_000, "steps_gap": 0.5,
                "steps_gap_at_100": 1.0, "sampled_steps_gap": 0.5, "wall_to_100_s": 1.0,
                "wall_s": 2.0, "env_steps_per_s": None, "run_dir": "x"}
    paper = "spiders_fly_5x5_paper.yaml"
    recs = [rec(0, 100_000, overrides=["train.stop_on_success=false"]), rec(1, 120_000),
            rec(0, 200_000, paper), rec(1, 220_000, paper, ["train.checkpoint_every=10240"]),
            rec(0, 300_000, paper, ["algo.nstep=3", "train.stop_on_success=false"])]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recs))
    text = run(["scripts/bench_spiders.py", "--methods", "ace_dqn", "--grids", "5", "--records", str(path)])
    assert "| ACE | 5x5 | 0.11 ± 0.01 |" in text
    assert f"| ACE ({paper}) | 5x5 | 0.21 ± 0.01 |" in text
    assert f"| ACE ({paper}, algo.nstep=3) | 5x5 | 0.30 ± 0.00 |" in text


def test_bench_spiders_refuses_a_missing_ace_config(tmp_path):
    out = subprocess.run([sys.executable, "scripts/bench_spiders.py", "--methods", "ace_dqn", "--grids", "5",
                          "--ace-config", "configs/spiders_fly_{grid}x{grid}_nope.yaml", "--run-dir",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0 and "spiders_fly_5x5_nope.yaml" in out.stderr
    assert os.listdir(tmp_path) == []


def test_spiders_regret_compares_sequential_and_joint_policies(tmp_path, capsys):
    from acegnn.cli import main as cli

    # a 4x4 grid: the script tabulates every live state (16 * 15 * 15; 5x5 has 4x as many)
    assert cli(["train", "configs/spiders_fly_5x5.yaml", "env.grid_size=4", "train.total_samples=512",
                "train.samples_per_collect=256", "train.batch_size=16", "train.learning_starts=256",
                "train.updates_per_collect=1", "train.eval_every=256", "train.eval_episodes=2",
                "model.hidden=8", "train.progress=false", f"run.dir={tmp_path}",
                "run.name=r"]) == 0
    out = tmp_path / "regret.json"
    run(["scripts/spiders_regret.py", str(tmp_path / "r"), "--json", str(out)])
    rec = json.loads(out.read_text())
    capsys.readouterr()
    assert cli(["eval", str(tmp_path / "r"), "--episodes", "2"]) == 0  # in this process
    ev = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert abs(rec["sequential_steps_gap"] - ev["exact_steps_gap"]) < 1e-9
    assert 0.0 <= rec["disagree"] <= 1.0 and rec["joint_steps_gap"] > -1e-9
    # the anatomy: regret is never negative, so the states with any regret carry the gap
    assert abs(rec["regret_over_0_gap"] - rec["gap_from_regret"]) < 1e-6
    assert rec["regret_over_0.5_states"] <= rec["regret_over_0_states"] <= rec["visited_states"]
    assert rec["visited_states"] <= rec["live_states"] == 16 * 15 * 15
    assert rec["se_discount"] == pytest.approx(0.99 ** 2)
    assert 0.0 <= rec["uncaught_at_horizon"] <= 1.0 + 1e-9 and rec["optimum_margin_median"] > 0


def test_joint_argmax_takes_the_best_final_value():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import torch
    from spiders_regret import joint_argmax

    from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema, valid_starts
    from acegnn.nn import ACENetwork, Forced

    torch.manual_seed(0)
    net = ACENetwork(spiders_fly_schema(), hidden=8, pool="max", layers=2)
    g = spiders_fly_graphs(valid_starts(5)[:40], 5)
    arg = joint_argmax(net, g, 2).view(-1, 2)
    avail = g["action"].available.view(-1, 2, 5)
    best = torch.full((40,), -float("inf"))
    with torch.no_grad():
        for a0 in range(5):
            for a1 in range(5):
                ok = avail[:, 0, a0] & avail[:, 1, a1]
                for i in ok.nonzero().view(-1).tolist():  # one state at a time
                    gi = spiders_fly_graphs(valid_starts(5)[i:i + 1], 5)
                    v = net.rollout(gi, selector=Forced(torch.tensor([a0, a1]))).chosen_value[1]
                    best[i] = max(best[i], v)
        got = net.rollout(g, selector=Forced(arg.view(-1))).chosen_value.view(-1, 2)[:, 1]
    assert torch.allclose(got, best, atol=1e-6)


def test_bench_collect_times_each_number_of_environments(tmp_path, monkeypatch, capsys):
    out = tmp_path / "c.json"
    text = run(["scripts/bench_collect.py", "configs/spiders_fly_5x5.yaml", "model.hidden=8",
                "train.samples_per_collect=48", "--envs", "2", "3", "--rounds", "2",
                "--json", str(out)])
    records = json.loads(out.read_text())
    assert [r["num_envs"] for r in records] == [2, 3]  # read back from the task built
    assert [json.loads(line) for line in text.splitlines()] == records
    for r in records:
        assert r["steps_per_round"] == 48 and r["rounds"] == 2
        assert r["cpu_ms_per_env_step"] > 0
        assert r["cpu_ms_per_batched_step"] == pytest.approx(r["cpu_ms_per_env_step"] * r["num_envs"])
    assert "--envs must be at least 1" in refusal(
        "bench_collect", ["configs/spiders_fly_5x5.yaml", "--envs", "0"], monkeypatch, capsys)


def test_bench_update_prints_timings():
    text = run(["scripts/bench_update.py", "configs/spiders_fly_5x5.yaml", "model.hidden=8",
                "train.batch_size=16", "train.samples_per_collect=64", "train.learning_starts=64",
                "--repeats", "1", "--updates", "1", "--compare-all-values", "--profile", "2",
                "--phases", "2", "--count-ops"])
    rec = json.loads(text.strip().splitlines()[-1])
    assert rec["batch_size"] == 16 and rec["update_ms"] > 0 and rec["all_values_update_ms"] > 0
    assert rec["step_ms"] > 0 and rec["flop_per_step"] > 0
    assert rec["keep_heap"] is True and set(rec["page_faults"]) == {"update", "step", "all_values_update"}
    # a step's phases, as the training loop takes it (Trainer.update_once, ACEDQN.loss)
    assert set(rec["phases_ms"]) == {"sample", "graphs", "online_values", "targets", "backward",
                                     "optimizer"}
    assert "phases of a step (ms, share): sample" in text
    # the same phases by the clock, and what lies outside them: together the whole step
    clocked = rec["phases_clock_ms"]
    assert set(clocked) == set(rec["phases_ms"]) | {"rest", "step"}
    assert sum(v for k, v in clocked.items() if k != "step") == pytest.approx(clocked["step"])
    assert min(clocked.values()) > 0 and "phases of a step by the clock (ms, share): sample" in text
    # the operators of one call of each timing: a step samples and builds before it updates
    ops = rec["ops"]
    assert set(ops) == {"update", "step", "all_values_update"}
    assert 0 < ops["update"]["kernels"] < ops["update"]["dispatched"] < ops["step"]["dispatched"]
    assert ops["update"]["syncs"] == sum(ops["update"]["sync_ops"].values()) > 0
    assert "update: %d operators dispatched" % ops["update"]["dispatched"] in text


def test_bench_update_times_a_saved_batch_where_the_task_is_absent(tmp_path, monkeypatch, capsys):
    small = ["model.hidden=8", "train.batch_size=16", "train.samples_per_collect=64",
             "train.learning_starts=64", "--repeats", "1", "--updates", "1"]
    saved = tmp_path / "b.pt"
    made = json.loads(run(["scripts/bench_update.py", "configs/spiders_fly_5x5.yaml", *small,
                           "--save-batch", str(saved)]).strip().splitlines()[-1])
    timed = json.loads(run(["scripts/bench_update.py", "configs/spiders_fly_5x5.yaml", *small,
                            "--batch", str(saved), "--cpu-time"]).strip().splitlines()[-1])
    assert made["step_ms"] > 0 and timed["update_ms"] > 0 and "step_ms" not in timed
    assert timed["device"] == "cpu" and (made["clock"], timed["clock"]) == ("wall", "cpu")
    assert "use it with --threads 1" in refusal(
        "bench_update", ["configs/spiders_fly_5x5.yaml", *small, "--batch", str(saved),
                         "--cpu-time", "--threads", "2"], monkeypatch, capsys)
    assert "holds a batch of configs/spiders_fly_5x5.yaml" in refusal(
        "bench_update", ["configs/spiders_fly_7x7.yaml", *small, "--batch", str(saved)],
        monkeypatch, capsys)


def test_bench_graphs_times_layout_and_scratch(tmp_path):
    out = tmp_path / "g.json"
    run(["scripts/bench_graphs.py", "--grid", "5", "--sizes", "3", "--calls", "2", "--repeats", "1",
         "--json", str(out)])
    (rec,) = json.loads(out.read_text())
    assert rec["grid"] == 5 and rec["batch"] == 3
    for part in ("build", "index", "flat"):
        assert rec[f"{part}_layout_ms"] > 0 and rec[f"{part}_scratch_ms"] > 0


def test_success_curve_skips_rows_of_exact_evaluations_only(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_spiders import success_curve

    (tmp_path / "eval.csv").write_text(
        "samples,success_rate,steps_gap,exact_steps_gap\n"
        "512,0.5,2.0,\n768,,,1.25\n1024,1.0,0.5,0.75\n")
    assert success_curve(str(tmp_path)) == ([512, 1024], [0.5, 1.0])


@pytest.mark.slow  # trainings in subprocesses (about a minute); `make test-all` runs it
def test_bench_spiders_keeps_the_records_of_finished_runs_when_one_fails(tmp_path):
    out = tmp_path / "s.json"
    broken = tmp_path / "bench_5x5_seed1"
    broken.mkdir()
    (broken / "checkpoint.pt").write_text("not a checkpoint")  # seed 1 fails on resume
    proc = subprocess.run(
        [sys.executable, "scripts/bench_spiders.py", "--methods", "ace_dqn", "--grids", "5",
         "--seeds", "0", "1", "--jobs", "1", "--max-samples-5", "256", "--gap-episodes", "2",
         "--run-dir", str(tmp_path), "--json", str(out), "--", "train.samples_per_collect=256",
         "train.batch_size=16", "train.updates_per_collect=1", "model.hidden=8",
         "train.eval_every=256", "train.eval_episodes=2", "train.learning_starts=256"],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "bench_5x5_seed1 failed" in proc.stderr
    (rec,) = json.loads(out.read_text())
    assert (rec["method"], rec["seed"], rec["samples"]) == ("ace_dqn", 0, 256)


def test_study_reports_median_and_quartiles(tmp_path):
    """The study's table and plot from saved records (no training): the median and the
    25-75% percentiles of the win rate over seeds at each evaluation, curves cut to the
    evaluations every seed reached, the wall-clock projected to the paper's budget (10M
    steps on SMAC, 4M on football's 3 vs 1), and SMAX and
    football records kept apart (a record without ``env`` is SMAX's)."""
    def rec(variant, seed, rates, wall, **env):
        return {"variant": variant, "scenario": "5m_vs_6m", "seed": seed, "run_dir": "x",
                "samples": 2000, "wall_s": wall, "env_steps_per_s": 2000 / wall,
                "curve": [[1000 * (k + 1), r] for k, r in enumerate(rates)], **env}
    recs = [rec("ace", 0, [0.0, 0.0], 100.0), rec("ace", 1, [0.0, 0.5], 100.0, env="smax"),
            rec("ace", 2, [0.25, 1.0, 1.0], 400.0), rec("qmix", 0, [0.0, 0.125], 50.0),
            {**rec("ace", 0, [0.75, 0.875], 10.0, env="grf"),
             "scenario": "academy_3_vs_1_with_keeper"}]
    path, md, png = tmp_path / "r.json", tmp_path / "t.md", tmp_path / "c.png"
    path.write_text(json.dumps(recs))
    run(["scripts/study.py", "--records", str(path), "--markdown", str(md), "--plot", str(png)])
    table = md.read_text()
    # ACE at its second evaluation (seed 2's third is cut): rates 0, 0.5, 1 -> 0.50 (0.25-0.75);
    # median rate 20 env steps/s -> 10M steps in 500,000 s = 138.9 h
    assert "| ACE | 5m_vs_6m | 3 | 2,000 | 0.50 (0.25-0.75) | 20 | 0.03 h | 138.9 h (10M) |" in table
    assert "| QMIX-SHARED | 5m_vs_6m | 1 | 2,000 | 0.12 (0.12-0.12) | 40 | 0.01 h | 69.4 h (10M) |" \
        in table
    assert ("| ACE | academy_3_vs_1_with_keeper | 1 | 2,000 | 0.88 (+-0.00) | 200 | 0.00 h "
            "| 5.6 h (4M) |") in table
    assert png.stat().st_size > 1000


def test_study_tabulates_eval_csv_files_beside_the_papers_curve(tmp_path):
    """Football's protocol from committed eval.csv files: the mean and standard deviation
    over seeds at given steps (a seed's evaluations within the window averaged), and the
    paper's curve interpolated there."""
    rows = {0: [(10_000, 0.0), (20_000, 0.25), (30_000, 0.5)], 1: [(10_500, 0.5), (19_000, 0.75)]}
    paths = []
    for seed, curve in rows.items():
        path = tmp_path / f"ace_official_academy_3_vs_1_with_keeper_seed{seed}.csv"
        path.write_text("samples,win_rate,mean_return,mean_steps\n"
                        + "".join(f"{x},{w},0,50\n" for x, w in curve))
        paths.append(str(path))
    md = tmp_path / "t.md"
    run(["scripts/study.py", "--env", "grf", "--eval-csv", *paths, "--at", "20000", "80000",
         "--window", "5000", "--markdown", str(md)])
    table = md.read_text()
    # at 20k: seed 0 -> 0.25 (its 20k evaluation); seed 1 -> 0.75 (19k) -> 0.50 +- 0.35
    assert ("| ACE, official recipe | academy_3_vs_1_with_keeper | 2 | 0.50 +- 0.35 (2) |  |"
            in table)
    # the paper's points (19k, 0.05) and (80k, 0.16): 0.05 + 0.11 / 61 at 20k
    assert "| paper's ACE | academy_3_vs_1_with_keeper | 5 | 0.05 | 0.16 |" in table
    # its band: (19k, 0.01-0.10) and (80k, 0.04-0.30), 1/61 of the way at 20k
    assert ("| paper's ACE, its band | academy_3_vs_1_with_keeper | 5 | 0.01-0.10 | 0.04-0.30 |"
            in table)
    # the last evaluation both seeds reached: 20k and 19k, rates 0.25 and 0.75 (mean, sd); no clock
    assert ("| ACE, official recipe | academy_3_vs_1_with_keeper | 2 | 19,500 | 0.50 (+-0.35) "
            "| - | - | - |") in table
    bad = tmp_path / "nope_seed0.csv"
    bad.write_text("samples,win_rate\n")
    out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--eval-csv",
                          str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0 and "name it <variant>_<scenario>_seed<seed>.csv" in out.stderr


def test_study_tabulates_smax_eval_csv_files_by_median_and_percentiles(tmp_path):
    """SMAC's protocol at given steps: the median and 25-75% percentiles over seeds."""
    rates = {0: 0.25, 1: 0.5, 2: 1.0}
    paths = []
    for seed, rate in rates.items():
        path = tmp_path / f"ace_nstep3_3m_seed{seed}.csv"
        path.write_text("samples,win_rate,mean_return,mean_steps,allies_alive,enemies_alive\n"
                        f"10000,0.0,0,10,0,1\n50000,{rate},0,10,0,0\n")
        paths.append(str(path))
    md = tmp_path / "t.md"
    run(["scripts/study.py", "--eval-csv", *paths, "--at", "10000", "50000", "--window", "1000",
         "--markdown", str(md)])
    # 0.25, 0.5, 1.0: median 0.5, percentiles (linear) 0.375 and 0.75
    assert ("| ACE, 3-step returns (the official n) | 3m | 3 | 0.00 (0.00-0.00; 3) "
            "| 0.50 (0.38-0.75; 3) |") in md.read_text()


def test_study_compares_each_variant_with_one_on_the_seeds_both_ran(tmp_path):
    """--against: each variant beside a base variant on the seeds both ran (a seed only
    one of them ran is left out), the difference of their means with Welch's standard
    error, and the median first evaluation above 0.1 (a seed that never passes it counts
    as the latest)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import study as study_script

    curves = {("ace_official", 0): [(20_000, 0.9)],  # no seed 0 of ace: left out
              ("ace_official", 1): [(10_000, 0.0), (20_000, 0.5)],
              ("ace_official", 2): [(10_000, 0.2), (20_000, 0.3)],
              ("ace_official", 4): [(20_000, 0.0)],
              ("ace", 1): [(10_000, 0.0), (20_000, 0.25), (30_000, 1.0)],
              ("ace", 2): [(10_000, 0.05), (22_000, 0.75)],
              ("ace", 3): [(20_000, 1.0)],  # no seed 3 of ace_official: left out
              ("ace", 4): [(20_000, 0.0)]}
    paths = []
    for (variant, seed), curve in curves.items():
        path = tmp_path / f"{variant}_academy_3_vs_1_with_keeper_seed{seed}.csv"
        path.write_text("samples,win_rate\n" + "".join(f"{x},{w}\n" for x, w in curve))
        paths.append(str(path))
    md = tmp_path / "t.md"
    run(["scripts/study.py", "--env", "grf", "--eval-csv", *paths, "--at", "20000", "30000",
         "--window", "2000", "--against", "ace_official", "--markdown", str(md)])
    # at 20k, seeds 1, 2, 4: ace 0.25, 0.75 (22k), 0 -> mean 1/3, variance 0.1458;
    # ace_official 0.5, 0.3, 0 -> mean 0.2667, variance 0.0633; se sqrt(0.2092 / 3) = 0.26.
    # At 30k only ace's seed 1 has an evaluation: no cell. First evaluations above 0.1:
    # ace 20k, 22k, never -> 22k; ace_official 20k, 10k, never -> 20k
    assert ("| ACE | academy_3_vs_1_with_keeper | 1, 2, 4 | 0.33, 0.27, +0.07 +- 0.26 (3) |  "
            "| 22k, 20k |") in md.read_text()
    records = study_script.records_of_eval_csv(paths, "grf")
    two = [r for r in records if r["seed"] in (1, 4)]
    # the median of 20k and never is never
    assert study_script.against(two, "ace_official", [20_000], 2000, 0.1).splitlines()[-1] \
        .endswith("| never, never |")
    with pytest.raises(ValueError, match="no variant shares a seed and scenario with qmix_cds"):
        study_script.against(records, "qmix_cds", [20_000], 2000, 0.1)
    out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--eval-csv",
                          *paths, "--against", "ace_official"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 2 and "give --at too" in out.stderr


def test_study_lists_each_seed_of_each_variant_over_a_span(tmp_path):
    """--per-seed: a line per run, seeds side by side, its first evaluation above --above,
    its evaluations inside the span (both ends included) and their mean, and the mean of
    the --columns over the same evaluations; a run without such a column gets a blank."""
    files = {"ace_official_academy_3_vs_1_with_keeper_seed1.csv":
             "samples,win_rate,pass_share,mean_steps\n10000,0.0,0.1,60\n20000,0.5,0.2,50\n"
             "30000,0.25,0.6,40\n40000,1.0,0.9,30\n",
             "ace_academy_3_vs_1_with_keeper_seed1.csv": "samples,win_rate\n20000,0.1\n30000,0.125\n",
             "ace_academy_3_vs_1_with_keeper_seed0.csv":
             "samples,win_rate,pass_share,mean_steps\n19999,0.75,0.3,20\n"}
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    md = tmp_path / "t.md"
    run(["scripts/study.py", "--env", "grf", "--eval-csv", *paths, "--per-seed", "20000", "30000",
         "--above", "0.3", "--columns", "pass_share", "mean_steps", "--markdown", str(md)])
    text = md.read_text()
    lines = text[text.index("| first evaluation above 0.3 |"):].splitlines()[2:]
    # seed 0 (ace): its only evaluation at 19,999 is outside 20k-30k; 0.75 > 0.3 there.
    # seed 1, ace (before ace_official in the labels' order): 0.1 and 0.125, never above 0.3.
    # seed 1, ace_official: 0.5 and 0.25 inside -> 0.375; pass 0.2, 0.6 -> 0.40; steps 45
    assert lines == [
        "| ACE | academy_3_vs_1_with_keeper | 0 | 20k |  |  |  |  |",
        "| ACE | academy_3_vs_1_with_keeper | 1 | never | 0.11 | 0.10 0.12 |  |  |",
        "| ACE, official recipe | academy_3_vs_1_with_keeper | 1 | 20k | 0.38 | 0.50 0.25 | 0.40 | 45.00 |"]
    out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--eval-csv", *paths,
                          "--columns", "pass_share"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "give --per-seed FROM TO too" in out.stderr
    out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--eval-csv", *paths,
                          "--per-seed", "30000", "20000"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "FROM is after TO" in out.stderr


def test_a_seed_run_twice_is_listed_per_run_and_counted_by_no_table(tmp_path):
    """Two runs of one seed (a rerun on another machine): --per-seed lists both, each
    named by its folder; the tables over seeds (--at, --against, --plot and the final
    table) refuse them, naming both files, instead of counting the seed twice."""
    name = "ace_academy_3_vs_1_with_keeper_seed1.csv"
    (tmp_path / "first").mkdir()
    (tmp_path / name).write_text("samples,win_rate\n10000,0.5\n")
    (tmp_path / "first" / name).write_text("samples,win_rate\n10000,0.25\n")
    (tmp_path / "ace_academy_3_vs_1_with_keeper_seed2.csv").write_text("samples,win_rate\n10000,1\n")
    paths = [str(tmp_path / name), str(tmp_path / "first" / name),
             str(tmp_path / "ace_academy_3_vs_1_with_keeper_seed2.csv")]
    text = run(["scripts/study.py", "--env", "grf", "--eval-csv", *paths, "--per-seed", "0", "20000"])
    assert text.splitlines()[0].startswith("| variant | scenario | seed | first evaluation")
    assert text.strip().splitlines()[2:] == [
        f"| ACE | academy_3_vs_1_with_keeper | 1 ({tmp_path.name}) | 10k | 0.50 | 0.50 |",
        "| ACE | academy_3_vs_1_with_keeper | 1 (first) | 10k | 0.25 | 0.25 |",
        "| ACE | academy_3_vs_1_with_keeper | 2 | 10k | 1.00 | 1.00 |"]
    for more in ([], ["--at", "10000"], ["--per-seed", "0", "20000", "--plot", str(tmp_path / "c.png")]):
        out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--eval-csv",
                              *paths, *more], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2, more
        assert (f"seed 1 of ace on academy_3_vs_1_with_keeper has 2 runs ({paths[0]}, {paths[1]}): "
                "the tables, curves and --against count each seed once") in out.stderr
    assert not (tmp_path / "c.png").exists()


def test_study_refuses_a_variant_the_environment_lacks():
    out = subprocess.run([sys.executable, "scripts/study.py", "--env", "grf", "--variants",
                          "ace_wo_ia", "--records", "none.json"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 2 and "--env grf has no variant ace_wo_ia" in out.stderr


def test_zero_weights_report_by_hand(tmp_path):
    import torch

    state = {"enc.0.weight": torch.tensor([[0.0, 0.0], [0.0, 1e-7], [0.5, 0.0]]),
             "enc.0.bias": torch.tensor([0.0, 0.2, 0.0]),
             "head.weight": torch.tensor([[0.0, 3.0, 0.0]]),
             "steps": torch.tensor(4)}
    torch.save({"learner": {"net": state}}, tmp_path / "checkpoint.pt")
    out = tmp_path / "zero.json"
    text = run(["scripts/zero_weights.py", str(tmp_path), "--json", str(out)])
    rep = json.loads(out.read_text())[str(tmp_path)]
    # 12 float entries, 9 of them zero (an integer buffer is not a weight)
    assert rep["zero_weights"] == 9 / 12 and rep["parameters"] == 12
    # row 0 and its bias zero: off; row 1's bias 0.2: on; row 2 has a weight
    assert rep["matrices"]["enc.0"] == {"shape": [3, 2], "zero": pytest.approx(5 / 6),
                                        "units_off": pytest.approx(1 / 3)}
    assert rep["matrices"]["head"] == {"shape": [1, 3], "zero": pytest.approx(2 / 3),
                                       "units_off": 0.0}
    assert "0.750 of 12 parameters zero" in text


def test_battle_starts_overlap_by_hand():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from battle_starts import overlap_report

    rep = overlap_report({"a": [True, True, False, False],
                          "b": [True, False, False, True],
                          "c": [True, True, True, False]})
    # start 0 won by 3, start 1 by 2, start 2 by 1, start 3 by 1
    assert rep["won_by"] == [0, 2, 1, 1]
    assert rep["win_rate"] == {"a": 0.5, "b": 0.5, "c": 0.75}
    # independent: P(k wins) of rates 0.5, 0.5, 0.75, times 4 starts
    p0 = 0.5 * 0.5 * 0.25
    p3 = 0.5 * 0.5 * 0.75
    p1 = 2 * 0.5 * 0.5 * 0.25 + 0.5 * 0.5 * 0.75
    assert rep["independent"] == pytest.approx([4 * p0, 4 * p1, 4 * (1 - p0 - p1 - p3), 4 * p3])
    assert rep["shared_losses"] == {"a | b": 1, "a | c": 1, "b | c": 0}  # b: 1, 2; c: 3


def test_battle_start_spread_is_the_largest_distance_between_two_units():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import numpy as np
    from battle_starts import spread

    pos = np.array([[[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]],      # 0-1: 5
                    [[2.0, 2.0], [2.0, 2.0], [2.0, 2.5]]])     # 0-2, 1-2: 0.5
    assert spread(pos).tolist() == [5.0, 0.5]


def test_bench_update_starts_from_a_runs_checkpoint(tmp_path, monkeypatch, capsys):
    """``--checkpoint RUN`` times the run's trained learner; a checkpoint of another
    network is refused with the reason."""
    from acegnn.cli import main as cli

    tiny = ["model.hidden=8", "train.batch_size=16", "train.samples_per_collect=64",
            "train.learning_starts=64", "train.total_samples=256", "train.updates_per_collect=3",
            "train.eval_every=0", "train.progress=false", f"run.dir={tmp_path}", "run.name=r"]
    assert cli(["train", "configs/spiders_fly_5x5.yaml", *tiny]) == 0
    out = json.loads(run(["scripts/bench_update.py", "configs/spiders_fly_5x5.yaml", *tiny[:4],
                          "--repeats", "1", "--updates", "1", "--checkpoint",
                          str(tmp_path / "r")]).strip().splitlines()[-1])
    assert out["checkpoint_updates"] == 12  # 4 rounds of 64 steps, 3 updates each
    assert "does not match this model" in refusal(
        "bench_update", ["configs/spiders_fly_5x5.yaml", "model.hidden=16", "--checkpoint",
                         str(tmp_path / "r")], monkeypatch, capsys)


def marines_3_vs_2():
    """The marine's type id and a SMAX battle of 3 allies and 2 enemies on a 32 x 32 map,
    every unit with attack range 5 and sight 9."""
    from acegnn.envs.smac.units import SMAX_ACTIONS, UNIT_TYPES, BattleSpec, UnitStats

    return UNIT_TYPES.index("marine"), BattleSpec(
        3, 2, (32.0, 32.0), SMAX_ACTIONS, UnitStats((5.0,) * len(UNIT_TYPES), (9.0,) * len(UNIT_TYPES)))


def test_scripted_focus_fire_by_hand(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from smax_scripted import focus_fire

    from acegnn.envs.smac.units import battle_graphs

    marine, spec = marines_3_vs_2()
    # type, x, y, health, shield, cooldown, alive: allies 0-2, enemies 3-4
    units = torch.tensor([[marine, 10, 10, 1.0, 0, 0, 1], [marine, 10, 12, 1.0, 0, 0, 1],
                          [marine, 4, 11, 1.0, 0, 0, 1],
                          [marine, 12, 10, 0.9, 0, 0, 1], [marine, 14, 12, 0.5, 0, 0, 1]]
                         ).unsqueeze(0).float()
    avail = torch.zeros(1, 3, 7, dtype=torch.bool)
    avail[0, :, :5] = True  # every move and stop
    avail[0, 0, 5:] = True  # ally 0 reaches both enemies
    avail[0, 1, 6] = True  # ally 1 the second only; ally 2 neither
    graphs = battle_graphs(units, avail, spec)
    # the weakest in range (enemy 1: 0.5 left), or the closest in range (enemy 0, 2 away);
    # ally 2 moves east towards enemy 0, the closest live one
    assert focus_fire(spec, "weakest")(graphs).tolist() == [6, 6, 1]
    assert focus_fire(spec, "closest")(graphs).tolist() == [5, 6, 1]
    units[0, 3, 6] = units[0, 3, 3] = 0  # enemy 0 dead: ally 2 now heads for enemy 1 ...
    avail[0, 2, 1] = False  # ... whose nearest move (east) is blocked: it takes the first
    avail[0, 0, 5] = False  # available slot (north); a dead ally has only the no-op
    units[0, 1, 6] = units[0, 1, 3] = 0
    avail[0, 1] = False
    avail[0, 1, 4] = True
    assert focus_fire(spec, "weakest")(battle_graphs(units, avail, spec)).tolist() == [6, 4, 0]


def test_scripted_focus_fire_plays_smax_battles():
    pytest.importorskip("jaxmarl")
    text = run(["scripts/smax_scripted.py", "--scenarios", "3m", "--episodes", "4"])
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert [(r["scenario"], r["script"], r["episodes"]) for r in rows] == \
        [("3m", "weakest", 4), ("3m", "closest", 4)]
    assert all(0 <= r["win_rate"] <= 1 and r["mean_steps"] > 0 for r in rows)
    assert "enemies left" in text


def test_battle_actions_by_situation_by_hand(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from battle_actions import situation_counts

    from acegnn.envs.smac.units import battle_graphs, live_action_groups

    marine, spec = marines_3_vs_2()
    # two battles; type, x, y, health, shield, cooldown, alive: allies 0-2, enemies 3-4
    units = torch.tensor([[[marine, 10, 10, 1.0, 0, 0.0, 1], [marine, 10, 12, 1.0, 0, 0.4, 1],
                           [marine, 4, 11, 0.0, 0, 0.0, 0],
                           [marine, 12, 10, 0.9, 0, 0, 1], [marine, 14, 12, 0.5, 0, 0, 1]],
                          [[marine, 10, 10, 1.0, 0, 0.0, 1], [marine, 10, 12, 1.0, 0, 0.7, 1],
                           [marine, 20, 20, 1.0, 0, 0.2, 1],
                           [marine, 12, 10, 0.9, 0, 0, 1], [marine, 14, 12, 0.5, 0, 0, 1]]]).float()
    avail = torch.zeros(2, 3, 7, dtype=torch.bool)
    avail[:, :, :5] = True
    avail[:, 0, 5:] = True  # ally 0 reaches both enemies, weapon ready
    avail[:, 1, 6] = True  # ally 1 the second, cooling down
    avail[0, 2] = False
    avail[0, 2, 4] = True  # battle 0: ally 2 is dead (stop only); battle 1: out of range
    graphs = battle_graphs(units, avail, spec)
    actions = torch.tensor([[5, 2, 4], [0, 6, 4]])  # attack/move/stop (dead), move/attack/stop
    def counts(counted):
        return situation_counts(graphs, *live_action_groups(graphs, actions, counted, spec), spec)

    both = counts(torch.tensor([True, True]))
    # rows: no enemy in range, in range and ready, in range and cooling; columns: move,
    # stop, attack; battle 0: the dead agent's stop is not counted
    assert both.tolist() == [[[0, 0, 0], [0, 0, 1], [1, 0, 0]],
                             [[0, 1, 0], [1, 0, 0], [0, 0, 1]]]
    first = counts(torch.tensor([True, False]))
    assert first.tolist() == [both[0].tolist(), [[0] * 3] * 3]


def test_battle_actions_focus_by_hand(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from battle_actions import focus_counts

    _, spec = marines_3_vs_2()  # attack slots 5 (enemy 0) and 6 (enemy 1)
    # four battles of three agents: two on enemy 1 and one on enemy 0; all three on enemy
    # 0; one attack (not counted: fewer than two); two on enemy 0, the third dead
    actions = torch.tensor([[6, 5, 6], [5, 5, 5], [0, 6, 4], [5, 5, 5]])
    live = torch.tensor([[True] * 3, [True] * 3, [True] * 3, [True, True, False]])
    groups = torch.tensor([[2, 2, 2], [2, 2, 2], [0, 2, 1], [2, 2, 2]])
    got = focus_counts(actions, live, groups, spec)
    assert got.tolist() == [[3, 2], [3, 3], [0, 0], [2, 2]]


def test_football_ball_owners_action_counted_by_hand():
    import torch

    from acegnn.envs.grf.engine import A
    from acegnn.envs.grf.task import OWNER_GROUPS as GROUPS
    from acegnn.envs.grf.task import grf_graphs, owner_counts

    # three games of 3 agents, 1 opponent and the ball (x, y, z, dx, dy, dz, possession):
    # agent 1 owns the ball at x 0.7; agent 2 at x 0.4; nobody (the ball in flight)
    units = torch.zeros(3, 5, 7)
    units[:, :3, 0] = torch.tensor([0.2, 0.7, 0.4])
    units[0, 1, 6], units[1, 2, 6] = 1.0, 1.0
    units[0, 4, 6], units[1, 4, 6], units[2, 4, 6] = 0.0, 0.0, -1.0
    graphs = grf_graphs(units, torch.ones(3, 3, 19, dtype=torch.bool), 3)
    actions = torch.tensor([[A["short_pass"], A["shot"], A["left"]],  # the owner shoots
                            [A["shot"], A["idle"], A["long_pass"]],  # the owner passes long
                            [A["shot"], A["shot"], A["shot"]]])  # no owner: nothing counted
    got = owner_counts(graphs, actions, torch.tensor([True, True, True]), 3)
    g = list(GROUPS)
    want = torch.zeros(3, len(GROUPS) + 2)
    want[0, g.index("shot")], want[0, len(g)], want[0, len(g) + 1] = 1.0, 0.7, 1.0
    want[1, g.index("long_or_high_pass")], want[1, len(g) + 1] = 1.0, 1.0
    assert torch.allclose(got, want)
    # a step past an episode's end is not counted
    assert torch.equal(owner_counts(graphs, actions, torch.tensor([False, True, True]), 3)[0],
                       torch.zeros(len(GROUPS) + 2))
    # the official code's features: no unit ids, x from the goal; the same counts
    official = grf_graphs(units, torch.ones(3, 3, 19, dtype=torch.bool), 3, features="official")
    assert torch.allclose(owner_counts(official, actions, torch.tensor([True, True, True]), 3,
                                       "official"), want)


def test_value_on_states_returns_to_go_by_hand(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from value_on_states import decision_values, returns_to_go

    # two environments, four steps; the first ends after step 2 (its step 3 is past the
    # end), the second plays all four
    rewards = torch.tensor([[1.0, 0.0], [2.0, 1.0], [4.0, 0.0], [8.0, 2.0]])
    counted = torch.tensor([[True, True], [True, True], [True, True], [False, True]])
    got = returns_to_go(rewards, counted, 0.5)
    assert torch.allclose(got, torch.tensor([[1 + 1 + 1.0, 0 + 0.5 + 0 + 0.25],
                                             [2 + 2.0, 1 + 0 + 0.5],
                                             [4.0, 0 + 1.0],
                                             [0.0, 2.0]]))

    class Rollout:  # two graphs of three agents: the last agents are 1 and 5
        next_agent = torch.tensor([2, -1, 1, 5, 3, -1])
        chosen_value = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])

    assert decision_values(Rollout, 2).tolist() == pytest.approx([0.2, 0.6])
    Rollout.next_agent = torch.tensor([-1, -1, 1, 5, 3, -1])
    with pytest.raises(ValueError, match="exactly one last agent"):
        decision_values(Rollout, 2)


def test_move_value_fit_targets_by_hand(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from move_value_fit import distance_change

    # agent 0 at (9, 9); enemies at (9, 18) (9 away, north), (10, 9) (dead, 1 away) and
    # (0, 9) (9 away, west); two allies, columns: type, x, y, health, shield, cooldown, alive
    u = torch.tensor([[[0, 9, 9, 1, 0, 0, 1], [0, 5, 5, 1, 0, 0, 1],
                       [0, 9, 18, 1, 0, 0, 1], [0, 10, 9, 1, 0, 0, 0], [0, 0, 9, 1, 0, 0, 1]]]).float()
    got = distance_change(u, 2)[0]
    # in units of 9 both live enemies are 1 away; a step of 0.1 north (west) brings the
    # north (west) one to 0.9; east or south leaves the nearer at sqrt(1 + 0.1^2)
    side = 1.01 ** 0.5 - 1
    assert got.tolist() == pytest.approx([-0.1, side, side, -0.1], abs=1e-6)


def test_move_value_fit_runs_on_smax(tmp_path):
    pytest.importorskip("jaxmarl")
    text = run(["scripts/move_value_fit.py", "--scenario", "3m", "--envs", "4", "--play-steps",
                "10", "--test", "8", "--steps", "2", "--hidden", "8", "--value-layers", "1", "2",
                "--json", str(tmp_path / "fit.json")])
    rows = json.loads((tmp_path / "fit.json").read_text())
    assert [(r["value_layers"], r["step"]) for r in rows] == [(1, 2), (2, 2)]
    assert all(r["error"] > 0 and r["error_between_moves"] > 0 for r in rows)
    assert "held out" in text


def test_bench_study_reads_trial_times_and_tabulates_by_hand(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_study import study_file, table, trial_times

    path = study_file(str(tmp_path), 1024)
    names = ["ace_seed0", "ace_seed1", "ace_wo_ia_seed0", "ace_wo_ia_seed1"]
    for i, name in enumerate(names[:3]):
        (tmp_path / "s" / name).mkdir(parents=True)
        done = tmp_path / "s" / name / "study.json"
        done.write_text(json.dumps({"samples": 1024, "wall_s": 10.0 + i}))
        os.utime(done, (1000.0 + i, 1000.0 + i))
    with pytest.raises(RuntimeError, match="trial ace_wo_ia_seed1 .* did not finish"):
        trial_times(path, str(tmp_path / "s"))
    (tmp_path / "s" / names[3]).mkdir()
    (tmp_path / "s" / names[3] / "study.json").write_text(json.dumps({"wall_s": 4.0}))
    times = trial_times(path, str(tmp_path / "s"))
    assert sorted(times) == names and times["ace_seed1"] == (1001.0, 11.0)
    text = table([{"cpus": 1, "wall_s": 60.0, "trials": times, "train_s": 37.0},
                  {"cpus": 2, "wall_s": 40.0, "trials": times, "train_s": 38.5}])
    assert "| 1 | 4 | 60.0 | 37.0 | 1.00x |" in text
    assert "| 2 | 4 | 40.0 | 38.5 | 1.50x |" in text


def test_overlap_round_rates_by_hand():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_overlap import round_rates
    rows = [{"samples": 100, "collect_s": 9.0, "learn_s": 1.0},   # the replay filling
            {"samples": 300, "collect_s": 1.0, "learn_s": 3.0},   # 200 steps in 4 s
            {"samples": 600, "collect_s": 0.5, "learn_s": 5.5},   # 300 in 6 s
            {"samples": 600, "collect_s": 0.0, "learn_s": 0.0}]   # nothing: left out
    assert round_rates(rows, skip=1) == [50.0, 50.0]
    assert round_rates(rows, skip=2) == [50.0]
    assert round_rates(rows[:1], skip=1) == []


def test_bench_overlap_trains_both_settings(tmp_path):
    out = tmp_path / "overlap.json"
    text = run(["scripts/bench_overlap.py", "configs/spiders_fly_5x5.yaml", "--samples", "768",
                "--skip", "1", "--json", str(out), "--", "model.hidden=8",
                "train.batch_size=16", "train.samples_per_collect=128",
                "train.learning_starts=128", "train.updates_per_collect=2"])
    assert "overlap=false run 0:" in text and "overlap=true run 0:" in text
    rec = json.loads(out.read_text())
    # 768 steps in rounds of 128, the first row left out: without overlap rows at 128 ...
    # 768; with it the first row already holds the round collected ahead (256 ... 768)
    assert len(rec["rates"]["false"]) == 5 and len(rec["rates"]["true"]) == 4
    assert rec["median_on"] > 0 and rec["median_off"] > 0


def test_bench_pooling_times_the_value_encoders_pooling():
    rec = json.loads(run(["scripts/bench_pooling.py", "--graphs", "3", "--units", "4",
                          "--hidden", "8", "--repeats", "2"]))
    assert (rec["graphs"], rec["units"], rec["hidden"], rec["pool"]) == (3, 4, 8, "mean_max")
    assert rec["pooled_value_ms"] > 0
