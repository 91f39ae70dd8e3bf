"""Atelier's simulator spawner: forks the simulators' processes for the server.

Why a helper: a fork of the server (a Node process of 100+ MB) copies its page tables, 10-40 ms
on this machine, during which the server's event loop (its relays, its API) stands still. This
process is small: its fork costs ~1 ms. It is started once by the server and exits when the
server closes its stdin; the processes it started live on (they are detached, in sessions of
their own) and are adopted by init.

Protocol, one JSON object per line:
  stdin  {"id": n, "argv": [...], "cwd": "...", "env": {...}, "log": "path" | null, "detached": bool}
  stdout {"id": n, "pid": p} or {"id": n, "error": "..."}; and {"exit": p, "code": c} when a child ends
         (c: exit status, or -signal).
"""
import json
import os
import select
import shutil
import signal
import sys


def emit(obj):
    try:
        os.write(1, (json.dumps(obj) + "\n").encode())
    except BrokenPipeError:
        # The server is gone: so is the reason to be here (what was started lives on).
        os._exit(0)


def spawn(req):
    log = req.get("log")
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640) if log else os.open(os.devnull, os.O_WRONLY)
    try:
        # Fails here (not in the child) when the program cannot run at all.
        argv = req["argv"]
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=req["env"].get("PATH"))
        if not program or not os.access(program, os.X_OK):
            raise OSError(f"{argv[0]} is not an executable file")
        pid = os.fork()
        if pid == 0:
            try:
                if req.get("detached"):
                    os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.closerange(3, 65536)
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                os.chdir(req["cwd"])
                os.execve(program, argv, req["env"])
            except BaseException as e:  # noqa: BLE001 - the child must never return into the loop
                os.write(2, f"spawner: {argv[0]}: {e}\n".encode())
            os._exit(127)
        return pid
    finally:
        os.close(out)


def main():
    # Children are reaped as they end, their status reported; the wake-up pipe turns SIGCHLD into
    # something select() sees.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([0, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            emit({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                req = json.loads(line)
                try:
                    emit({"id": req["id"], "pid": spawn(req)})
                except Exception as e:  # noqa: BLE001 - reported to the server, the loop goes on
                    emit({"id": req["id"], "error": str(e)})


if __name__ == "__main__":
    sys.exit(main())
