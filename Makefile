# Entry points. Each target does its own set-up (venv, dependencies, colcon build) first.
SHELL := /bin/bash
ENV := source scripts/env.sh
CONTROLLER ?= pid
OUT ?= out/run
VIDEO ?=

.PHONY: setup run test lint bench clean soak firmware policy

setup:
	@bash scripts/setup.sh

run: setup  ## the main job: simulated leg under closed-loop control through the triangle, recorded (VIDEO=1: also video.mp4)
	@$(ENV) && python -m equimus_bringup.main_job --controller $(CONTROLLER) --out $(OUT) $(if $(VIDEO),--video)

TEST_WORKERS ?= 3  # on 2 cores: a third of the suite's time is graphs waiting in real time
test: setup  ## the whole test suite: on TEST_WORKERS processes, then the `serial` tests alone
	@$(ENV) && python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not serial' tests \
	  && python -m pytest -q -m serial tests

lint: setup  ## ruff (lint, format check) and mypy
	@bash scripts/lint.sh

bench: setup  ## every benchmark with a standard run; writes out/bench/benchmarks-<UTC time>.md
	@$(ENV) && python benchmarks/run_all.py

POLICY_OUT ?= out/policy
policy: setup  ## train the shipped tracking policy (config/policy_track.npz): DAgger from the LTV MPC, about 6 min on 2 cores
	@$(ENV) && python -m equimus_learning.cli train --algo dagger --iterations 10 --episodes 16 \
	  --randomize config/leg_fit.yaml --minutes 30 --out $(POLICY_OUT)
	@echo "ship it: cp $(POLICY_OUT)/policy.npz config/policy_track.npz"

firmware:  ## the DAC board firmware built for this computer: out/firmware/dac_board_host
	@cmake -S firmware/host -B out/firmware -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build out/firmware

DURATION ?= 3600
SOAK_OUT ?= out/soak
soak: setup  ## reliability soak: every fault, every node killed in turn, a second recorder (2x load)
	@$(ENV) && python -m equimus_soak.soak --duration $(DURATION) --faults all --second-recorder --out $(SOAK_OUT)

clean:
	rm -rf ros2_ws/build ros2_ws/install ros2_ws/log out
