# Environment of the recipe: `python` is ${python} (run.sh's choice; default python3), slm_lm from this
# repository. As ESPnet's path.sh: sourced by run.sh, and by hand to run a step's command yourself.
MAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export MAIN_ROOT
# the chosen interpreter is `python` in every step (the launchers' jobs included): its own bin/ when
# it is called python there (venv, conda), else a link to it in exp/.python
python_bin="$(dirname "$(command -v "${python:-python3}")")"
if [ ! "${python_bin}/python" -ef "$(command -v "${python:-python3}")" ]; then
    python_bin="$(pwd)/exp/.python"; mkdir -p "${python_bin}"
    ln -sf "$(command -v "${python:-python3}")" "${python_bin}/python"
fi
export PATH="${python_bin}:${PATH}"
unset python_bin
export PYTHONPATH="${MAIN_ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONIOENCODING=UTF-8
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export LC_ALL=C.UTF-8
