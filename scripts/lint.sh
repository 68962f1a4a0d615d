#!/usr/bin/env bash
# Quality gates: ruff (lint + format check) over src/, tests/ and benchmarks/, mypy over every
# package under src/, and hadolint over docker/Dockerfile. Run after scripts/setup.sh
# (`make lint`); CI runs it before the tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# colcon's setup scripts read unset variables: source them without -u
set +u
# shellcheck disable=SC1091
source scripts/env.sh
set -u
ruff check src tests benchmarks scripts launch
ruff format --check src tests benchmarks scripts launch
mypy src/*/equimus_*
hadolint docker/Dockerfile
