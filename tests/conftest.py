"""`pytest --device cuda` runs the tests that take the `device` fixture on that device (default: cpu).

Those tests are marked `device`, so `pytest --device cuda -m device` runs only them (local/gpu/gpu_session.py).
cuBLAS reads CUBLAS_WORKSPACE_CONFIG when CUDA starts, so it is set here, before any test: a test may then ask for
deterministic algorithms (the `deterministic_algorithms` fixture).

The test data: MIRROR, a data directory beside the checkout (../shared/data), read in place by most tests and
used as the mirror of `slm-data get` by the `fetched_data` fixture, so that the download path is tested too.

Under pytest-xdist (`local/run_tests.sh`) each worker, and each command a test starts, gets its share of the CPU
cores as torch/OpenMP threads.
"""
import fcntl
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "data"
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    THREADS = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    torch.set_num_threads(THREADS)


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="torch device of the tests that take the `device` fixture")


def pytest_configure(config):
    config.addinivalue_line("markers", "device: the test takes the `device` fixture (pytest --device DEVICE)")
    name = config.getoption("--device")
    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"--device {name}: torch sees no CUDA device")


# The work units of the xdist workers (local/run_tests.sh): a test module, whose module-scoped fixtures are then
# made once; but the tests of SPLIT go one by one to whichever worker is free, but for those of a group of GROUPS,
# which share a costly fixture. FIRST (groups or tests) start first, the longest units, so that none is left for
# the end. (pytest-xdist's xdist_group marks do nothing under pytest 9: its nodeids no longer carry the group.)
SPLIT = ("test_recipe.py", "test_espnet_stock.py", "test_gpu_session.py", "test_compare.py")
GROUPS = {
    "recipe_micro": (  # the micro run and the Slurm cluster
        "test_micro_all_stages", "test_killed_decode_resumes", "test_stages_rerun_and_reuse_by_what_they_make",
        "test_resources_never_redo_a_finished_training",
        "test_training_options_name_the_experiment_and_a_finished_one_is_kept",
        "test_real_slurm_takes_the_options_the_launchers_pass",
        "test_real_slurm_failed_task_is_named_and_a_rerun_submits_only_the_missing_tasks",
        "test_rescoring_am_score_defaults_to_the_decoding_weights", "test_stage5_fine_tunes_a_shipped_lm",
        "test_gpu_stages_request_gpus_through_the_launcher", "test_sharded_equals_unsharded_through_a_real_slurm",
        "test_profile_asr_step_times_dtypes_and_names_operators",
        "test_mwer_fine_tunes_the_slm_on_training_lists_and_is_reused"),
    "import_orders": ("test_any_import_order_registers_the_kinds",),  # one forking interpreter
}
SHARED = {"micro": "recipe_micro", "slurm": "recipe_micro", "recipe_python": "recipe_micro",  # costly module fixtures
          "forker": "import_orders"}
FIRST = ("recipe_micro", "test_dry_run_trains_both_models_and_everything_would_come_back",
         "test_docs_asr_sh_commands_run_as_written", "test_compare_lms_runs_end_to_end_on_tiny_inputs",
         "import_orders")


def work_unit(nodeid: str) -> str:
    """The group, test or module that `nodeid` belongs to."""
    path, name = nodeid.split("::")[0], nodeid.split("::")[-1].split("[")[0]
    group = next((group for group, names in GROUPS.items() if name in names), None)
    return group or (nodeid if Path(path).name in SPLIT else path)


def pytest_collection_modifyitems(items):
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)
        for fixture in set(getattr(item, "fixturenames", ())) & SHARED.keys():
            if Path(item.nodeid.split("::")[0]).name in SPLIT and work_unit(item.nodeid) != SHARED[fixture]:
                raise pytest.UsageError(f"{item.nodeid} uses the fixture {fixture}: list it in tests/conftest.py "
                                        f"GROUPS[{SHARED[fixture]!r}], or the fixture is made twice")
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), rank.get(item.originalname, len(FIRST))))


def pytest_xdist_make_scheduler(config, log):
    """xdist's loadscope scheduling of the work units above."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture(scope="session")
def fetched_data(tmp_path_factory) -> Path:
    """A data directory filled by `slm-data get blimp librispeech-nbest --mirror MIRROR` (checksums checked)."""
    from slm_lm.bin import data

    root = tmp_path_factory.mktemp("slm_lm_data")
    data.main(["get", "blimp", "librispeech-nbest", "--dir", str(root), "--mirror", str(MIRROR), "--no-progress"])
    return root


@pytest.fixture
def deterministic_algorithms():
    """torch's deterministic algorithms during the test (without them CUDA's atomic-add kernels make two identical
    runs differ in the last bits), as they were after it."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding an installed slm_lm (this checkout, `pip install --prefix`) and,
    through a path .pth, this environment's packages (torch, ESPnet)."""
    root = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "base_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # pip builds in the checkout (build/, *.egg-info): one build at a time among the xdist workers of this run
    with open(tmp_path_factory.getbasetemp().parent / "installed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--ignore-installed", "--prefix", str(root / "venv"), str(REPO)], check=True)
    assert (site / "slm_lm_espnet_hook.pth").is_file()
    return python
