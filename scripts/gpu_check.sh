#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA device (under 10 minutes):
#   1. the tests marked gpu: every learner trains on the GPU, one update against the CPU's;
#   2. the update benchmark (batch 320, one CPU thread) with train.device=cuda on SMAX
#      5m_vs_6m (the paper's and the recommended config), 27m_vs_30m and football 3 vs 1
#      (the paper's, the official and the recommended config), beside the CPU's;
#   3. ACE-DQN on SMAX 5m_vs_6m (TRAIN_CONFIG, the paper's by default) on the GPU for
#      MINUTES minutes, printing its environment steps per second of training.
#
#     bash scripts/gpu_check.sh [OUT]          # OUT: where logs and records go (gpu_check)
#     MINUTES=5 GRF_BATCHES=DIR bash scripts/gpu_check.sh
#     CPU_BENCH=0 TRAIN_CONFIG=configs/smax_5m_vs_6m_recommended.yaml TRAIN_ARGS=train.compile=true \
#         PYTEST_ARGS="-n 4" bash scripts/gpu_check.sh   # no CPU timings; the recommended config
#     DEVICE=cpu MINUTES=0.2 BENCH_ARGS="--repeats 1 --updates 1" PYTEST_ARGS="-k spiders" \
#         bash scripts/gpu_check.sh /tmp/gc
#                                               # the script itself, tried on a CPU
#
# Football runs where gfootball is installed; elsewhere its update is timed on batches
# saved beforehand (GRF_BATCHES: a folder of CONFIG.pt made by
#   python3 scripts/bench_update.py configs/CONFIG.yaml --save-batch DIR/CONFIG.pt).
# A part that fails is reported and the others still run; the exit status counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_check}
minutes=${MINUTES:-5}
device=${DEVICE:-cuda}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
failed=0
part() {  # part NAME COMMAND...: run, log to OUT/NAME.log, count a failure
    local name=$1; shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc, $((SECONDS - t0)) s"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

DEVICE=$device python3 - <<'EOF' || exit 1
import os, torch
if os.environ["DEVICE"] == "cpu":
    print(f"torch {torch.__version__} on the CPU (a trial of this script)")
elif not torch.cuda.is_available():
    raise SystemExit(f"gpu_check: this torch ({torch.__version__}) sees no CUDA device")
else:
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
EOF

export ACEGNN_TEST_DEVICE=$device
part tests python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py ${PYTEST_ARGS:-}

bench() {  # bench NAME CONFIG ARGS...: one record line appended to OUT/bench.jsonl
    local name=$1; shift
    part "bench_$name" python3 scripts/bench_update.py "$@" --threads 1 ${BENCH_ARGS:-}
    tail -n 1 "$out/bench_$name.log" | grep '^{' >> "$out/bench.jsonl"
}
cpu_bench=${CPU_BENCH:-1}  # 0: time the updates on the GPU only
for config in smax_5m_vs_6m smax_5m_vs_6m_recommended; do
    bench "${config}_cuda" "configs/$config.yaml" train.device=$device
    [ "$cpu_bench" = 0 ] || bench "${config}_cpu" "configs/$config.yaml" --repeats 3
done
bench smax_27m_vs_30m_cuda configs/smax_5m_vs_6m.yaml env.scenario=27m_vs_30m train.device=$device --repeats 2 --updates 3
for config in grf_3_vs_1_with_keeper grf_3_vs_1_with_keeper_official grf_3_vs_1_with_keeper_recommended; do
    if python3 -c "import gfootball" 2>/dev/null; then
        bench "${config}_cuda" "configs/$config.yaml" train.device=$device
    elif [ -f "${GRF_BATCHES:-}/$config.pt" ]; then
        bench "${config}_cuda" "configs/$config.yaml" train.device=$device --batch "$GRF_BATCHES/$config.pt"
        [ "$cpu_bench" = 0 ] || bench "${config}_cpu" "configs/$config.yaml" --batch "$GRF_BATCHES/$config.pt" --repeats 3
    else
        echo "== football $config: no gfootball and no saved batch (GRF_BATCHES); skipped"
    fi
done

train_config=${TRAIN_CONFIG:-configs/smax_5m_vs_6m.yaml}
rm -rf "$out/runs/smax_5m_vs_6m_cuda"
part train python3 -m acegnn.cli train "$train_config" train.device=$device ${TRAIN_ARGS:-} \
    "train.max_minutes=$minutes" train.progress=false "run.dir=$out/runs" run.name=smax_5m_vs_6m_cuda
python3 - "$out" "$device" <<'EOF'
import json, sys
out, device = sys.argv[1:]
for line in open(f"{out}/bench.jsonl"):
    r = json.loads(line)
    times = ", ".join(f"{k} {r[k]:.1f}" for k in ("update_ms", "step_ms") if k in r)
    print(f"{r['config']} {' '.join(r['overrides'])} on {r.get('device_name', r['device'])}: {times}")
lines = [ln for ln in open(f"{out}/train.log") if ln.startswith("{")]
if lines:
    s = json.loads(lines[-1])
    print(f"SMAX 5m_vs_6m on {device}: {s['samples']} environment steps, {s['updates']} updates "
          f"in {s['wall_s']:.0f} s: {s['env_steps_per_s']:.1f} environment steps/s of training "
          f"(collect {s['time_collect_s']:.0f} s, learn {s['time_learn_s']:.0f} s, "
          f"eval {s['time_eval_s']:.0f} s)")
EOF
echo "gpu_check: $failed part(s) failed"
exit "$failed"
