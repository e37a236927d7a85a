"""The ACE value network and the decision with rollout."""
from acegnn.nn.ace import ACENetwork, ModelConfig
from acegnn.nn.action_encoder import ActionEncoder
from acegnn.nn.rollout import Rollout, agent_ranks, sequential_rollout
from acegnn.nn.selectors import (CandidateTable, Candidates, EpsilonGreedy, Forced, Greedy,
                                  Selection, Selector, Softmax)
from acegnn.nn.se_state import EncodedState, action_messages, apply_actions, candidate_rows
from acegnn.nn.unit_encoder import UNIT_CONVS, MeanEdgeConv, UnitEncoder, register_unit_conv
from acegnn.nn.value_head import POOLS, ValueHead

__all__ = [
    "ACENetwork", "ModelConfig", "CandidateTable", "Candidates", "EpsilonGreedy", "Forced", "Greedy", "Selection", "Selector", "Softmax", "ActionEncoder", "Rollout", "agent_ranks", "sequential_rollout",
    "EncodedState", "action_messages", "apply_actions", "candidate_rows", "UNIT_CONVS",
    "MeanEdgeConv", "UnitEncoder", "register_unit_conv", "POOLS", "ValueHead",
]
