"""scripts/bench_smax.py runs end to end on its quick settings and reports every figure."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jaxmarl")

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_bench_smax_quick_reports_every_figure(tmp_path):
    out = tmp_path / "smax.json"
    text = subprocess.run([sys.executable, "scripts/bench_smax.py", "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, check=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
    res = json.loads(out.read_text())
    printed = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
    assert printed == res
    assert res["machine"]["torch_threads"] == 1 and res["quick"] is True
    for key in ("smax_env_steps_per_s", "ace_env_steps_per_s"):
        assert set(res[key]) == {"8"} and res[key]["8"] > 0
    assert set(res["decisions_per_s"]) == {"graphs", "greedy", "greedy_unchecked", "act"}
    assert all(v > 0 for v in res["decisions_per_s"].values())
    assert res["decisions_per_s_baseline"] is None and res["update_baseline"] is None
    rec = res["update"]["5m_vs_6m"]
    assert rec["seconds"] > 0 and rec["peak_rss_mb"] >= rec["rss_before_mb"] > 0
    assert "(a) SMAX alone" in text and "(d) ACE-DQN update" in text
