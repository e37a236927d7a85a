"""Which code trained a run: a line per training session in the run's ``sessions.jsonl``.

A run resumed across sessions may be trained by several commits; results in the docs name
them. Each call of the training loop appends where it began (samples), when, on which
host, and the code: acegnn's version, the git commit of the checkout acegnn is imported
from (``None`` outside a git checkout, e.g. a wheel install) and whether tracked files
differed from it (``dirty``), and torch's version; and the machine's arithmetic
(:func:`machine`): the same seed and commit give the same run on one machine, not across
CPUs (docs/benchmarks.md, "One seed on two machines").
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from typing import List, Optional

SESSIONS = "sessions.jsonl"


def _git(directory: str, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version(directory: Optional[str] = None) -> dict:
    """The code in ``directory`` (default: acegnn's package directory): acegnn's and
    torch's versions, the git commit checked out there and whether tracked files differ
    from it; ``commit`` and ``dirty`` are ``None`` where it is not in a git checkout."""
    import torch

    import acegnn

    directory = directory or os.path.dirname(os.path.abspath(acegnn.__file__))
    commit = _git(directory, "rev-parse", "HEAD")
    status = _git(directory, "status", "--porcelain", "--untracked-files=no") \
        if commit else None
    return {"acegnn": acegnn.__version__, "commit": commit,
            "dirty": None if status is None else bool(status), "torch": torch.__version__}


#: Environment variables that change which kernels do the float arithmetic.
ARITHMETIC_ENV = ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def machine() -> dict:
    """What decides the float arithmetic of a session: the CPU's model name (``None``
    where it cannot be read), the vector instructions torch's kernels use
    (``cpu_capability``, e.g. ``AVX512``), and the variables of :data:`ARITHMETIC_ENV`
    that are set (``arithmetic_env``, only where one is)."""
    import torch

    name = None
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), None)
    except OSError:
        pass
    out = {"cpu": name or platform.processor() or None,
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    settings = {k: os.environ[k] for k in ARITHMETIC_ENV if k in os.environ}
    if settings:
        out["arithmetic_env"] = settings
    return out


def record_session(run_dir: str, samples: int, directory: Optional[str] = None) -> dict:
    """Append this training session to ``run_dir/sessions.jsonl``; the line written."""
    line = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "samples": int(samples), "host": platform.node(), **code_version(directory),
            **machine()}
    with open(os.path.join(run_dir, SESSIONS), "a") as f:
        f.write(json.dumps(line) + "\n")
    return line


def sessions(run_dir: str) -> List[dict]:
    """The sessions recorded in ``run_dir`` (none for a run older than this record)."""
    path = os.path.join(run_dir, SESSIONS)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def commits(run_dir: str) -> List[str]:
    """The commits that trained the run, in order, each once: the hash, ``+modified``
    where tracked files differed from it, ``unknown`` outside a git checkout."""
    out: List[str] = []
    for s in sessions(run_dir):
        name = s.get("commit") or "unknown"
        if s.get("dirty"):
            name += "+modified"
        if name not in out:
            out.append(name)
    return out


__all__ = ["ARITHMETIC_ENV", "SESSIONS", "code_version", "commits", "machine",
           "record_session", "sessions"]
