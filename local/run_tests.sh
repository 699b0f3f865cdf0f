#!/usr/bin/env bash
# The test command: creates .venv if needed, then runs the whole test suite on every CPU core (at most 8), a test
# module per worker at a time (its module-scoped fixtures are built once) but for the modules that tests/conftest.py
# splits, the longest work first, and lists the 30 slowest tests.
# Usage: bash local/run_tests.sh [pytest args...]      (-n 0: in one process)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/local/setup_env.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest -q -n logical --maxprocesses 8 --dist loadscope --no-loadscope-reorder \
    --durations=30 "$@"
