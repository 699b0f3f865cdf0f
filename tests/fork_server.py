"""A Python that starts ESPnet's and slm_lm's commands in a third of a fresh start, for the tests.

    python fork_server.py SOCKET MODULE...          (`started` runs it from a test)

It imports what importing the MODULEs imports (a first child lists it) but no module of slm_lm or ESPnet, then
listens on the Unix socket SOCKET (and prints `ready`). A client (`tests/asr_sh.py`, `forked`) sends a JSON
request {"argv": python's arguments (`-m MODULE ARG...` or `-c CODE`), "cwd": ...} with its standard input,
output and error as three file descriptors; a forked child runs the command there as `python ARGV` would, with
slm_lm and ESPnet imported afresh (so their start-up hook runs as in a fresh interpreter), and the server
answers the child's exit status. torch, transformers and the other third-party modules are not imported again.
"""
import contextlib
import importlib
import json
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import traceback

OURS = ("slm_lm", "espnet", "espnet2")
LISTING = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint(*sys.modules)"


def run(argv: list) -> int:
    """`python ARGV` in this process: its exit status."""
    option, target, *args = argv
    try:
        if option == "-m":
            sys.argv, sys.path[0] = [target, *args], os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif option == "-c":
            sys.argv, sys.path[0] = ["-c", *args], ""
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
        else:
            raise ValueError(f"fork_server: {option}: only -m and -c are served")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def child(request: dict, fds: list) -> None:
    """Runs the request with the client's standard streams and exits with its status."""
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    status = run(request["argv"])
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


@contextlib.contextmanager
def started(python, modules: list, env: dict):
    """The socket of this server run by `python` with `env`, which has imported what importing `modules`
    imports but slm_lm and ESPnet (two thirds of a fresh start, not paid again by its commands)."""
    with tempfile.TemporaryDirectory() as folder:  # short: a socket's path has at most 107 bytes
        path = os.path.join(folder, "socket")
        proc = subprocess.Popen([str(python), os.path.abspath(__file__), path, *modules], cwd=folder, env=env,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n", f"the fork server did not start (rc={proc.wait()})"
            yield path
        finally:
            proc.kill()
            proc.wait()


def main() -> None:
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
    server.listen()
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        with connection:
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                server.close()
                connection.close()
                child(json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


if __name__ == "__main__":
    main()
