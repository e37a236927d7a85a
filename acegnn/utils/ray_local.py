"""A Ray started on this machine for this process (``acegnn study`` without
``--address``, football's engine actors without ``env.ray_address``)."""
from __future__ import annotations

import os
from typing import Optional


def start_local_ray(num_cpus: Optional[int] = None) -> None:
    """``ray.init`` of a new Ray on this machine with ``num_cpus`` logical CPUs (default:
    the machine's), its workers at niceness 0.

    Ray starts its workers at niceness 15 unless told otherwise (``RAY_worker_niceness``);
    beside any other busy process on the machine (another training, a test run) such a
    worker gets almost no CPU: importing torch in one took 158 s instead of 7 s beside two
    trainings on 2 cores. A value the caller set in the environment is kept."""
    import ray

    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
