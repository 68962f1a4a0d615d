#!/usr/bin/env bash
# Quality gates: ruff (lint + format check) over src/, tests/ and benchmarks/, and mypy over every
# package under src/. Run after scripts/setup.sh (`make lint`); CI runs it before the tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
source scripts/env.sh
ruff check src tests benchmarks scripts launch
ruff format --check src tests benchmarks scripts launch
mypy src/*/equimus_*
