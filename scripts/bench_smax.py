#!/usr/bin/env python
"""SMAX throughput: the engine alone, ACE acting on it, decisions per second and updates.

(a) SMAX alone (``jax.jit`` + ``jax.vmap``, random available actions): env steps/s;
(b) ACE acting on SMAX (graphs + greedy decision + env step): env steps/s;
(c) decisions/s at 5m_vs_6m, 8 states a batch: graph building, the greedy rollout
    (``net.rollout`` without autograd) and the epsilon-greedy collecting path
    (``ACEDQN.act``), on a fixed set of real SMAX states;
(d) one ACE-DQN update at batch 320 on 5m_vs_6m and 27m_vs_30m with the paper's network
    (hidden 256, RMSprop): seconds per update and peak memory, each map in a fresh
    process (``ru_maxrss``, which includes the SMAX engine that made the batch).

``--quick`` (the smoke test) runs 8 environments and a 16-transition update of
5m_vs_6m, all in this process.

One decision is one state's whole sequential decision (every agent). ``--baseline-dir``
times (c) and (d) also with another checkout of acegnn (for example the code before a
change: ``git worktree add /tmp/base <commit>``), in the same runs, alternating with
this one so that both see the same load. The machine may be shared: timings are
medians of ``--repeats`` rounds.

    python scripts/bench_smax.py                       # everything, one torch thread
    python scripts/bench_smax.py --baseline-dir /tmp/base --json smax.json
    python scripts/bench_smax.py --quick               # a short run (the smoke test)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER_ALGO = dict(optimizer="rmsprop", lr=3e-4, weight_decay=1e-5, target_theta=0.008)
EPSILON = 0.05  # of the collecting path in (c)


def _random_actions(avail):
    """A uniformly random available action per agent: ``[B, n, S]`` bool -> ``[B, n]``."""
    import torch

    return (torch.rand(avail.shape) * avail).argmax(-1)


def _learner(hidden: int):
    from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
    from acegnn.envs.smac.units import battle_schema
    from acegnn.nn.ace import ModelConfig

    return ACEDQN(battle_schema(), ACEDQNConfig(**PAPER_ALGO), ModelConfig(hidden=hidden))


def _median_rate(run, count: int, repeats: int) -> float:
    """``count`` items per ``run()``; the median over ``repeats`` timed runs."""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        rates.append(count / (time.perf_counter() - t0))
    return statistics.median(rates)


# (a) and (b) -----------------------------------------------------------------------------
def env_rates(scenario: str, envs: int, steps: int, repeats: int, hidden: int) -> dict:
    import torch

    from acegnn.envs.smac.smax import SMAXTask

    task = SMAXTask(scenario, envs, seed=0)
    learner = _learner(hidden)

    def smax_alone():
        for _ in range(steps):
            task.step(_random_actions(task.observe()["avail"]))

    def ace_acting():
        for _ in range(steps):
            actions = learner.act(task.graphs(task.observe()))
            task.step(actions.view(envs, task.n_agents))

    smax_alone()  # compiled, warm
    ace_acting()
    out = {"smax": _median_rate(smax_alone, steps * envs, repeats),
           "ace": _median_rate(ace_acting, steps * envs, repeats)}
    torch.manual_seed(0)
    return out


# (c) -------------------------------------------------------------------------------------
def decision_rates(scenario: str, batch: int, states: int, repeats: int, hidden: int) -> dict:
    """Graph building, greedy rollout and ACEDQN.act over ``states`` batches of real
    states (random play from seed 0), in decisions per second."""
    import torch

    from acegnn.envs.smac.smax import SMAXTask

    task = SMAXTask(scenario, batch, seed=0)
    gen = torch.Generator().manual_seed(0)
    observations = []
    for _ in range(states):
        obs = task.observe()
        observations.append({k: v.clone() for k, v in obs.items()})
        task.step(_random_actions(obs["avail"]))
    torch.manual_seed(0)
    learner = _learner(hidden)
    net = learner.net
    graphs = [task.graphs(o) for o in observations]

    def build():
        for o in observations:
            task.graphs(o)

    def greedy(check=True):
        with torch.no_grad():
            for g in graphs:
                net.rollout(g, check=check)

    def act():
        for g in graphs:
            learner.act(g, EPSILON, gen)

    runs = {"graphs": build, "greedy": greedy, "greedy_unchecked": lambda: greedy(False),
            "act": act}
    for run in runs.values():
        run()  # warm
    return {k: _median_rate(run, states * batch, repeats) for k, run in runs.items()}


# (d) -------------------------------------------------------------------------------------
def _rss_mb(field: str = "VmRSS:") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def update_cost(scenario: str, batch: int, updates: int, hidden: int) -> dict:
    """Seconds per ACE-DQN update on ``batch`` real transitions (random play, a few
    steps in), and the process's peak memory."""
    import torch

    from acegnn.envs.smac.smax import SMAXTask

    envs = min(batch, 32) if batch >= 32 else 8  # 8: the task size (a) and (c) compiled
    task = SMAXTask(scenario, envs, seed=0)
    for _ in range(3):  # a few steps in: units hurt, some dead
        task.step(_random_actions(task.observe()["avail"]))
    obs, acts, rew, term, nxt = [], [], [], [], []
    while sum(a.size(0) for a in acts) < batch:
        o = {k: v.clone() for k, v in task.observe().items()}
        a = _random_actions(o["avail"])
        tr = task.step(a)
        obs.append(o)
        acts.append(a)
        rew.append(tr.reward.clone())
        term.append(tr.terminated.clone())
        nxt.append({k: v.clone() for k, v in tr.next_obs.items()})

    def stack(parts):
        return {k: torch.cat([p[k] for p in parts])[:batch] for k in parts[0]}

    graphs, next_graphs = task.graphs(stack(obs)), task.graphs(stack(nxt))
    actions = torch.cat(acts)[:batch].reshape(-1)
    reward, terminated = torch.cat(rew)[:batch], torch.cat(term)[:batch]
    torch.manual_seed(0)
    learner = _learner(hidden)
    rss_before = _rss_mb()
    learner.update(graphs, actions, reward, terminated, next_graphs)  # warm
    times = []
    for _ in range(updates):
        t0 = time.perf_counter()
        learner.update(graphs, actions, reward, terminated, next_graphs)
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "updates": updates,
            "rss_before_mb": rss_before,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# processes -------------------------------------------------------------------------------
def _child(ns: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(ns.threads)
    if ns.child == "decisions":
        return decision_rates(ns.scenario, ns.batch, ns.states, ns.repeats, ns.hidden)
    if ns.child == "update":
        return update_cost(ns.scenario, ns.batch, ns.updates, ns.hidden)
    raise ValueError(ns.child)


def _measure(ns: argparse.Namespace, code_dir: str, child: str, **kw) -> dict:
    """A measurement in a fresh process that imports acegnn from ``code_dir``; with
    ``--quick``, this checkout's in this process (no second compilation of SMAX)."""
    if ns.quick and code_dir == ROOT:
        return _child(argparse.Namespace(**{**vars(ns), "child": child, **kw}))
    args = [sys.executable, os.path.abspath(__file__), "--child", child,
            "--threads", str(ns.threads), "--hidden", str(ns.hidden)]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([code_dir, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS=str(ns.threads))
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=code_dir)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _machine(threads: int) -> dict:
    import jax
    import torch

    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "torch_threads": threads, "torch": torch.__version__, "jax": jax.__version__,
            "python": platform.python_version(), "shared": True}


def _table(res: dict) -> str:
    def fmt(v, unit=""):
        return "-" if v is None else f"{v:,.1f}{unit}"

    lines = [f"machine: {res['machine']['cpu']}, {res['machine']['cores']} cores (shared, load "
             f"{res['machine']['load_avg_1m']}), torch threads {res['machine']['torch_threads']}"]
    lines.append("")
    lines.append(f"{'env steps/s':<34} " + " ".join(f"{f'{e} envs':>12}" for e in res["envs"]))
    for key, name in (("smax_env_steps_per_s", "(a) SMAX alone"),
                      ("ace_env_steps_per_s", "(b) ACE acting on SMAX")):
        lines.append(f"{name:<34} " + " ".join(f"{fmt(res[key][str(e)]):>12}" for e in res["envs"]))
    lines.append("")
    base = res.get("decisions_per_s_baseline")
    lines.append(f"(c) decisions/s, {res['scenario']}, batch {res['batch']}"
                 f"{'':<8}{'now':>12}{'baseline' if base else '':>12}")
    for key in ("graphs", "greedy", "greedy_unchecked", "act"):
        lines.append(f"    {key:<38}{fmt(res['decisions_per_s'][key]):>12}"
                     f"{fmt(base[key]) if base else '':>12}")
    lines.append("")
    lines.append(f"(d) ACE-DQN update, batch {res['update_batch']}, hidden {res['hidden']}")
    ubase = res.get("update_baseline") or {}
    for scenario, rec in res["update"].items():
        b = ubase.get(scenario)
        line = (f"    {scenario:<14} {rec['seconds']:>8.3f} s {fmt(rec['peak_rss_mb'], ' MB'):>13}"
                f" peak")
        if b:
            line += f"   baseline {b['seconds']:.3f} s {fmt(b['peak_rss_mb'], ' MB')} peak"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a short run (8 environments, 5m_vs_6m, "
                   "a small update batch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (median reported)")
    p.add_argument("--baseline-dir", help="another checkout of acegnn to time (c) and (d) with")
    p.add_argument("--json", help="also write the results to this path")
    p.add_argument("--child", choices=["decisions", "update"], help=argparse.SUPPRESS)
    p.add_argument("--scenario", default="5m_vs_6m", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    p.add_argument("--states", type=int, default=40, help=argparse.SUPPRESS)
    p.add_argument("--updates", type=int, default=3, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.child:  # acegnn from PYTHONPATH, the checkout being timed
        ns.repeats = ns.repeats or 5
        print(json.dumps(_child(ns)))
        return {}
    sys.path.insert(0, ROOT)  # "now" is this checkout's acegnn

    import torch

    torch.set_num_threads(ns.threads)
    quick = ns.quick
    repeats = ns.repeats or (2 if quick else 5)
    envs = [8] if quick else [8, 64]
    update_maps = ["5m_vs_6m"] if quick else ["5m_vs_6m", "27m_vs_30m"]
    update_batch = 16 if quick else 320
    res = {"machine": _machine(ns.threads), "scenario": "5m_vs_6m", "batch": 8, "envs": envs,
           "hidden": ns.hidden, "epsilon": EPSILON, "quick": quick}
    rates = {e: env_rates("5m_vs_6m", e, 10 if quick else (100 if e <= 8 else 30), repeats,
                          ns.hidden) for e in envs}
    res["smax_env_steps_per_s"] = {str(e): r["smax"] for e, r in rates.items()}
    res["ace_env_steps_per_s"] = {str(e): r["ace"] for e, r in rates.items()}

    codes = {"now": ROOT}
    if ns.baseline_dir:
        codes["baseline"] = os.path.abspath(ns.baseline_dir)
    states = 5 if quick else 40
    per_code = {k: [] for k in codes}
    for _ in range(1 if quick else 3):  # alternate the checkouts: same load for both
        for name, code in codes.items():
            per_code[name].append(_measure(ns, code, "decisions", scenario="5m_vs_6m", batch=8,
                                         states=states, repeats=repeats))
    med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
           for name, runs in per_code.items()}
    res["decisions_per_s"] = med["now"]
    res["decisions_per_s_baseline"] = med.get("baseline")

    res["update_batch"] = update_batch
    res["update"], res["update_baseline"] = {}, ({} if ns.baseline_dir else None)
    for scenario in update_maps:
        for name, code in codes.items():
            rec = _measure(ns, code, "update", scenario=scenario, batch=update_batch,
                         updates=1 if quick else 3)
            (res["update"] if name == "now" else res["update_baseline"])[scenario] = rec
    print(json.dumps(res))
    print(_table(res))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
