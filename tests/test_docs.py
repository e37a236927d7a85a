"""The code of ``docs/new_environment.md`` runs as written and builds what it says.

The page's ```python blocks are executed in order in one namespace (a module registered
in ``sys.modules`` while it runs, as a user's file would be); the assertions below then
check the objects they built and the runs they made.
"""
import contextlib
import io
import os
import re
import shutil
import sys
import types

import pytest
import torch

from acegnn.envs import ENVS
from acegnn.graph import unit_index

PAGE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "new_environment.md")
MODULE = "acegnn_docs_new_environment"


def python_blocks(path: str) -> list:
    """The ```python code blocks of a Markdown page, in order."""
    with open(path) as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        raise ValueError(f"no ```python blocks in {path}")
    return blocks


@pytest.fixture(scope="module")
def page():
    """The namespace the page's code leaves behind, and what it printed."""
    ENVS.unregister("medics")
    module = types.ModuleType(MODULE)
    module.__file__ = PAGE
    sys.modules[MODULE] = module
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            for i, block in enumerate(python_blocks(PAGE)):
                code = compile(block, f"{PAGE}:block{i}", "exec")
                exec(code, module.__dict__)
        ns = module.__dict__
        ns["printed"] = out.getvalue()
        yield ns
    finally:
        ENVS.unregister("medics")
        sys.modules.pop(MODULE, None)
        workdir = module.__dict__.get("workdir")
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def test_page_has_the_steps_in_order():
    blocks = python_blocks(PAGE)
    order = ["def medics_rules", "GraphSchema(", "DenseLayout(", "def medics_graphs",
             "class MedicsTask(VecTask)", "task.step(", "register_env(", '"train"',
             "algo.name=qmix", "only_noop("]
    positions = [next(i for i, b in enumerate(blocks) if s in b) for s in order]
    assert positions == sorted(positions)


def test_schema_declares_the_targeted_heal(page):
    schema = page["MEDICS_SCHEMA"]
    assert [k.name for k in schema.action_kinds] == ["stay", "left", "right", "heal"]
    assert schema.targeted_kinds == (3,)
    assert schema.agent_types == ("medic",)
    assert schema.node_types == {"medic": 1, "patient": 2}
    layout = page["MEDICS_LAYOUT"]
    assert layout.validated and layout.num_actions == 10
    assert layout.actions["target"].tolist() == [-1, -1, -1, 0, 1] * 2
    patient = schema.node_type_index("patient")
    assert layout.actions["target_type"].tolist() == [-1, -1, -1, patient, patient] * 2


def test_heal_targets_the_patients_node(page):
    # the page's one-state batch
    index = page["index"]
    assert index.flat["patient"].tolist() == [2, 3]
    assert index.action_target.view(2, 5).tolist() == [[-1, -1, -1, 2, 3]] * 2
    assert page["batch"]["action"].available.view(2, 5).int().tolist() == [[1, 1, 1, 1, 0],
                                                                            [1, 1, 1, 0, 0]]
    # a batch of three states: the heals of graph b point at that graph's patients
    g = page["medics_graphs"](torch.tensor([[0, 0], [2, 4], [3, 3]]),
                              torch.tensor([[0, 1], [4, 2], [1, 3]]),
                              torch.tensor([[False, True], [False, False], [True, False]]), 5)
    idx = unit_index(page["MEDICS_SCHEMA"], g)
    assert idx.flat["patient"].tolist() == [2, 3, 6, 7, 10, 11]
    heal0 = idx.action_target.view(3, 2, 5)[:, :, 3]
    heal1 = idx.action_target.view(3, 2, 5)[:, :, 4]
    assert heal0.tolist() == [[2, 2], [6, 6], [10, 10]]
    assert heal1.tolist() == [[3, 3], [7, 7], [11, 11]]
    assert bool((idx.action_kind.view(3, 2, 5)[:, :, 3:] == 3).all())
    # only a medic on an unhealed patient's cell may heal it
    avail = g["action"].available.view(3, 2, 5)[:, :, 3:].int().tolist()
    assert avail == [[[1, 0], [1, 0]], [[0, 1], [1, 0]], [[0, 1], [0, 1]]]
    # features: cell / (length - 1); the medic-to-patient edges carry the healed flag
    assert g["patient"].x.view(3, 2, 2)[0].tolist() == [[0.0, 0.0], [0.25, 1.0]]
    mp = g[("medic", "near", "patient")].edge_attr.view(3, 4, 2)
    assert mp[1].tolist() == [[0.5, 0.0], [0.0, 0.0], [0.0, 0.0], [-0.5, 0.0]]


def test_steps_of_a_hand_set_state(page):
    first, second = page["first"], page["second"]
    assert first.reward.tolist() == [1.0] and second.reward.tolist() == [1.0]
    assert first.terminated.tolist() == [False] and second.terminated.tolist() == [True]
    assert first.truncated.tolist() == [False] and second.truncated.tolist() == [False]
    assert first.next_obs["medics"].tolist() == [[1, 4]]
    assert first.next_obs["healed"].tolist() == [[True, False]]
    assert second.next_obs["healed"].tolist() == [[True, True]]
    task = page["task"]
    assert task.t.tolist() == [0] and task.healed.tolist() == [[False, False]]  # auto-reset
    # two medics healing the same patient heal it once; a wall; an unavailable heal
    rules = page["medics_rules"]
    medics, healed, reward = rules(torch.tensor([[2, 2]]), torch.tensor([[2, 0]]),
                                   torch.tensor([[False, False]]), torch.tensor([[3, 3]]), 5)
    assert reward.tolist() == [1.0] and healed.tolist() == [[True, False]]
    with pytest.raises(ValueError, match="not available"):
        rules(torch.tensor([[0, 2]]), torch.tensor([[2, 3]]), torch.tensor([[False, False]]),
              torch.tensor([[1, 0]]), 5)
    with pytest.raises(ValueError, match="not available"):
        rules(torch.tensor([[2, 2]]), torch.tensor([[2, 3]]), torch.tensor([[True, False]]),
              torch.tensor([[3, 0]]), 5)


def test_truncation_and_determinism(page):
    MedicsTask = page["MedicsTask"]
    a, b = MedicsTask(num_envs=6, time_limit=3, seed=7), MedicsTask(num_envs=6, time_limit=3, seed=7)
    assert all(torch.equal(a.observe()[k], b.observe()[k]) for k in a.obs_spec)
    stay = torch.zeros(6, 2, dtype=torch.long)
    for _ in range(2):
        tr = a.step(stay)
    saved = a.state_dict()
    tr = a.step(stay)
    assert bool((tr.truncated | tr.terminated).all()) and not bool(tr.truncated[tr.terminated].any())
    after = a.observe()
    a.load_state_dict(saved)
    a.step(stay)
    assert all(torch.equal(after[k], v) for k, v in a.observe().items())
    for k, (shape, dtype) in a.obs_spec.items():
        assert tuple(after[k].shape) == (6, *shape) and after[k].to(dtype).long().equal(after[k].long())
    # heal where possible, else walk right (left at the wall)
    walk = lambda g: (g["action"].available.view(-1, 5) * torch.tensor([1, 2, 3, 4, 4])).argmax(1)  # noqa: E731
    r1 = a.evaluate(walk, 5, seed=3)
    r2 = MedicsTask(num_envs=2, time_limit=3, seed=99).evaluate(walk, 5, seed=3)
    assert r1.mean_healed > 0
    assert r1 == r2 and list(r1.metrics()) == ["all_healed", "mean_healed", "mean_steps"]


def test_config_validation(page):
    Config = page["MedicsConfig"]
    for key, value in [("length", 1), ("num_envs", 0), ("time_limit", 0)]:
        with pytest.raises(ValueError, match=rf"env\.{key} .*\(got {value}\)"):
            Config(**{key: value})
    assert isinstance(Config().make(0), page["MedicsTask"])
    assert page["bad_status"] == 2
    assert "env.length must be in 2..127 (got 1)" in page["err"].getvalue()
    assert not os.path.exists(os.path.join(page["workdir"], "bad"))


@pytest.mark.parametrize("run, status, eval_status, result",
                         [("ace", "train_status", "eval_status", "ace_eval"),
                          ("qmix", "qmix_status", "qmix_eval_status", "qmix_eval")])
def test_both_learners_train_and_evaluate_through_the_cli(page, run, status, eval_status, result):
    assert page[status] == 0 and page[eval_status] == 0
    run_dir = os.path.join(page["workdir"], run)
    with open(os.path.join(run_dir, "eval.csv")) as f:
        rows = f.read().splitlines()
    assert rows[0] == "samples,all_healed,mean_healed,mean_steps"
    assert [r.split(",")[0] for r in rows[1:]] == ["256", "512"]
    out = page[result]
    assert list(out) == ["checkpoint", "samples", "all_healed", "mean_healed", "mean_steps"]
    assert out["samples"] == 512 and 0 <= out["mean_healed"] <= 2 and 1 <= out["mean_steps"] <= 12
    with open(os.path.join(run_dir, "config.yaml")) as f:
        assert "name: medics" in f.read()


def test_dead_agent_mask(page):
    assert "[[[1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]]" in page["printed"]


# docs/encoders.md: the example step, written to a file and trained from the command line
def test_the_encoder_page_example_trains_resumes_and_is_under_30_lines(tmp_path, monkeypatch):
    from acegnn.cli import main

    encoders = os.path.join(os.path.dirname(PAGE), "encoders.md")
    (code,) = [b for b in python_blocks(encoders) if b.startswith("# my_encoders.py")]
    assert len(code.strip().splitlines()) <= 30
    (tmp_path / "my_encoders.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_encoders", raising=False)  # this file's, not another
    with open(encoders) as f:
        command = re.search(r"acegnn train (configs/\S+) (model.conv=\S+) \\\n\s+(\S+)", f.read())
    config, *overrides = command.groups()
    tiny = ["train.total_samples=512", "train.samples_per_collect=256", "train.batch_size=16",
            "train.updates_per_collect=2", "train.learning_starts=256", "train.eval_every=512",
            "train.eval_episodes=2", "train.progress=false", "model.hidden=16", "env.num_envs=8",
            "train.stop_on_success=false", "train.checkpoint_every=256"]
    root = os.path.join(os.path.dirname(PAGE), os.pardir)
    args = [os.path.join(root, config), *overrides, *tiny, f"run.dir={tmp_path}", "run.name=gm"]
    assert main(["train", *args, "train.halt_after=256"]) == 3
    assert main(["train", "--resume", str(tmp_path / "gm")]) == 0
    from acegnn.run import restore

    cfg, _, task, learner = restore(str(tmp_path / "gm"))
    task.close()
    step = learner.net.unit_encoder.conv
    assert type(step).__name__ == "GatedMean" and step.gate.bias is None  # bias=false reached it
