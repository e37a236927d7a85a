PY ?= python3
.PHONY: install train test test-all bench

install:
	bash scripts/install.sh  # extras dev,viz,smax,sc2,grf,ray (football engine built from source); chromium, ffmpeg where apt-get exists

# Main job: ACE-DQN on the built-in 5x5 Spiders-and-Fly task, until the greedy policy
# catches the fly within 10 steps in every test episode.
train: install
	acegnn train configs/spiders_fly_5x5.yaml

# Default test suite, two test files at a time (pytest-xdist; a file's tests share a worker).
test: install
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=30

# Also the tests marked slow.
test-all: install
	$(PY) -m pytest -q -n 2 --dist loadfile -m "" --durations=30

bench: install
	$(PY) scripts/bench_rollout.py
