# Entry points. Each target does its own set-up (venv, dependencies, colcon build) first.
SHELL := /bin/bash
ENV := source scripts/env.sh
CONTROLLER ?= pid
OUT ?= out/run
VIDEO ?=

.PHONY: setup run test lint bench clean soak firmware

setup:
	@bash scripts/setup.sh

run: setup  ## the main job: simulated leg under closed-loop control through the triangle, recorded (VIDEO=1: also video.mp4)
	@$(ENV) && python -m equimus_bringup.main_job --controller $(CONTROLLER) --out $(OUT) $(if $(VIDEO),--video)

test: setup  ## the whole test suite
	@$(ENV) && python -m pytest -q tests

lint: setup  ## ruff (lint, format check) and mypy
	@bash scripts/lint.sh

bench: setup  ## every benchmark; writes docs/benchmarks.md
	@$(ENV) && python benchmarks/run_all.py

firmware:  ## the DAC board firmware built for this computer: out/firmware/dac_board_host
	@cmake -S firmware/host -B out/firmware -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build out/firmware

DURATION ?= 3600
SOAK_OUT ?= out/soak
soak: setup  ## reliability soak: every fault, every node killed in turn, a second recorder (2x load)
	@$(ENV) && python -m equimus_soak.soak --duration $(DURATION) --faults all --second-recorder --out $(SOAK_OUT)

clean:
	rm -rf ros2_ws/build ros2_ws/install ros2_ws/log out
