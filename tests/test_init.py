"""Initialisation schemes (``model.init``) of ACE and the baselines."""
import math

import pytest
import torch
from torch import nn

from acegnn.algos.value_decomposition import ValueDecomposition, ValueDecompositionConfig
from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema, valid_starts
from acegnn.envs.synthetic import smac_like_schema
from acegnn.nn import ACENetwork, ModelConfig
from acegnn.nn.init import init_relu_layers
from acegnn.nn.unit_encoder import mlp


def test_he_scales_relu_layers_and_leaves_the_rest():
    torch.manual_seed(0)
    net = nn.Sequential(mlp(400, 300, layers=2), nn.Linear(300, 1))
    out_before = net[1].weight.clone()
    init_relu_layers(net, "he")
    for fan_in, layer in [(400, net[0][0]), (300, net[0][2])]:
        std = layer.weight.std().item()
        assert abs(std - math.sqrt(2 / fan_in)) < 0.02 * math.sqrt(2 / fan_in)
        assert torch.all(layer.bias == 0)
    assert torch.equal(net[1].weight, out_before)  # not followed by a ReLU


def test_torch_scheme_changes_nothing_and_unknown_is_refused():
    torch.manual_seed(0)
    net = mlp(8, 8, layers=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    init_relu_layers(net, "torch")
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    with pytest.raises(ValueError, match="unknown init scheme 'xavier'"):
        init_relu_layers(net, "xavier")
    with pytest.raises(ValueError, match="model.init must be one of"):
        ModelConfig(init="xavier")


def test_he_makes_deep_ace_values_depend_on_the_state():
    """With PyTorch's default init, three-layer MLPs give an almost constant V at the
    start; He init keeps the state's signal (the reason the option exists)."""
    g = spiders_fly_graphs(valid_starts(5)[::20], 5)
    spread = {}
    for init in ["torch", "he"]:
        torch.manual_seed(0)
        net = ACENetwork(spiders_fly_schema(), hidden=128, layers=3, init=init)
        with torch.no_grad():
            enc = net.encode(g)
            spread[init] = net.value(enc.units, enc).std().item()
    assert spread["torch"] < 1e-3
    assert spread["he"] > 10 * spread["torch"]


def test_ace_reset_parameters_keeps_the_scheme():
    torch.manual_seed(0)
    net = ACENetwork(smac_like_schema(), hidden=16, layers=2, init="he")
    relu_fed = [m[i] for m in net.modules() if isinstance(m, nn.Sequential)
                for i in range(len(m) - 1) if isinstance(m[i], nn.Linear)]
    assert relu_fed and all(torch.all(lin.bias == 0) for lin in relu_fed)
    for lin in relu_fed:
        nn.init.ones_(lin.bias)
    net.reset_parameters()
    assert all(torch.all(lin.bias == 0) for lin in relu_fed)


@pytest.mark.parametrize("name", ["vdn", "qmix", "qtran"])
def test_baselines_follow_model_init(name):
    g = spiders_fly_graphs(torch.tensor([[[0, 0], [4, 4], [2, 2]]]), 5)
    torch.manual_seed(0)
    lrn = ValueDecomposition(spiders_fly_schema(), ValueDecompositionConfig(name=name),
                             ModelConfig(hidden=16, init="he"), example=g)
    body = lrn.net["agent"].body
    assert all(torch.all(m.bias == 0) for m in body if isinstance(m, nn.Linear))
    # the target network is a copy of the initialised network
    for p, tp in zip(lrn.net.parameters(), lrn.target_net.parameters()):
        assert torch.equal(p, tp)


def test_a_deep_passive_encoder_is_hidden_wide_inside():
    """Two layers: node features -> hidden -> hidden x targeted kinds (the official
    code's passive encoder is hidden wide inside too), not a (hidden x kinds)-wide inner
    layer."""
    from acegnn.nn.action_encoder import ActionEncoder

    schema = smac_like_schema()
    k = len(schema.targeted_kinds)
    assert k > 1
    enc = ActionEncoder(schema, 16, layers=2)
    for t, m in enc.passive_encoders.items():
        fcs = [layer for layer in m if isinstance(layer, nn.Linear)]
        assert [(fc.in_features, fc.out_features) for fc in fcs] == \
            [(schema.node_types[t], 16), (16, 16 * k)]
    assert [fc.out_features for fc in mlp(4, 12, layers=3, width=5) if isinstance(fc, nn.Linear)] \
        == [5, 5, 12]


def test_model_passive_width_sets_the_passive_encoders_inner_width():
    """``model.passive_width`` (the football probe's was hidden x kinds) reaches the
    passive encoder's inner layer through the config."""
    from acegnn.config import load_config
    from acegnn.nn import ACENetwork

    schema = smac_like_schema()
    k = len(schema.targeted_kinds)
    cfg = load_config("configs/spiders_fly_5x5.yaml",
                      ["model.hidden=8", "model.layers=2", f"model.passive_width={8 * k}"]).model
    net = ACENetwork.from_config(smac_like_schema(), cfg)
    for t, m in net.action_encoder.passive_encoders.items():
        fcs = [layer for layer in m if isinstance(layer, nn.Linear)]
        assert [(fc.in_features, fc.out_features) for fc in fcs] == \
            [(schema.node_types[t], 8 * k), (8 * k, 8 * k)]
    with pytest.raises(ValueError, match="model.passive_width must be null or >= 1"):
        load_config("configs/spiders_fly_5x5.yaml", ["model.passive_width=0"])
    with pytest.raises(ValueError, match="model.value_layers must be null or >= 1"):
        load_config("configs/spiders_fly_5x5.yaml", ["model.value_layers=0"])


def test_model_passive_input_embedding_feeds_the_passive_encoder_the_unit_embedding():
    """``model.passive_input=embedding`` (the official football code's) reaches the
    passive encoder through the config: its first layer reads ``hidden`` inputs, where
    the paper's reads the acting unit's node features; anything else is refused."""
    from acegnn.config import load_config
    from acegnn.nn import ACENetwork

    schema = smac_like_schema()
    for given, width in [("features", None), ("embedding", 8)]:
        cfg = load_config("configs/spiders_fly_5x5.yaml",
                          ["model.hidden=8", f"model.passive_input={given}"]).model
        net = ACENetwork.from_config(schema, cfg)
        assert net.action_encoder.embedded == (given == "embedding")
        for t, m in net.action_encoder.passive_encoders.items():
            assert m[0].in_features == (width or schema.node_types[t])
    with pytest.raises(ValueError, match="model.passive_input must be one of"):
        load_config("configs/spiders_fly_5x5.yaml", ["model.passive_input=state"])


def test_value_layers_set_every_value_encoders_depth():
    """``model.value_layers``: ACE's value head, ACE-CTDE's individual one and ACE-PPO's
    logit head, while the node encoders keep ``model.layers``."""
    from acegnn.algos.ace_ppo import ACEPPO
    from acegnn.config import load_config as load
    from acegnn.envs.spiders_fly import spiders_fly_schema
    from acegnn.nn import ACENetwork
    from acegnn.nn.ace import ModelConfig
    from acegnn.nn.individual import IndividualQ

    model = ModelConfig(hidden=8, layers=1, value_layers=3)
    assert model.value_depth == 3 and ModelConfig(hidden=8, layers=2).value_depth == 2
    net = ACENetwork.from_config(spiders_fly_schema(), model)
    assert net.value_head.layers == 3 and len(net.unit_encoder.node_encoders["spider"]) == 2
    for share in ("encoders", "none"):
        assert IndividualQ.from_config(net, model, share).value_head.layers == 3
    cfg = load("configs/spiders_fly_5x5_ppo.yaml", ["model.hidden=8", "model.value_layers=3"])
    ppo = ACEPPO(spiders_fly_schema(), cfg.algo, cfg.model)
    assert ppo.net.logit_head.layers == 3 and ppo.net.value_head.layers == 3
