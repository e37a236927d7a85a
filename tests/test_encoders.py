"""Graph encoders from the config: any PyG layer that reads edge features, a user's class
by import path, keyword arguments, several message-passing steps, and the contract."""
import sys
import textwrap

import pytest
import torch

from acegnn.cli import main
from acegnn.config import load_config
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import collate
from acegnn.nn import ACENetwork

SCHEMA = smac_like_schema()
SPIDERS = "configs/spiders_fly_5x5.yaml"
TINY = ["train.total_samples=256", "train.samples_per_collect=128", "train.batch_size=16",
        "train.updates_per_collect=1", "train.learning_starts=128", "train.eval_every=256",
        "train.eval_episodes=2", "train.progress=false", "model.hidden=16", "env.num_envs=8",
        "train.stop_on_success=false"]


def states(seed=0, dead=False):
    g = torch.Generator().manual_seed(seed)
    s = random_state(SCHEMA, 3, 2, g)
    if dead:
        s["enemy"].alive = torch.tensor([True, False])
    return s


def values(net, s):
    return net.rollout(collate([s])).chosen_value


@pytest.mark.parametrize("conv, kwargs", [
    ("GINEConv", {}), ("GENConv", {}), ("GeneralConv", {}), ("GATv2Conv", {"heads": 4}),
    ("TransformerConv", {"heads": 2}), ("GATConv", {}), ("ResGatedGraphConv", {}),
    ("CGConv", {})])
def test_a_pyg_layer_that_reads_edge_features_is_a_unit_conv_by_name(conv, kwargs):
    torch.manual_seed(0)
    net = ACENetwork(SCHEMA, hidden=16, conv=conv, conv_kwargs=kwargs)
    s = states()
    moved = s.clone()
    for et in SCHEMA.edge_types:
        moved[et].edge_attr = moved[et].edge_attr + 1.0
    assert not torch.allclose(values(net, s), values(net, moved))  # the edges are read
    dead = states(dead=True)
    other = dead.clone()
    other["enemy"].x[1] += 5.0  # a dead unit's features change nothing
    assert torch.allclose(values(net, dead), values(net, other))
    values(net, s).sum().backward()
    step = net.unit_encoder.conv
    assert all(p.grad is not None for p in step.parameters() if p.requires_grad)
    assert step.heads == kwargs.get("heads", 1)


def test_layers_that_cannot_be_unit_convs_are_refused_with_the_reason():
    for conv, message in (("SAGEConv", "SAGEConv takes no edge features"),
                          ("PNAConv", r"PNAConv needs \['aggregators', 'scalers', 'deg'\]"),
                          ("PDNConv", r"PDNConv needs \['hidden_channels'\]"),
                          ("no_such_conv", "neither registered"),
                          ("acegnn_no_such_module:Conv", "cannot be imported"),
                          ("torch.nn:Identity", r"does not meet the unit conv contract.*needs a "
                           r"reset_parameters\(\) method, forward\(h_dict")):
        with pytest.raises((ValueError, TypeError), match=message):
            ACENetwork(SCHEMA, hidden=16, conv=conv)
    with pytest.raises(ValueError, match="PDNConv fails on the edge types of this schema"):
        ACENetwork(SCHEMA, hidden=16, conv="PDNConv", conv_kwargs={"hidden_channels": 8})
    with pytest.raises(ValueError, match="hidden .16. must be divisible by heads .got 3."):
        ACENetwork(SCHEMA, hidden=16, conv="gatv2", conv_kwargs={"heads": 3})
    with pytest.raises(ValueError, match="with model.conv_kwargs=.*unexpected keyword"):
        ACENetwork(SCHEMA, hidden=16, conv="ace", conv_kwargs={"heads": 2})


def test_several_message_passing_steps_each_with_weights_of_its_own():
    torch.manual_seed(0)
    one = ACENetwork(SCHEMA, hidden=16, conv="gatv2")
    torch.manual_seed(0)
    two = ACENetwork(SCHEMA, hidden=16, conv="gatv2", conv_layers=2)
    steps = two.unit_encoder.convs
    assert len(steps) == 2 and steps[0] is two.unit_encoder.conv
    assert sum(p.numel() for p in two.parameters()) == \
        sum(p.numel() for p in one.parameters()) + sum(p.numel() for p in steps[1].parameters())
    s = states()
    before = values(two, s)
    with torch.no_grad():
        for p in steps[1].parameters():
            p.add_(0.5)
    assert not torch.allclose(before, values(two, s))  # the second step is applied
    for conv in ("ace", "GINEConv"):  # the paper's step encodes edges itself: also stacked
        deep = ACENetwork(SCHEMA, hidden=16, conv=conv, conv_layers=3)
        assert values(deep, s).shape == before.shape
    with pytest.raises(ValueError, match="model.conv_layers must be at least 1"):
        load_config(SPIDERS, ["model.conv_layers=0"])


def test_conv_kwargs_from_the_config_reach_the_layer():
    cfg = load_config(SPIDERS, ["model.conv=gatv2", "model.conv_kwargs.heads=4",
                                "model.conv_kwargs.dropout=0.0"])
    assert dict(cfg.model.conv_kwargs) == {"heads": 4, "dropout": 0.0}
    net = ACENetwork.from_config(SCHEMA, cfg.model)
    layer = next(iter(net.unit_encoder.conv.conv.convs.values()))
    assert layer.heads == 4 and layer.out_channels == cfg.model.hidden // 4
    with pytest.raises(ValueError, match="neither registered"):
        load_config(SPIDERS, ["model.conv=NoSuchConv"])


def test_a_users_encoder_by_import_path_trains_resumes_and_evaluates(tmp_path, monkeypatch):
    (tmp_path / "acegnn_test_user_encoders.py").write_text(textwrap.dedent('''
        from torch import nn

        class Scaled(nn.Module):  # the unit embedding plus a scaled mean of the edges
            def __init__(self, schema, hidden, scale=1.0):
                super().__init__()
                self.scale, self.lin = scale, nn.Linear(hidden, hidden)

            def reset_parameters(self):
                self.lin.reset_parameters()

            def forward(self, h_dict, edge_index_dict, edge_emb_dict):
                out = dict(h_dict)
                for (src, _, dst), ei in edge_index_dict.items():
                    msg = self.lin(edge_emb_dict[(src, _, dst)])
                    out[dst] = out[dst].index_add(0, ei[1], self.scale * msg)
                return out
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acegnn_test_user_encoders", raising=False)
    run = tmp_path / "runs" / "mine"
    args = [*TINY, "model.conv=acegnn_test_user_encoders:Scaled", "model.conv_kwargs.scale=0.5",
            f"run.dir={tmp_path / 'runs'}", "run.name=mine"]
    assert main(["train", SPIDERS, *args, "train.halt_after=128",
                 "train.checkpoint_every=128"]) == 3  # "killed" after a checkpoint
    assert main(["train", "--resume", str(run)]) == 0
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "acegnn_test_user_encoders:Scaled" in (run / "config.yaml").read_text()


def test_the_official_relation_step_against_a_hand_written_reference():
    """``model.conv=relation``: each unit's new embedding from its incoming edges, one
    unit and one edge at a time through the whole message MLP over [edge features, source
    embedding] (the step splits its first layer), the mean of the messages' first half,
    the max of the second, 0 without edges; against the step on the whole graph."""
    torch.manual_seed(0)
    H = 8
    net = ACENetwork(SCHEMA, hidden=H, conv="relation")
    step = net.unit_encoder.conv
    assert len(net.unit_encoder.edge_encoders) == 0  # it reads the edge features itself
    g = torch.Generator().manual_seed(3)
    h = {"ally": torch.randn(3, H, generator=g), "enemy": torch.randn(2, H, generator=g)}
    ei = {("ally", "near", "ally"): torch.tensor([[0, 1, 2], [1, 2, 1]]),
          ("ally", "near", "enemy"): torch.tensor([[0, 2], [0, 0]]),
          ("enemy", "near", "ally"): torch.tensor([[1], [1]]),
          ("enemy", "near", "enemy"): torch.zeros(2, 0, dtype=torch.long)}  # enemy 1: no edge
    x = {et: torch.randn(e.size(1), SCHEMA.edge_types[et], generator=g) for et, e in ei.items()}
    keep = {("ally", "near", "ally"): torch.tensor([True, False, True])}  # one edge left out
    for kept in (None, keep):
        got = step.forward_encoding(h, ei, x, None, kept)
        with torch.no_grad():  # the path without autograd (F.linear) gives the same
            plain = step.forward_encoding(h, ei, x, None, kept)
        assert all(torch.allclose(got[t], plain[t], atol=1e-6) for t in got)
        for t, rows in h.items():
            for j in range(rows.size(0)):
                msgs = [step.messages["__".join(et)](torch.cat([x[et][k], h[et[0]][e[0, k]]]))
                        for et, e in ei.items() if et[2] == t for k in range(e.size(1))
                        if e[1, k] == j and (kept is None or et not in kept or kept[et][k])]
                mean = torch.stack(msgs)[:, :H].mean(0) if msgs else torch.zeros(H)
                top = torch.stack(msgs)[:, H:].max(0).values if msgs else torch.zeros(H)
                update = step.updates[t][0]
                want = torch.relu(update.weight @ torch.cat([rows[j], mean, top]) + update.bias)
                assert torch.allclose(got[t][j], want, atol=1e-6), (t, j, kept)
    first = step.messages["ally__near__ally"]
    assert len(first) == 4  # two fc + ReLU (the official depth): features + H -> H -> 2H
    assert first[0].weight.shape == (H, SCHEMA.edge_types[("ally", "near", "ally")] + H)
    assert first[2].weight.shape == (2 * H, H)
    s, dead = states(), states(dead=True)
    other = dead.clone()
    other["enemy"].x[1] += 5.0  # a dead unit's features change nothing
    assert torch.allclose(values(net, dead), values(net, other))
    moved = s.clone()
    for et in SCHEMA.edge_types:
        moved[et].edge_attr = moved[et].edge_attr + 1.0
    assert not torch.allclose(values(net, s), values(net, moved))  # the edges are read
    values(net, s).sum().backward()
    assert all(p.grad is not None for p in step.parameters())
    # the split first layer's gradients are the unsplit layer's
    p = {et: xe.clone().requires_grad_() for et, xe in x.items()}
    hh = {t: v.clone().requires_grad_() for t, v in h.items()}
    et = ("ally", "near", "ally")
    seq = step.messages["__".join(et)]
    gw = torch.autograd.grad(step.message(et, p[et], hh["ally"], ei[et][0]).square().sum(),
                             [seq[0].weight, seq[0].bias, p[et], hh["ally"]])
    full = seq(torch.cat([p[et], hh["ally"][ei[et][0]]], dim=1))
    want = torch.autograd.grad(full.square().sum(), [seq[0].weight, seq[0].bias, p[et], hh["ally"]])
    for a, b in zip(gw, want):
        assert torch.allclose(a, b, atol=1e-5)


def test_a_step_without_edge_encoders_reads_the_edges_raw_features():
    """A step class with ``uses_edge_encoders = False`` gets no edge encoders, and its
    ``forward`` the live edges' features ``[E, F_e]`` in place of embeddings."""
    from torch import nn

    from acegnn.nn.unit_encoder import edge_key

    seen = {}

    class RawEdges(nn.Module):
        uses_edge_encoders = False

        def __init__(self, schema, hidden):
            super().__init__()
            self.lin = nn.ModuleDict({edge_key(et): nn.Linear(f, hidden)
                                      for et, f in schema.edge_types.items()})

        def reset_parameters(self):
            for m in self.lin.values():
                m.reset_parameters()

        def forward(self, h_dict, edge_index_dict, edge_emb_dict):
            out = dict(h_dict)
            for et, ei in edge_index_dict.items():
                seen[et] = edge_emb_dict[et].clone()
                out[et[2]] = out[et[2]].index_add(0, ei[1], self.lin[edge_key(et)](edge_emb_dict[et]))
            return out

    from acegnn.nn import register_unit_conv
    from acegnn.nn.unit_encoder import UNIT_CONVS
    register_unit_conv("test_raw_edges")(RawEdges)
    try:
        net = ACENetwork(SCHEMA, hidden=8, conv="test_raw_edges")
        assert len(net.unit_encoder.edge_encoders) == 0
        s = states(dead=True)  # enemy 1 dead: its edges are left out
        values(net, s)
        assert set(seen) == set(SCHEMA.edge_types)
        for et, feats in seen.items():
            keep = torch.ones(s[et].edge_index.size(1), dtype=torch.bool)
            for end, t in ((0, et[0]), (1, et[2])):
                if hasattr(s[t], "alive"):
                    keep &= s[t].alive[s[et].edge_index[end]]
            assert torch.equal(feats, s[et].edge_attr[keep])  # the raw features, live edges
    finally:
        UNIT_CONVS.pop("test_raw_edges")
