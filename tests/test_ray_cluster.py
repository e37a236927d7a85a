"""A study on a two-node Ray cluster on this machine (`ray start --head` and a second
`ray start --address`, one CPU each), with one node killed mid-study. Slow (several
minutes): `make test-all`."""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from acegnn.study import finished, load_study
from acegnn.study.trial import LOG

ROOT = os.path.join(os.path.dirname(__file__), "..")
SMOKE = os.path.join(ROOT, "configs", "studies", "smoke.yaml")

pytestmark = pytest.mark.slow


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ray_processes(psutil, *needles):
    """The processes whose command line holds every one of ``needles``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if all(n in line for n in needles):
            found.append(p)
    return found


@pytest.fixture
def cluster():
    """A head node and a worker node, one CPU each, token authentication (Ray's default
    for `ray start`) with a token of this test: (address, environment, worker node's
    raylet port, psutil). Every process of the cluster is killed afterwards (by its
    session directory: `ray stop` would stop every Ray of the machine)."""
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    temp = tempfile.mkdtemp(prefix="acegnn-ray-", dir="/tmp")  # short: Ray's socket paths
    gcs, head_nm, head_om, node_nm, node_om = free_ports(5)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(16))
    address = f"127.0.0.1:{gcs}"
    try:
        subprocess.run(["ray", "start", "--head", "--num-cpus", "1", "--port", str(gcs),
                        "--node-ip-address", "127.0.0.1", "--node-manager-port", str(head_nm),
                        "--object-manager-port", str(head_om), "--include-dashboard=false",
                        "--temp-dir", temp], env=env, check=True, capture_output=True,
                       timeout=180)
        subprocess.run(["ray", "start", "--address", address, "--num-cpus", "1",
                        "--node-ip-address", "127.0.0.1", "--node-manager-port", str(node_nm),
                        "--object-manager-port", str(node_om)], env=env, check=True,
                       capture_output=True, timeout=180)
        yield address, env, node_nm, psutil
    finally:
        for p in ray_processes(psutil, temp):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def study_cli(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "acegnn.cli", "study", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)


def rows(run_dir):
    path = os.path.join(run_dir, "train.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(line.split(",")[0]) for line in f.readlines()[1:] if line.strip()]


def sessions(run_dir):
    with open(os.path.join(run_dir, LOG)) as f:
        return [line for line in f if line.startswith("$ acegnn train")]


def test_a_study_on_two_nodes_survives_a_killed_node(cluster, tmp_path):
    """4 trials on two one-CPU nodes; once two are training (one on each node) and have a
    checkpoint, the second node's raylet is killed: the trial it ran resumes on the head
    from its checkpoint, the others go on, and every trial ends with every row once."""
    address, env, node_port, psutil = cluster
    text = open(SMOKE).read().replace("seeds: [0]", "seeds: [0, 1]")
    path = tmp_path / "four.yaml"
    path.write_text(text)
    study_dir = str(tmp_path / "study")

    # without the token: a clear error, not Ray's retries and traceback
    no_token = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    proc = study_cli([str(path), "--dir", study_dir, "--address", address], no_token)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-2000:]
    assert f"cannot connect to the Ray cluster at {address}" in err
    assert "RAY_AUTH_MODE=token" in err and "Traceback" not in err

    proc = study_cli([str(path), "--dir", study_dir, "--address", address,
                      "--progress-every", "5"], env)
    study = load_study(str(path), study_dir)
    assert len(study.trials) == 4
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if sum(len(rows(t.run_dir)) >= 4 for t in study.trials) >= 2:  # checkpoints at 512, 1024
            break
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("two trials did not train at once on the two nodes")
    raylets = ray_processes(psutil, "raylet", f"--node_manager_port={node_port}")
    assert len(raylets) == 1, "the second node's raylet is not running"
    done_before = [t.name for t in study.trials if finished(t, study.total_samples)]
    raylets[0].send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err[-3000:]
    assert "failed; it resumes from its last checkpoint" in out
    resumed = []
    for trial in study.trials:
        assert finished(trial, study.total_samples), trial.name
        assert rows(trial.run_dir) == [256 * k for k in range(1, 9)], trial.name
        runs = sessions(trial.run_dir)
        if len(runs) > 1:
            resumed.append(trial.name)
            assert f"--resume {trial.run_dir} " in runs[1]
    assert len(resumed) == 1, resumed  # the one trial of the killed node
    assert not set(done_before) & set(resumed)
