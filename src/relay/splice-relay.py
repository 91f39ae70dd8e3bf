# Relays pairs of connected sockets with splice(2): the bytes go socket -> pipe -> socket inside
# the kernel, never through a user-space buffer. Node has no splice, and a relay written in Node
# pays two copies and a JavaScript callback per chunk: measured here, one hop of 1 GiB over
# loopback runs at ~600 MiB/s in Node and ~1200 MiB/s through this loop (direct: ~1300-1900).
#
# Started by src/relay/splice.ts as a child with an IPC channel (NODE_CHANNEL_FD). Node sends each
# socket with child.send({pair, side, tag}, socket): its wire format is one JSON line per message,
# the socket's descriptor riding along as SCM_RIGHTS, and Node waits for {"cmd":"NODE_HANDLE_ACK"}
# before it sends the next socket ({pair, side, tag, idleMs}: a pair with no byte either way for
# idleMs is cut with ETIMEDOUT). Other lines: {"close": pair} and {"closeTag": tag}. Each pair,
# once ended, is answered with {"done": pair, "aToB": n, "bToA": n, "error": "ECONNRESET"?,
# "side": 0|1?} (the side whose socket failed). Exits when the channel closes (its parent is gone),
# resetting the pairs it relays: their peers see a reset, not a clean end, as they would if the
# parent had relayed them itself.
import errno
import fcntl
import os
import select
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])  # the shared modules' directory, named by the spawner (src/core/python.ts)
from node_ipc import Channel, Closed  # noqa: E402

F_SETPIPE_SZ = 1031
CHUNK = 1 << 20
# Rounds one direction may run before the loop serves the others (level-triggered epoll comes
# back to it).
ROUNDS = 8
FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
IN, OUT = select.EPOLLIN, select.EPOLLOUT

channel = Channel()
channel.setblocking(False)
ep = select.epoll()
ep.register(channel.fileno(), IN)

halves = {}  # pair id -> {side: (sock, tag)} until both sides arrived
pairs = {}  # pair id -> Pair
by_fd = {}  # socket fd -> (Pair, side)


def send(obj):
    channel.send(obj)


class Direction:
    """Bytes from socket `src` to socket `dst` through one pipe."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(self.w, F_SETPIPE_SZ, CHUNK)
        except OSError:
            pass  # above /proc/sys/fs/pipe-max-size: the default 64 KiB pipe works, slower
        self.in_pipe = 0
        self.eof = False
        self.done = False
        self.count = 0
        self.wants = IN  # IN: waits for src to be readable; OUT: for dst to be writable; 0: done

    def pump(self):
        """Moves what it can; returns normally or raises OSError from the socket that failed."""
        for _ in range(ROUNDS):
            if self.in_pipe:
                try:
                    n = os.splice(self.r, self.dst.fileno(), self.in_pipe, flags=FLAGS)
                except BlockingIOError:
                    self.wants = OUT
                    return
                except OSError as e:
                    e.side_fd = self.dst.fileno()
                    raise
                self.in_pipe -= n
                continue
            if self.eof:
                try:
                    self.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self.done = True
                self.wants = 0
                return
            try:
                n = os.splice(self.src.fileno(), self.w, CHUNK, flags=FLAGS)
            except BlockingIOError:
                self.wants = IN
                return
            except OSError as e:
                e.side_fd = self.src.fileno()
                raise
            if n == 0:
                self.eof = True
            else:
                self.in_pipe += n
                self.count += n
        # Out of rounds with more to do: level-triggered epoll reports it again.
        self.wants = OUT if self.in_pipe else IN

    def close(self):
        os.close(self.r)
        os.close(self.w)


class Pair:
    def __init__(self, pid, tag, a, b, idle):
        self.id, self.tag = pid, tag
        self.idle = idle
        self.last = time.monotonic()
        self.socks = (a, b)
        self.dirs = (Direction(a, b), Direction(b, a))
        self.masks = [None, None]
        self.ended = False
        for side, s in enumerate(self.socks):
            by_fd[s.fileno()] = (self, side)

    def mask(self, side):
        # Socket `side` is the source of dirs[side] and the destination of dirs[1 - side].
        m = 0
        if self.dirs[side].wants == IN:
            m |= IN
        if self.dirs[1 - side].wants == OUT:
            m |= OUT
        return m

    def rearm(self):
        for side, s in enumerate(self.socks):
            m = self.mask(side)
            if m == self.masks[side]:
                continue
            # A socket nobody waits on is taken out: epoll always reports HUP/ERR, which would
            # otherwise spin on a socket whose peer is gone while the other direction still runs.
            if m == 0:
                if self.masks[side]:
                    ep.unregister(s.fileno())
            elif not self.masks[side]:
                ep.register(s.fileno(), m)
            else:
                ep.modify(s.fileno(), m)
            self.masks[side] = m

    def event(self, side, ev):
        self.last = time.monotonic()
        try:
            if ev & (IN | select.EPOLLHUP | select.EPOLLERR) and self.dirs[side].wants == IN:
                self.dirs[side].pump()
            if ev & (OUT | select.EPOLLHUP | select.EPOLLERR) and self.dirs[1 - side].wants == OUT:
                self.dirs[1 - side].pump()
        except OSError as e:
            failed = 0 if getattr(e, "side_fd", None) == self.socks[0].fileno() else 1
            self.end(errno.errorcode.get(e.errno or 0, "EIO"), failed)
            return
        if self.dirs[0].done and self.dirs[1].done:
            self.end(None, None)
        else:
            self.rearm()

    def end(self, error, failed):
        if self.ended:
            return
        self.ended = True
        for side, s in enumerate(self.socks):
            if self.masks[side]:
                ep.unregister(s.fileno())
            del by_fd[s.fileno()]
            if error is not None and side != failed:
                # The peer of a failed side gets a reset too, as a direct connection would.
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            s.close()
        for d in self.dirs:
            d.close()
        del pairs[self.id]
        answer = {"done": self.id, "aToB": self.dirs[0].count, "bToA": self.dirs[1].count}
        if error is not None:
            answer["error"] = error
            answer["side"] = failed
        send(answer)


def start(pid, tag, idle, a, b):
    a.setblocking(False)
    b.setblocking(False)
    p = Pair(pid, tag, a, b, idle)
    pairs[pid] = p
    # Data may already wait on either side: pump once before waiting.
    p.event(0, IN)
    if not p.ended:
        p.event(1, IN)


def message(m):
    if m.get("cmd") == "NODE_HANDLE":
        # Node sends a socket only once the previous one was acknowledged.
        send({"cmd": "NODE_HANDLE_ACK"})
        fd = channel.take_fd()
        inner = m.get("msg") or {}
        pid, side, tag, idle = inner.get("pair"), inner.get("side"), inner.get("tag"), inner.get("idleMs")
        if fd is None:
            return
        s = socket.socket(fileno=fd)
        if not isinstance(pid, int) or side not in (0, 1):
            s.close()
            return
        half = halves.setdefault(pid, {})
        half[side] = (s, tag)
        if len(half) == 2:
            del halves[pid]
            idle_s = idle / 1000 if isinstance(idle, (int, float)) and idle > 0 else None
            start(pid, tag, idle_s, half[0][0], half[1][0])
    elif "close" in m:
        p = pairs.get(m["close"])
        if p:
            p.end("ECANCELED", None)
        for s, _ in halves.pop(m["close"], {}).values():
            s.close()
    elif "closeTag" in m:
        for p in [p for p in pairs.values() if p.tag == m["closeTag"]]:
            p.end("ECANCELED", None)


def parent_gone():
    """The server died: every pair it relayed is reset, as its own sockets would have been."""
    socks = [s for p in pairs.values() for s in p.socks]
    socks += [s for half in halves.values() for s, _ in half.values()]
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        except OSError:
            pass
    raise SystemExit(0)


def read_channel():
    while True:
        messages = channel.receive()
        if not messages:
            return
        for m in messages:
            message(m)


def sweep():
    now = time.monotonic()
    for p in [p for p in pairs.values() if p.idle is not None and now - p.last > p.idle]:
        p.end("ETIMEDOUT", None)


def main():
    last_sweep = time.monotonic()
    while True:
        timed = any(p.idle is not None for p in pairs.values())
        if timed and time.monotonic() - last_sweep >= 1:
            last_sweep = time.monotonic()
            sweep()
        for fd, ev in ep.poll(1.0 if timed else -1):
            if fd == channel.fileno():
                read_channel()
                continue
            owner = by_fd.get(fd)
            if owner:
                owner[0].event(owner[1], ev)


try:
    main()
except Closed:
    # Read, sent or acknowledged: whichever first found the server gone.
    parent_gone()
