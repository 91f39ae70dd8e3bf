"""Atelier's agent-session holder: one process per agent session, holding its PTY.

Why a process of its own: an agent session must outlive its client (a closed laptop) and also
the server (an upgrade, a crash, `kill -9`), as the workshop itself does. The PTY's master side
is held here, not in the server: the program never sees its terminal close while the server is
away, its output is kept (the recent part) for whoever attaches next, and a restarted server
finds the session again by connecting to the holder's socket.

Started by the server (src/server/tunnels/held.ts), detached in a session of its own, with the
socket's path as its argument. stdin: one JSON object {argv, env, cols, rows, scrollback,
workshop, name, command, startedAt}; stdout: one line
"ready PID" once the program runs and the socket listens, then closed.

The socket (mode 0600, in a 0700 directory of the server's data dir) takes one client at a time:
the server. A new connection replaces the old one. Frames both ways: a type byte, a 4-byte
big-endian length, the payload.
  to the server   M meta (JSON)   B recent output (on connect)   O output   X exit (JSON)
  from the server I input   R resize (JSON {cols, rows})   S signal (name)   K hang up   Q quit
Flow control: while more than HIGH bytes wait to go to the server, the PTY is not read (the
program blocks on its output, as in a terminal nobody reads); with no server connected the
output is read into the recent buffer only, so the program goes on. Input is not read from the
server while more than HIGH bytes wait for the program to read them.

After the program exits, its exit is kept for a server to collect, for at most LINGER seconds,
or until the server says Q (the session was stopped or its workshop deleted). A holder whose
socket is gone (the data dir removed) ends at once, its program with it.
"""
import errno
import fcntl
import json
import os
import pty
import selectors
import signal
import socket
import struct
import sys
import termios
import time

HIGH = 1 << 20
READ = 64 << 10
LINGER = 24 * 3600
HANGUP_GRACE = 2.0


def frame(kind, payload):
    return kind + struct.pack(">I", len(payload)) + payload


class Holder:
    def __init__(self, cfg):
        self.cfg = cfg
        self.recent = bytearray()
        self.recent_max = int(cfg.get("scrollback", 256 << 10))
        self.exit = None
        self.exited_at = None
        self.kill_at = None
        self.client = None
        self.out = bytearray()
        self.inbuf = bytearray()
        self.to_program = bytearray()
        self.sel = selectors.DefaultSelector()
        self.meta = {
            # Bumped when the frames change: a newer server then knows what it talks to.
            "protocol": 1,
            "workshop": cfg["workshop"],
            "name": cfg["name"],
            "command": cfg["command"],
            "startedAt": cfg["startedAt"],
            "cols": cfg["cols"],
            "rows": cfg["rows"],
        }

    def start(self):
        cfg = self.cfg
        path = cfg["socket"]
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(4)
        self.inode = os.stat(path).st_ino
        self.listener.setblocking(False)
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.closerange(3, 65536)
                # Ignored here, they must not stay ignored for the program (exec keeps SIG_IGN).
                for sig in (signal.SIGPIPE, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                os.chdir("/")
                os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
            except BaseException as e:  # noqa: BLE001 - the child must never return into the loop
                os.write(2, f"atelier: could not start the session: {e}\r\n".encode())
            os._exit(127)
        self.pid = pid
        self.master = fd
        self.meta["pid"] = pid
        os.set_blocking(fd, False)
        self.resize(cfg["cols"], cfg["rows"])
        self.master_open = True
        # SIGCHLD wakes the loop (the program's exit is reported at once, not at the next tick).
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.wakeup = r
        self.sel.register(r, selectors.EVENT_READ, "wakeup")
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(fd, selectors.EVENT_READ, "pty")
        os.write(1, f"ready {pid}\n".encode())
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.close(null)

    # ---------------------------------------------------------------- the program

    def resize(self, cols, rows):
        self.meta["cols"], self.meta["rows"] = cols, rows
        try:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        except OSError:
            pass

    def signal_group(self, name):
        sig = getattr(signal, name, None) if name.startswith("SIG") else None
        if not isinstance(sig, signal.Signals) or self.exit is not None:
            return
        try:
            group = os.tcgetpgrp(self.master)
        except OSError:
            group = self.pid
        try:
            os.killpg(group if group > 0 else self.pid, sig)
        except OSError:
            pass

    def hang_up(self):
        if self.exit is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGHUP)
        except OSError:
            pass
        self.kill_at = time.monotonic() + HANGUP_GRACE

    def read_program(self):
        try:
            data = os.read(self.master, READ)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            data = b""
        if not data:
            # Every holder of the slave side is gone: nothing more will come.
            self.close_master()
            return
        self.keep(data)

    def close_master(self):
        self.master_open = False
        try:
            self.sel.unregister(self.master)
        except (KeyError, ValueError):
            pass

    def keep(self, data):
        self.recent += data
        if len(self.recent) > self.recent_max:
            del self.recent[: len(self.recent) - self.recent_max]
        if self.client is not None:
            self.send(frame(b"O", data))

    def write_program(self):
        if not self.to_program or self.exit is not None:
            self.to_program.clear()
            return
        try:
            n = os.write(self.master, self.to_program)
            del self.to_program[:n]
        except BlockingIOError:
            pass
        except OSError:
            self.to_program.clear()

    def drain(self):
        """What the program wrote before it exited goes out before its exit."""
        while self.master_open:
            try:
                data = os.read(self.master, READ)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close_master()
                return
            self.keep(data)

    def reap(self):
        if self.exit is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return
        self.drain()
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            self.exit = {"exitCode": 128 + sig, "signal": signal.Signals(sig).name}
        else:
            self.exit = {"exitCode": os.WEXITSTATUS(status), "signal": None}
        self.exited_at = time.monotonic()
        self.kill_at = None
        if self.client is not None:
            self.send(frame(b"X", json.dumps(self.exit).encode()))

    # ---------------------------------------------------------------- the server

    def accept(self):
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if self.client is not None:
            self.drop_client()
        conn.setblocking(False)
        self.client = conn
        self.out = bytearray()
        self.inbuf = bytearray()
        self.send(frame(b"M", json.dumps(self.meta).encode()))
        if self.recent:
            self.send(frame(b"B", bytes(self.recent)))
        if self.exit is not None:
            self.send(frame(b"X", json.dumps(self.exit).encode()))
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def drop_client(self):
        try:
            self.sel.unregister(self.client)
        except (KeyError, ValueError):
            pass
        self.client.close()
        self.client = None
        self.out = bytearray()

    def send(self, data):
        self.out += data
        self.flush()

    def flush(self):
        if self.client is None:
            return
        try:
            n = self.client.send(self.out)
            del self.out[:n]
        except BlockingIOError:
            pass
        except OSError:
            self.drop_client()

    def read_client(self):
        try:
            data = self.client.recv(READ)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop_client()
            return
        self.inbuf += data
        while len(self.inbuf) >= 5:
            kind = self.inbuf[0:1]
            (n,) = struct.unpack(">I", self.inbuf[1:5])
            if len(self.inbuf) < 5 + n:
                break
            payload = bytes(self.inbuf[5 : 5 + n])
            del self.inbuf[: 5 + n]
            self.command(kind, payload)

    def command(self, kind, payload):
        if kind == b"I":
            if self.exit is None:
                self.to_program += payload
        elif kind == b"R":
            try:
                size = json.loads(payload)
                cols, rows = int(size["cols"]), int(size["rows"])
            except (ValueError, KeyError, TypeError):
                return
            if 1 <= cols <= 1000 and 1 <= rows <= 1000:
                self.resize(cols, rows)
        elif kind == b"S":
            self.signal_group(payload.decode("ascii", "replace"))
        elif kind == b"K":
            self.hang_up()
        elif kind == b"Q":
            self.quit()

    def quit(self, unlink=True):
        if self.exit is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        if unlink and self.socket_is_ours():
            try:
                os.unlink(self.cfg["socket"])
            except OSError:
                pass
        os._exit(0)

    # ---------------------------------------------------------------- the loop

    def run(self):
        while True:
            # What each descriptor is waited for follows the buffers (flow control).
            if self.master_open:
                want = 0
                if self.client is None or len(self.out) < HIGH:
                    want |= selectors.EVENT_READ
                if self.to_program:
                    want |= selectors.EVENT_WRITE
                self.modify(self.master, want, "pty")
            if self.client is not None:
                want = selectors.EVENT_WRITE if self.out else 0
                if len(self.to_program) < HIGH:
                    want |= selectors.EVENT_READ
                self.modify(self.client, want, "client")
            for key, events in self.sel.select(timeout=0.5):
                if key.data == "wakeup":
                    try:
                        while os.read(self.wakeup, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif key.data == "accept":
                    self.accept()
                elif key.data == "pty":
                    if events & selectors.EVENT_WRITE:
                        self.write_program()
                    if events & selectors.EVENT_READ and self.master_open:
                        self.read_program()
                elif key.data == "client" and self.client is not None and key.fileobj is self.client:
                    if events & selectors.EVENT_WRITE:
                        self.flush()
                    if events & selectors.EVENT_READ and self.client is not None:
                        self.read_client()
            self.reap()
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at and self.exit is None:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.kill_at = None
            if self.exit is not None and now - self.exited_at > LINGER:
                self.quit()
            if not self.socket_is_ours():
                # The server's data dir was removed (or another holder took the name): nobody can
                # reach this session any more.
                self.quit(unlink=False)

    def socket_is_ours(self):
        try:
            return os.stat(self.cfg["socket"]).st_ino == self.inode
        except OSError:
            return False

    def modify(self, fileobj, events, data):
        try:
            key = self.sel.get_key(fileobj)
        except KeyError:
            key = None
        if events == 0:
            if key is not None:
                self.sel.unregister(fileobj)
        elif key is None:
            self.sel.register(fileobj, events, data)
        elif key.events != events:
            self.sel.modify(fileobj, events, data)


def main():
    cfg = json.loads(sys.stdin.read())
    cfg["socket"] = sys.argv[1]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # The server going away (SIGHUP of its terminal, SIGINT of its Ctrl-C) is not the session's end.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    holder = Holder(cfg)
    holder.start()
    holder.run()


if __name__ == "__main__":
    main()
