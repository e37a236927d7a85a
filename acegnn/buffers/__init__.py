"""Replay storage."""
from acegnn.buffers.replay import ReplayBuffer, ReplaySample

__all__ = ["ReplayBuffer", "ReplaySample"]
