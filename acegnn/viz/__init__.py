"""Drawing interaction graphs: states, the sequential decision and its candidate values.

A leaf of the package: nothing else imports it. :mod:`acegnn.viz.frame` turns a
rollout into plain arrays (no drawing library); the figures need the ``viz`` extra.
"""
from acegnn.viz.frame import Frame, circle_positions, frames

__all__ = ["Frame", "circle_positions", "frames"]
