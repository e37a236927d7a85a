"""acegnn: ACE (bidirectional action-dependent Q-learning) as graph neural networks."""
__version__ = "0.1.0"
