"""A Python that starts ESPnet's and slm_lm's commands in a third of a fresh start, for the tests.

    python fork_server.py SOCKET MODULE...                  the server (`started` runs it from a test)
    python -S fork_server.py --client SOCKET PYTHON ARG...  `PYTHON ARG...` run by it (the `python` of `started`)

The server imports what importing the MODULEs imports (a first child lists it) but no module of slm_lm or
ESPnet, then listens on the Unix socket SOCKET (and prints `ready`). A client (`forked`) sends a JSON request
{"argv": python's arguments (`-m MODULE ARG...`, `-c CODE ARG...` or `SCRIPT ARG...`), "cwd": ..., "env": ...}
with its standard input, output and error as three file descriptors; a forked child runs the command there as
`python ARGV` would, with slm_lm and ESPnet imported afresh (so their start-up hook runs as in a fresh
interpreter), and the server answers the child's exit status (negative: the signal that ended it). torch,
transformers and the other third-party modules are not imported again. Children run side by side.

A client passes on the signals that would have reached the command (SIGINT, SIGTERM, SIGHUP) and ends as it
ended; when the client dies, its command is killed. Any other `python` call (`-u`, `-`, no argument) runs the
real PYTHON in place of the client.
"""
import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from types import SimpleNamespace

OURS = ("slm_lm", "espnet", "espnet2")
LISTING = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint(*sys.modules)"
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(argv: list) -> int:
    """`python ARGV` in this process: its exit status (-SIGINT: ended by Ctrl-C, as Python ends then)."""
    option, *args = argv
    try:
        if option == "-m":
            sys.argv, sys.path[0] = args, os.getcwd()
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        elif option == "-c":
            sys.argv, sys.path[0] = ["-c", *args[1:]], ""
            exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__"})
        elif not option.startswith("-"):
            sys.argv, sys.path[0] = argv, os.path.dirname(os.path.realpath(option))
            runpy.run_path(option, run_name="__main__")
        else:
            raise ValueError(f"fork_server: {option}: only -m, -c and a script are served")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def take_environment(env: dict) -> None:
    """The client's environment, as a fresh interpreter would take it: os.environ, PYTHONPATH's folders ahead
    of the installed ones, and torch's threads (OMP_NUM_THREADS, read when the server imported torch)."""
    os.environ.clear()
    os.environ.update(env)
    folders = [f for f in env.get("PYTHONPATH", "").split(os.pathsep) if f]
    sys.path[1:1] = [f for f in folders if f not in sys.path]
    if env.get("OMP_NUM_THREADS", "").isdigit() and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))


def pass_on_signals(connection: socket.socket) -> None:
    """In the child: raises each signal number the client sends on itself; kills itself when the client is gone."""
    for line in connection.makefile():
        os.kill(os.getpid(), int(line))
    os.kill(os.getpid(), signal.SIGKILL)


def child(request: dict, fds: list, connection: socket.socket) -> None:
    """Runs the request with the client's standard streams and environment and exits with its status."""
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    if "env" in request:
        take_environment(request["env"])
    threading.Thread(target=pass_on_signals, args=(connection,), daemon=True).start()
    status = run(request["argv"])
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):  # closed by the command, or a reader gone
            stream.flush()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def serve(server: socket.socket) -> None:
    """Forks a child per request; answers each client its child's exit status when the child ends."""
    waiting = {}  # child's pid -> its client's connection
    while True:
        if select.select([server], [], [], 0.05)[0]:
            connection, _ = server.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                for other in (server, *waiting.values()):
                    other.close()
                child(json.loads(message), fds, connection)
            for fd in fds:
                os.close(fd)
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            with waiting.pop(pid) as connection:
                with contextlib.suppress(OSError):  # a client that is gone
                    connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))


def forked(server: str, argv: list, fds=(0, 1, 2), timeout=None) -> int:
    """`python ARGV` run by the fork server at `server` with `fds` as its standard streams, in the server's
    environment: its exit status (`timeout`: seconds to wait for it, else TimeoutError)."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(timeout)
        connection.connect(server)
        socket.send_fds(connection, [json.dumps({"argv": argv, "cwd": os.getcwd()}).encode()], list(fds))
        return int(connection.makefile().readline())


def client(server: str, python: str, argv: list) -> None:
    """Runs `python ARGV` as the fork server's child when it serves that call, else the real `python`; ends as
    the command ended."""
    served = len(argv) >= 2 and argv[0] in ("-m", "-c") or argv and os.path.isfile(argv[0])
    if not served:
        os.execv(python, [python, *argv])
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(server)
        for number in PASSED_ON:
            signal.signal(number, lambda number, _: connection.sendall(b"%d\n" % number))
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        answer = connection.makefile().readline()
    status = int(answer) if answer else -signal.SIGKILL
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


@contextlib.contextmanager
def started(python, modules: list, env: dict):
    """This server run by `python` with `env`, having imported what importing `modules` imports but slm_lm and
    ESPnet (two thirds of a fresh start, not paid again by its commands): `.socket`, its path, and `.bin`, a
    folder whose `python` (and `python3`) runs its calls in the server's children (a recipe's `--python`,
    or first in a PATH), as do its `slm-*`, the console scripts of `python`'s folder."""
    with tempfile.TemporaryDirectory() as folder:  # short: a socket's path has at most 107 bytes
        path = os.path.join(folder, "socket")
        shim = Path(folder, "bin", "python")
        shim.parent.mkdir()
        client = shlex.join([str(python), "-S", os.path.abspath(__file__), "--client", path, str(python)])
        shim.write_text(f"#!/bin/sh\nexec {client} \"$@\"\n")
        (shim.parent / "python3").symlink_to("python")
        for script in Path(python).parent.glob("slm-*"):
            (shim.parent / script.name).write_text(f"#!/bin/sh\nexec {shlex.join([str(shim), str(script)])} \"$@\"\n")
        for executable in shim.parent.iterdir():
            executable.chmod(0o755)
        proc = subprocess.Popen([str(python), os.path.abspath(__file__), path, *modules], cwd=folder, env=env,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n", f"the fork server did not start (rc={proc.wait()})"
            yield SimpleNamespace(socket=path, bin=shim.parent)
        finally:
            proc.kill()
            proc.wait()


def main() -> None:
    if sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3], sys.argv[4:])
    path, *modules = sys.argv[1:]
    listed = subprocess.run([sys.executable, "-c", LISTING, *modules], capture_output=True, text=True, check=True)
    for name in listed.stdout.split():
        if name.split(".")[0] not in OURS:
            try:
                importlib.import_module(name)
            except Exception:  # a module that imports only in its importer's context: the child imports it then
                pass
    assert not [name for name in sys.modules if name.split(".")[0] in OURS]
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    serve(server)


if __name__ == "__main__":
    main()
