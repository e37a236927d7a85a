"""Config files composed from a base: the shipped files resolve to the frozen snapshots,
and ``base:`` merges, inherits and refuses as documented (``acegnn.config.read_config_file``)."""
import glob
import os

import pytest

from acegnn.config import load_config, to_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNAPSHOTS = os.path.join(ROOT, "tests", "data", "resolved_configs")
CONFIGS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "configs", "*.yaml")))


def test_every_config_has_a_snapshot_and_every_snapshot_a_config():
    assert CONFIGS == sorted(os.listdir(SNAPSHOTS))


@pytest.mark.parametrize("name", CONFIGS)
def test_a_shipped_config_resolves_to_its_snapshot(name):
    """Each file resolves, through its bases, to the config it held as a full copy. A
    deliberate change of a config updates its snapshot in the same commit:
    ``python -c "from acegnn.config import load_config, to_yaml;
    print(to_yaml(load_config('configs/NAME', backend=False)), end='')" > tests/data/resolved_configs/NAME``."""
    resolved = to_yaml(load_config(os.path.join(ROOT, "configs", name), backend=False))
    assert resolved == open(os.path.join(SNAPSHOTS, name)).read()


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_a_file_overrides_its_base_and_inherits_the_rest(tmp_path):
    write(tmp_path / "base.yaml", "env:\n  name: spiders_fly\n  grid_size: 6\n"
          "algo:\n  lr: 0.01\n  gamma: 0.9\ntrain:\n  batch_size: 64\n")
    path = write(tmp_path / "deltas" / "run.yaml", "base: ../base.yaml\nalgo:\n  lr: 0.02\n")
    cfg = load_config(path, ["train.batch_size=32"])
    assert (cfg.env.grid_size, cfg.algo.lr, cfg.algo.gamma, cfg.train.batch_size) == (6, 0.02, 0.9, 32)


def test_a_list_of_bases_merges_in_order_and_a_chain_resolves(tmp_path):
    write(tmp_path / "a.yaml", "env:\n  name: spiders_fly\n  grid_size: 6\nalgo:\n  lr: 0.01\n")
    write(tmp_path / "b.yaml", "env:\n  grid_size: 7\ntrain:\n  batch_size: 48\n")
    write(tmp_path / "ab.yaml", "base: [a.yaml, b.yaml]\nalgo:\n  gamma: 0.5\n")
    cfg = load_config(write(tmp_path / "top.yaml", "base: ab.yaml\ntrain:\n  eval_episodes: 3\n"))
    assert (cfg.env.grid_size, cfg.algo.lr, cfg.algo.gamma) == (7, 0.01, 0.5)  # b after a
    assert (cfg.train.batch_size, cfg.train.eval_episodes) == (48, 3)
    ba = load_config(write(tmp_path / "ba.yaml", "base: [b.yaml, a.yaml]\n"))
    assert ba.env.grid_size == 6


def test_another_algo_keeps_the_keys_it_has_and_leaves_out_the_others(tmp_path):
    write(tmp_path / "ace.yaml", "env:\n  name: spiders_fly\nalgo:\n  name: ace_dqn\n  lr: 0.007\n"
          "  order: random\n  target: last_agent\nmodel:\n  hidden: 24\n  passive: false\n")
    cfg = load_config(write(tmp_path / "qmix.yaml", "base: ace.yaml\nalgo:\n  name: qmix\n"))
    assert cfg.algo.name == "qmix" and cfg.algo.lr == 0.007 and cfg.model.hidden == 24
    assert not hasattr(cfg.algo, "order") and not hasattr(cfg.model, "passive")
    # the same key given as an override is still checked, not dropped
    with pytest.raises(ValueError, match="order"):
        load_config(str(tmp_path / "ace.yaml"), ["algo.name=qmix"])


def test_another_env_leaves_out_the_bases_env_keys_it_lacks(tmp_path):
    write(tmp_path / "spiders.yaml", "env:\n  name: spiders_fly\n  grid_size: 6\n  num_envs: 3\n")
    cfg = load_config(write(tmp_path / "smax.yaml", "base: spiders.yaml\nenv:\n  name: smax\n"),
                      backend=False)
    assert cfg.env.name == "smax" and cfg.env.num_envs == 3 and not hasattr(cfg.env, "grid_size")


@pytest.mark.parametrize("files, error", [
    ({"top.yaml": "base: missing.yaml\n"}, r"config file not found: .*missing.yaml \(the base of .*top.yaml\)"),
    ({"top.yaml": "base: mid.yaml\n", "mid.yaml": "base: top.yaml\n"},
     r"each other's base: .*top.yaml -> .*mid.yaml -> .*top.yaml"),
    ({"top.yaml": "base: top.yaml\n"}, r"each other's base: .*top.yaml -> .*top.yaml"),
    ({"top.yaml": "base: 3\n"}, r"base must be a config file's path or a list of them \(got 3\)"),
    ({"top.yaml": "base: []\n"}, r"base must be"),
    ({"top.yaml": "- a\n- b\n"}, r"is not a mapping"),
    ({"top.yaml": "base: bad.yaml\n", "bad.yaml": "env: [\n"}, r"cannot read the config file .*bad.yaml \(the base of"),
])
def test_bad_bases_are_refused_naming_the_file(tmp_path, files, error):
    for name, text in files.items():
        write(tmp_path / name, text)
    with pytest.raises(ValueError, match=error):
        load_config(str(tmp_path / "top.yaml"))


def test_a_run_saves_the_resolved_config_without_base(tmp_path):
    from acegnn.cli import main

    args = ["train", os.path.join(ROOT, "configs", "spiders_fly_5x5_ctde.yaml"),
            "train.total_samples=16", "train.samples_per_collect=8", "train.batch_size=4",
            "train.learning_starts=4", "train.updates_per_collect=1", "train.eval_every=0",
            "train.checkpoint_every=0", "model.hidden=8", f"run.dir={tmp_path}", "run.name=r"]
    assert main(args) == 0
    saved = (tmp_path / "r" / "config.yaml").read_text()
    assert "base" not in saved and "distill_weight: 1.0" in saved and "layers: 3" in saved


def test_train_compile_is_refused_for_a_learner_without_compiled_kernels(tmp_path, capsys,
                                                                           monkeypatch):
    """QMIX has no compiled kernels: ``train.compile`` is refused when the config is
    loaded, before a run directory exists; a learner that does not say
    (``compiled_kernels = None``, e.g. one of your own) when the trainer is built."""
    from acegnn.algos import ValueDecomposition
    from acegnn.cli import main

    args = ["train", os.path.join(ROOT, "configs", "spiders_fly_5x5_baselines.yaml"),
            "train.compile=true", "train.total_samples=16", "train.eval_every=0",
            f"run.dir={tmp_path}", "run.name=r"]
    error = "train.compile: qmix has no compiled kernels (they value ACE's candidates)"
    assert main(args) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert not load_config(args[1], ["train.compile=false"]).train.compile
    monkeypatch.setattr(ValueDecomposition, "compiled_kernels", None)
    assert load_config(args[1], ["train.compile=true"]).train.compile
    assert main(args) == 2
    assert error in capsys.readouterr().err
