"""tests/fork_server.py, which the slowest tests run their commands with: a command served by it behaves as in a
fresh `python` (arguments, environment, exit status, signals), and commands run side by side."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fork_server import forked, started


@pytest.fixture(scope="module")
def python():
    """The `python` of a fork server that has imported json."""
    with started(sys.executable, ["json"], dict(os.environ)) as server:
        yield str(server.bin / "python")


def run(*argv, **options) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60, **options)


def test_a_served_command_gets_its_arguments_environment_and_status(python, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.py").write_text("WORD = 'from PYTHONPATH'\n")
    (tmp_path / "script.py").write_text("import os, sys, helper\nprint(sys.argv, sys.path[0], os.environ['WORD'], "
                                        "helper.WORD)\nsys.exit(3)\n")
    env = dict(os.environ, WORD="from the client", PYTHONPATH=str(tmp_path / "lib"))
    proc = run(python, "script.py", "a", cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (3, f"['script.py', 'a'] {tmp_path} from the client from PYTHONPATH\n")
    proc = run(python, "-c", "import sys; print(sys.argv); sys.exit('bad input')", "x")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "['-c', 'x']\n", "bad input\n")
    proc = run(python, "-m", "json.tool", input='{"a": 1}')
    assert (proc.returncode, proc.stdout) == (0, '{\n    "a": 1\n}\n')
    proc = run(python, "-c", "import atexit; atexit.register(print, 'at exit')")
    assert proc.stdout == "at exit\n"
    proc = run(python, "-V")  # not served: the real python
    assert proc.stdout == f"Python {sys.version.split()[0]}\n"
    proc = run(Path(python).parent / "slm-score", "--help")  # the console scripts beside it
    assert proc.returncode == 0 and proc.stdout.startswith("usage: slm-score ")


def test_commands_run_side_by_side(python, tmp_path):
    """Each command waits for the other's file: both end only when they run at the same time."""
    code = ("import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\n"
            "while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.01)\n")
    a, b = tmp_path / "a", tmp_path / "b"
    procs = [subprocess.Popen([python, "-c", code, *pair]) for pair in ((a, b), (b, a))]
    assert [proc.wait(timeout=30) for proc in procs] == [0, 0]


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_to_the_client_ends_its_command_as_it_would_end_python(python, tmp_path, number):
    """(Python's own handling of Ctrl-C, whatever the test runner set: xdist's workers ignore SIGINT.)"""
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen([python, "-c", "import os, pathlib, signal, time\n"
                             "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                             f"pathlib.Path('{pid_file}.new').write_text(str(os.getpid()))\n"
                             f"os.rename('{pid_file}.new', '{pid_file}')\ntime.sleep(60)\n"], stderr=subprocess.DEVNULL)
    while not pid_file.exists():
        time.sleep(0.01)
    proc.send_signal(number)
    assert proc.wait(timeout=30) == -number
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid_file.read_text()}") and time.monotonic() < deadline:  # the command's process
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{pid_file.read_text()}")


def test_forked_runs_a_command_on_given_streams(python, tmp_path):
    socket_path = os.path.join(os.path.dirname(os.path.dirname(python)), "socket")
    with open(tmp_path / "out", "w") as out:
        status = forked(socket_path, ["-c", "print('out'); raise SystemExit(4)"], fds=(0, out.fileno(), 2))
    assert (status, (tmp_path / "out").read_text()) == (4, "out\n")


def test_the_command_receives_the_signal_itself(python, tmp_path):
    """Its own handler runs, and its exit status is the client's."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen([python, "-c", "import pathlib, signal, sys, time\n"
                             "signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))\n"
                             f"pathlib.Path('{ready}').touch()\ntime.sleep(60)\n"])
    while not ready.exists():
        time.sleep(0.01)
    proc.terminate()
    assert proc.wait(timeout=30) == 5
