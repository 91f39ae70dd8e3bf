# Run by the server under `nsenter --net` (see connector.ts), one per running workshop while it is
# used: connects to 127.0.0.1:PORT inside the workshop's network namespace for each request and
# hands the connected socket over (Node's IPC wire format, SCM_RIGHTS: node_ipc.py), without a
# process start per connection. Requests are JSON lines
# {"id": N, "port": P}; answers are {"id": N} with the socket, or {"id": N, "error": "ECONNREFUSED"}.
# Exits when the server closes the channel.
import errno
import os
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])  # the shared modules' directory, named by the spawner (src/core/python.ts)
from node_ipc import Channel, Closed  # noqa: E402

channel = Channel()
requests = []


def valid(m):
    return isinstance(m.get("id"), int) and isinstance(m.get("port"), int)


try:
    while True:
        while not requests:
            requests.extend(m for m in channel.receive() if valid(m))
        req = requests.pop(0)
        conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        conn.settimeout(5)
        try:
            conn.connect(("127.0.0.1", req["port"]))
        except OSError as e:
            name = errno.errorcode.get(e.errno or 0, "ETIMEDOUT" if isinstance(e, TimeoutError) else "EIO")
            conn.close()
            channel.send({"id": req["id"], "error": name})
            continue
        conn.setblocking(True)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # As Node's own sender does: the next socket only once this one was taken.
        channel.send_handle("net.Socket", {"id": req["id"]}, conn.fileno())
        conn.close()
except Closed:
    sys.exit(0)
