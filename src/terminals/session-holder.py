"""Atelier's agent-session holder: one process per agent session, holding its PTY.

Why a process of its own: an agent session must outlive its client (a closed laptop) and also
the server (an upgrade, a crash, `kill -9`), as the workshop itself does. The PTY's master side
is held here, not in the server: the program never sees its terminal close while the server is
away, its output is kept (the recent part) for whoever attaches next, and a restarted server
finds the session again by connecting to the holder's socket.

Started by the server (src/terminals/held.ts), detached in a session of its own, with the
socket's path as its argument. stdin: one JSON object {argv, env, cols, rows, scrollback,
workshop, name, command, startedAt}; stdout: one line "ready PID" once the program runs and the
socket listens; stderr: why it could not start.

The program's chain (nsenter into the workshop, then the program) starts in a new session with
no controlling terminal; the sandbox side (`setsid -c`, see sessions.ts) takes the PTY as its
controlling terminal. So Ctrl-C and the other terminal signals reach the program's processes
only, never the host-side nsenter that waits for them.

The socket (mode 0600, in a 0700 directory of the server's data dir; peers of another uid are
refused) takes one client at a time: the server. A new connection replaces the old one. Frames
both ways: a type byte, a 4-byte big-endian length, the payload.
  to the server   M meta (JSON)   B recent output   G greeting done (after M, B and X if ended)
                  O output   X exit (JSON)   A input written to the program (4-byte count)
  from the server I input   R resize (JSON {cols, rows})   S signal (name)
                  K hang up (SIGKILL HANGUP_GRACE later; the holder goes once the program ended)
                  Q quit (the program is killed)
Flow control: while more than HIGH bytes wait to go to the server, the PTY is not read (the
program blocks on its output, as in a terminal nobody reads); with no server connected the
output is read into the recent buffer only, so the program goes on. Input is acknowledged (A)
as the program reads it; the server keeps at most HIGH bytes unacknowledged, so the socket is
always read and a signal or a hang-up is never stuck behind a paste the program does not read.

After the program exits, its exit is kept for a server to collect, for at most LINGER seconds,
or until the server says Q (the session was stopped or its workshop deleted). A holder whose
socket is gone (the data dir removed) ends at once, its program with it.
"""
import errno
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import termios
import time

PROTOCOL = 1
HIGH = 1 << 20
READ = 64 << 10
LINGER = 24 * 3600
HANGUP_GRACE = 2.0
# Not in python's termios module: UTF-8 aware erase in canonical mode, as node-pty sets it.
IUTF8 = getattr(termios, "IUTF8", 0o40000)
# Nor is the ioctl that names a terminal's session (Linux's value).
TIOCGSID = getattr(termios, "TIOCGSID", 0x5429)


def frame(kind, payload):
    return kind + struct.pack(">I", len(payload)) + payload


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def session_processes(sid):
    """Host pids in session sid (background jobs included)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[3]) == sid:
                out.append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return out


class Holder:
    def __init__(self, cfg, path):
        self.cfg = cfg
        self.path = path
        self.recent = bytearray()
        self.recent_max = int(cfg.get("scrollback", 256 << 10))
        self.exit = None
        self.exited_at = None
        self.kill_at = None
        self.quit_when_ended = False
        self.client = None
        self.out = bytearray()
        self.inbuf = bytearray()
        self.to_program = bytearray()
        self.sel = selectors.DefaultSelector()
        self.meta = {
            # Bumped when the frames change: a newer server then knows what it talks to.
            "protocol": PROTOCOL,
            "workshop": cfg["workshop"],
            "name": cfg["name"],
            "command": cfg["command"],
            "startedAt": cfg["startedAt"],
            "cols": cfg["cols"],
            "rows": cfg["rows"],
        }

    def start(self):
        cfg = self.cfg
        path = self.path
        # A live holder already there (another server's, or one of another protocol) is not
        # taken over: its session would be lost.
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                sys.stderr.write(f"a session holder already listens on {path}\n")
                sys.exit(3)
            except OSError:
                os.unlink(path)
            finally:
                probe.close()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(4)
        self.inode = os.stat(path).st_ino
        self.listener.setblocking(False)
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[0] |= IUTF8
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.master = master
        self.resize(cfg["cols"], cfg["rows"])
        pid = os.fork()
        if pid == 0:
            try:
                # A session of its own, without a controlling terminal: the sandbox side takes it.
                os.setsid()
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                os.closerange(3, 65536)
                # What python ignores (PIPE, XFSZ) or this holder does must not stay ignored for
                # the program: exec keeps SIG_IGN.
                for sig in range(1, signal.NSIG):
                    if sig in (signal.SIGKILL, signal.SIGSTOP):
                        continue
                    try:
                        signal.signal(sig, signal.SIG_DFL)
                    except (OSError, ValueError, RuntimeError):
                        pass
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                os.chdir("/")
                os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
            except BaseException as e:  # noqa: BLE001 - the child must never return into the loop
                os.write(2, f"atelier: could not start the session: {e}\r\n".encode())
            os._exit(127)
        os.close(slave)
        self.pid = pid
        self.meta["pid"] = pid
        os.set_blocking(master, False)
        self.master_open = True
        # SIGCHLD wakes the loop (the program's exit is reported at once, not at the next tick).
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.wakeup = r
        self.sel.register(r, selectors.EVENT_READ, "wakeup")
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(master, selectors.EVENT_READ, "pty")
        os.write(1, f"ready {pid}\n".encode())
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)

    # ---------------------------------------------------------------- the program

    def resize(self, cols, rows):
        self.meta["cols"], self.meta["rows"] = cols, rows
        if self.master < 0:
            return
        try:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        except OSError:
            pass

    def program_session(self):
        """The session that took the PTY as its terminal (the program's, inside the sandbox).

        Asked of the live PTY only: a session id remembered after its terminal closed could be
        a pid reused by something else by the time it is used."""
        if self.master < 0:
            return None
        try:
            sid = struct.unpack("i", fcntl.ioctl(self.master, TIOCGSID, b"\0\0\0\0"))[0]
        except OSError:
            return None
        return sid if sid > 0 else None

    def signal_group(self, name):
        sig = getattr(signal, name, None) if name.startswith("SIG") else None
        if not isinstance(sig, signal.Signals) or self.exit is not None or self.master < 0:
            return
        try:
            group = os.tcgetpgrp(self.master)
        except OSError:
            return
        if group > 0:
            try:
                os.killpg(group, sig)
            except OSError:
                pass

    def kill_all(self, sig, program_only=False):
        """The program's session (its background jobs too) and, unless program_only, the
        host-side chain (its pid cannot have been reused: it is this holder's child, not reaped)."""
        sid = self.program_session()
        pids = set(session_processes(sid)) if sid else set()
        if (not program_only or sid is None) and self.exit is None:
            pids.update(session_processes(self.pid))
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def hang_up(self):
        # The holder goes once the program has ended (even if no server hears the end).
        self.quit_when_ended = True
        self.to_program.clear()
        if self.exit is not None:
            self.quit()
        # As when a terminal closes: the program's processes get SIGHUP; the host-side chain
        # waits for them (it ends with them).
        self.kill_all(signal.SIGHUP, program_only=True)
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
        os.close(self.master)
        self.master = -1
        self.to_program.clear()

    def keep(self, data):
        self.recent += data
        if len(self.recent) > self.recent_max:
            del self.recent[: len(self.recent) - self.recent_max]
        if self.client is not None:
            self.send(frame(b"O", data))

    def write_program(self):
        if not self.to_program:
            return
        if self.exit is not None or self.master < 0:
            self.to_program.clear()
            return
        try:
            n = os.write(self.master, self.to_program)
        except BlockingIOError:
            return
        except OSError:
            n = len(self.to_program)
        del self.to_program[:n]
        if self.client is not None:
            self.send(frame(b"A", struct.pack(">I", n)))

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
            self.exit = {"exitCode": 128 + sig, "signal": signal_name(sig)}
        else:
            self.exit = {"exitCode": os.WEXITSTATUS(status), "signal": None}
        self.exited_at = time.monotonic()
        self.to_program.clear()
        if self.client is not None:
            self.send(frame(b"X", json.dumps(self.exit).encode()))
        if self.quit_when_ended:
            self.quit()

    # ---------------------------------------------------------------- the server

    def accept(self):
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        try:
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        except OSError:
            uid = -1
        if uid != os.getuid():
            conn.close()
            return
        if self.client is not None:
            self.drop_client()
        conn.setblocking(False)
        self.client = conn
        self.out = bytearray()
        self.inbuf = bytearray()
        self.sel.register(conn, selectors.EVENT_READ, "client")
        self.send(frame(b"M", json.dumps(self.meta).encode()))
        self.send(frame(b"B", bytes(self.recent)))
        if self.exit is not None:
            self.send(frame(b"X", json.dumps(self.exit).encode()))
        self.send(frame(b"G", b""))

    def drop_client(self):
        if self.client is None:
            return
        try:
            self.sel.unregister(self.client)
        except (KeyError, ValueError):
            pass
        self.client.close()
        self.client = None
        self.out = bytearray()

    def send(self, data):
        if self.client is None:
            return
        self.out += data
        self.flush()

    def flush(self):
        if self.client is None or not self.out:
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
            if self.exit is None and self.master >= 0:
                self.to_program += payload
                self.write_program()
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
        self.kill_all(signal.SIGKILL)
        if unlink and self.socket_is_ours():
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os._exit(0)

    def socket_is_ours(self):
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

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
                self.modify(self.client, selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0), "client")
            for key, events in self.sel.select(timeout=0.5):
                try:
                    self.handle(key, events)
                except Exception:  # noqa: BLE001 - one bad event must not end the session
                    if key.data == "client":
                        self.drop_client()
            self.reap()
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_all(signal.SIGKILL)
                self.kill_at = None
            if self.exit is not None and now - self.exited_at > LINGER:
                self.quit()
            if not self.socket_is_ours():
                # The server's data dir was removed (or another holder took the name): nobody can
                # reach this session any more.
                self.quit(unlink=False)

    def handle(self, key, events):
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
    path = sys.argv[1]
    cfg = json.loads(sys.stdin.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # The server going away (SIGHUP of its terminal, SIGINT of its Ctrl-C) is not the session's end.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    holder = Holder(cfg, path)
    holder.start()
    holder.run()


if __name__ == "__main__":
    main()
