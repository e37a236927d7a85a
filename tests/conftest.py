import os
import sys

# One thread per test process and per process it starts: `make test` runs two pytest
# workers on two cores, and torch's default of a thread per core in each made small
# trainings up to 15 times slower (threads waiting on each other).
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
import torch  # noqa: E402  (after the variables: torch reads them when it starts)

torch.set_num_threads(1)

# tests/ holds helper modules (the naive reference) imported by the tests.
sys.path.insert(0, os.path.dirname(__file__))
