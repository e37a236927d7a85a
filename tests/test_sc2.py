"""The StarCraft II back-end (acegnn.envs.smac.sc2), tested without the game.

Two halves. The tables, the config and the action layout are checked here. Everything
that reads real ``s2clientprotocol`` messages (``raw_pb2.Unit``) lives in
``tests/sc2_checks.py`` and runs in a subprocess with
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``: the generated protocol modules need
protobuf < 3.21 or the pure-Python implementation, and the choice must be made before
protobuf is first imported, which this process (TensorBoard) may already have done.
Each of its checks is reported here as ``test_with_real_units[<check>]``; those of the
installed oxwhirl/smac (docs/sc2.md's recipe: its ``StarCraft2Env`` built without the game)
skip where it is not installed. Nothing here launches StarCraft II.
"""
import ast
import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch

from acegnn.envs.smac.sc2 import (ALLY_TYPE_ORDER, MAX_COOLDOWN, SC2_UNIT_TYPES, SMAC_MAPS,
                                  UNSUPPORTED_MAPS, SC2Config, ally_unit_types, sc2_spec)
from acegnn.envs.smac.units import UNIT_TYPES, battle_graphs, battle_layout, battle_schema
from acegnn.graph import unit_index

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(HERE, "sc2_checks.py")


# The tables ---------------------------------------------------------------------------
def test_ally_types_are_numbered_like_smac():
    # StarCraft2Env._init_ally_unit_types: offsets from the smallest ally id
    assert ally_unit_types("MMM", 1970) == {1970: "marauder", 1971: "marine", 1972: "medivac"}
    assert ally_unit_types("colossi_stalkers_zealots", 2000) == {2000: "colossus", 2001: "stalker",
                                                                 2002: "zealot"}
    assert ally_unit_types("bane", 9) == {9: "baneling", 10: "zergling"}
    assert ally_unit_types("marines", 1970) == {1970: "marine"}
    with pytest.raises(ValueError, match="unknown SMAC map_type 'protoss'"):
        ally_unit_types("protoss", 1)


def test_tables_speak_the_schema_vocabulary():
    assert set(SMAC_MAPS.values()) == set(ALLY_TYPE_ORDER)
    assert set(MAX_COOLDOWN) == set(UNIT_TYPES)
    assert set(SC2_UNIT_TYPES.values()) == set(UNIT_TYPES)
    assert {SC2_UNIT_TYPES[i] for i in (48, 51, 54, 74, 73, 4, 105, 9, 107)} == set(UNIT_TYPES)
    assert all(n in UNIT_TYPES for order in ALLY_TYPE_ORDER.values() for n in order)
    assert set(UNSUPPORTED_MAPS) == {"2s_vs_1sc"}


# The config ---------------------------------------------------------------------------
def test_config_defaults_and_smac_arguments():
    cfg = SC2Config()
    assert (cfg.name, cfg.map_name, cfg.num_envs) == ("sc2", "5m_vs_6m", 8)
    assert cfg.env_kwargs() == {"difficulty": "7", "step_mul": 8, "game_version": None}


@pytest.mark.parametrize("field, value, message", [
    ("map_name", "5m_vs_7m", "env.map_name must be a SMAC map.*got '5m_vs_7m'"),
    ("map_name", "2s_vs_1sc", "cannot be played: its enemy is a spine crawler"),
    ("num_envs", 0, r"env.num_envs must be >= 1 \(got 0\)"),
    ("eval_envs", 0, r"env.eval_envs must be >= 1 \(got 0\)"),
    ("difficulty", "0", r"env.difficulty must be one of .*got '0'"),
    ("step_mul", 0, r"env.step_mul must be >= 1 \(got 0\)"),
    ("game_version", "", "env.game_version must be a version or null"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        SC2Config(**{field: value})


# The action layout --------------------------------------------------------------------
def mmm_spec():
    """An MMM-like battle: a marauder, a marine and a medivac against four enemies."""
    return sc2_spec(3, 4, (32.0, 24.0), 10, healers=(False, False, True))


def test_spec_follows_smac():
    spec = mmm_spec()
    assert spec.slots == 10 and spec.n_units == 7 and spec.map_size == (32.0, 24.0)
    assert set(spec.stats.attack_range) == {6.0} and set(spec.stats.sight_range) == {9.0}
    with pytest.raises(ValueError, match=r"6 \+ n_enemies = 10 actions per agent \(got 11\)"):
        sc2_spec(3, 4, (32.0, 24.0), 11)
    with pytest.raises(ValueError, match="map size must be positive"):
        sc2_spec(3, 4, (0, 24.0), 10)


def test_layout_slots_attack_enemies_and_heal_allies():
    schema = battle_schema()
    actions = battle_layout(mmm_spec()).actions
    kinds = [schema.action_kinds[int(k)].name for k in actions["kind"]]
    moves = ["noop", "stop", "move_north", "move_south", "move_east", "move_west"]
    assert kinds[:10] == moves + ["attack"] * 4  # the marauder
    assert kinds[20:] == moves + ["heal"] * 3 + ["stop"]  # the medivac; slot 9 has no ally
    target = actions["target"].view(3, 10)
    ttype = actions["target_type"].view(3, 10)
    assert target[0].tolist() == [-1] * 6 + [0, 1, 2, 3]
    assert target[2].tolist() == [-1] * 6 + [0, 1, 2, -1]
    enemy, ally = schema.node_type_index("enemy"), schema.node_type_index("ally")
    assert ttype[1].tolist() == [-1] * 6 + [enemy] * 4
    assert ttype[2].tolist() == [-1] * 6 + [ally] * 3 + [-1]


def test_passive_messages_land_on_the_target_node():
    spec = mmm_spec()
    B = 2
    units = torch.zeros(B, 7, 7)
    types = ["marauder", "marine", "medivac", "marine", "marine", "marauder", "medivac"]
    units[..., 0] = torch.tensor([float(UNIT_TYPES.index(t)) for t in types])
    units[..., 1:3] = torch.arange(14.0).view(7, 2)
    units[..., 3] = 1.0
    units[..., 6] = 1.0
    avail = torch.zeros(B, 3, 10, dtype=torch.bool)
    avail[:, :, 1] = True
    avail[:, :2, 6:] = True  # every attack
    avail[:, 2, 6:8] = True  # the medivac heals the marauder and the marine
    idx = unit_index(battle_schema(), battle_graphs(units, avail, spec))
    target = idx.action_target.view(B, 3, 10)
    for b in range(B):
        enemies, allies = idx.flat["enemy"][b * 4:(b + 1) * 4], idx.flat["ally"][b * 3:(b + 1) * 3]
        assert allies.tolist() == [7 * b, 7 * b + 1, 7 * b + 2]
        assert enemies.tolist() == [7 * b + 3 + j for j in range(4)]
        for i in range(2):  # attack slot 6 + j -> enemy j of the same battle
            assert target[b, i, 6:].tolist() == enemies.tolist()
        assert target[b, 2, 6:9].tolist() == allies.tolist()  # heal slot 6 + j -> ally j
        assert int(target[b, 2, 9]) == -1 and bool(target[b, :, :6].eq(-1).all())


# Real protocol messages, in a subprocess ----------------------------------------------
def check_names():
    with open(CHECKS) as f:
        tree = ast.parse(f.read())
    return [n.name for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.fixture(scope="module")
def real_unit_results(tmp_path_factory):
    """Run ``tests/sc2_checks.py`` once with pure-Python protobuf; its outcomes by name."""
    if importlib.util.find_spec("s2clientprotocol") is None:
        pytest.skip("s2clientprotocol is not installed (pip install -e '.[sc2]')")
    report = tmp_path_factory.mktemp("sc2") / "checks.xml"
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           CHECKS, f"--junitxml={report}"], cwd=os.path.dirname(HERE), env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    if not report.exists():
        pytest.fail(f"tests/sc2_checks.py did not run:\n{output[-4000:]}")
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        bad = case.find("failure")
        bad = bad if bad is not None else case.find("error")
        results[case.get("name")] = None if bad is None else (bad.text or bad.get("message"))
        skipped = case.find("skipped")
        if skipped is not None:
            results[case.get("name")] = ("skipped", skipped.get("message"))
    return results, output


def test_the_compiled_protobuf_is_refused_with_the_recipe():
    from google.protobuf.internal import api_implementation

    from acegnn.envs.smac.sc2 import SC2Task

    if api_implementation.Type() == "python":
        pytest.skip("this process runs the pure-Python protobuf already")
    with pytest.raises(ValueError, match="PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python"):
        SC2Task("3m", 1)


@pytest.mark.parametrize("check", check_names())
def test_with_real_units(real_unit_results, check):
    results, output = real_unit_results
    assert check in results, f"{check} did not run:\n{output[-4000:]}"
    if isinstance(results[check], tuple):
        pytest.skip(results[check][1])
    if results[check] is not None:
        pytest.fail(results[check], pytrace=False)
