"""`pytest --device cuda` runs the tests that take the `device` fixture on that device (default: cpu).

Those tests are marked `device`, so `pytest --device cuda -m device` runs only them (local/gpu/gpu_session.py).
"""
import pytest
import torch


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
