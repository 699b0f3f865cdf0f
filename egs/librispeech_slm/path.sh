# Environment of the recipe: the repository's Python venv and the slm_lm package.
MAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export MAIN_ROOT
if [ -f "${MAIN_ROOT}/.venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "${MAIN_ROOT}/.venv/bin/activate"
fi
export PYTHONPATH="${MAIN_ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONIOENCODING=UTF-8
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export LC_ALL=C.UTF-8
