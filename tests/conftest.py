"""`pytest --device cuda` runs the tests that take the `device` fixture on that device (default: cpu).

Those tests are marked `device`, so `pytest --device cuda -m device` runs only them (local/gpu/gpu_session.py).
cuBLAS reads CUBLAS_WORKSPACE_CONFIG when CUDA starts, so it is set here, before any test: a test may then ask for
deterministic algorithms (the `deterministic_algorithms` fixture).
"""
import os

import pytest
import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="torch device of the tests that take the `device` fixture")


def pytest_configure(config):
    config.addinivalue_line("markers", "device: the test takes the `device` fixture (pytest --device DEVICE)")
    name = config.getoption("--device")
    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"--device {name}: torch sees no CUDA device")


def pytest_collection_modifyitems(items):
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture
def deterministic_algorithms():
    """torch's deterministic algorithms during the test (without them CUDA's atomic-add kernels make two identical
    runs differ in the last bits), as they were after it."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)
