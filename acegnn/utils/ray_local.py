"""Ray for ``acegnn study`` and football's engine actors: a Ray started on this machine
for this process, or a running cluster joined."""
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


def connect_ray(address: str) -> None:
    """``ray.init`` on the running cluster at ``address``, with an error that says what
    to check."""
    import ray

    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError) as e:
        auth = os.environ.get("RAY_AUTH_MODE", "disabled")
        raise ValueError(
            f"cannot connect to the Ray cluster at {address} ({type(e).__name__}: {e}). Is "
            f"it running (ray status --address {address})? A cluster started with "
            f"`ray start` authenticates with a token by default: this machine needs "
            f"RAY_AUTH_MODE=token and the cluster's token (~/.ray/auth_token, "
            f"RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN); RAY_AUTH_MODE is {auth!r} here") from e
