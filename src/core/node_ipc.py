"""Node's IPC channel, as a python child spawned with an 'ipc' stdio sees it (NODE_CHANNEL_FD).

Shared by Atelier's python helpers (splice-relay.py, netns-connector.py, netns-listen.py). Node's wire format: one JSON line per message; a message sent with a handle
(`child.send(msg, socket)`) is {"cmd": "NODE_HANDLE", "type": "net.Socket" | "net.Server",
"msg": ...} with the descriptor riding along as SCM_RIGHTS, and its receiver answers
{"cmd": "NODE_HANDLE_ACK"}. Node sends the next handle only once the previous one was
acknowledged, and expects the same of its peer.

A helper imports it from the directory its spawner names (the helpers run with `python3 -I -S`,
which ignores PYTHONPATH; src/core/python.ts says why):
    sys.dont_write_bytecode = True; sys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])
"""
import json
import os
import socket
import struct


class Closed(Exception):
    """The other end (the Node parent) closed the channel, or died: a read, a send or an
    acknowledgement that finds it gone raises this, never an OSError."""


class Channel:
    def __init__(self):
        self.sock = socket.socket(fileno=int(os.environ["NODE_CHANNEL_FD"]))
        self.buffered = b""
        # Descriptors received (SCM_RIGHTS), in order, until their NODE_HANDLE line takes them.
        self.fds = []
        # Messages read while waiting for an acknowledgement, for the next receive().
        self.backlog = []

    def fileno(self):
        return self.sock.fileno()

    def setblocking(self, flag):
        self.sock.setblocking(flag)

    def send(self, obj):
        """One message, whole (waits for room even on a non-blocking channel)."""
        data = (json.dumps(obj) + "\n").encode()
        blocking = self.sock.getblocking()
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            raise Closed()
        finally:
            self.sock.setblocking(blocking)

    def send_handle(self, kind, msg, fd):
        """A socket for the parent (`kind`: "net.Socket" or "net.Server"), then its acknowledgement.

        The descriptor is the parent's once acknowledged; the caller may close its own copy then."""
        line = json.dumps({"cmd": "NODE_HANDLE", "type": kind, "msg": msg}) + "\n"
        blocking = self.sock.getblocking()
        self.sock.setblocking(True)
        try:
            socket.send_fds(self.sock, [line.encode()], [fd])
            self.wait_ack()
        except (BrokenPipeError, ConnectionResetError):
            raise Closed()
        finally:
            self.sock.setblocking(blocking)

    def wait_ack(self):
        while True:
            for m in self._read():
                if m.get("cmd") == "NODE_HANDLE_ACK":
                    return
                self.backlog.append(m)

    def receive(self):
        """The messages that came (JSON objects), oldest first: [] when nothing is there yet on a
        non-blocking channel. Raises Closed when the parent closed it."""
        if self.backlog:
            out, self.backlog = self.backlog, []
            return out
        return self._read()

    def take_fd(self):
        """The descriptor that came with the NODE_HANDLE message being handled (None if none)."""
        return self.fds.pop(0) if self.fds else None

    def _read(self):
        try:
            data, anc, _flags, _addr = self.sock.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        except BlockingIOError:
            return []
        except ConnectionResetError:
            # The parent died with bytes of ours unread (kill -9 between two acknowledgements):
            # the same end of the channel as a clean close.
            raise Closed()
        if not data:
            raise Closed()
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                n = len(payload) - len(payload) % 4
                self.fds.extend(struct.unpack("%di" % (n // 4), payload[:n]))
        self.buffered += data
        out = []
        while b"\n" in self.buffered:
            line, self.buffered = self.buffered.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if isinstance(m, dict):
                out.append(m)
        return out
