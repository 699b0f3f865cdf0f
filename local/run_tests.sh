#!/usr/bin/env bash
# The test command: creates .venv if needed, then runs the whole test suite.
# Usage: bash local/run_tests.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/local/setup_env.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest -q "$@"
