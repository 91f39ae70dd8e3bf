# Run by the server under `nsenter --net` (see netns.ts): connects to 127.0.0.1:PORT inside a
# workshop's network namespace and hands the connected socket to the server, then exits.
# Same hand-over as netns-listen.py (Node's IPC wire format, SCM_RIGHTS), with type net.Socket.
# A refused or failed connection is reported as {"error": "ECONNREFUSED"} (or the errno name).
import errno
import json
import os
import socket
import sys

port = int(sys.argv[1])
channel = socket.socket(fileno=int(os.environ["NODE_CHANNEL_FD"]))
conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
conn.settimeout(5)
try:
    conn.connect(("127.0.0.1", port))
except OSError as e:
    name = errno.errorcode.get(e.errno or 0, "ETIMEDOUT" if isinstance(e, TimeoutError) else "EIO")
    channel.sendall((json.dumps({"error": name}) + "\n").encode())
    sys.exit(0)
conn.setblocking(True)
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
message = json.dumps({"cmd": "NODE_HANDLE", "type": "net.Socket", "msg": "connected"}) + "\n"
socket.send_fds(channel, [message.encode()], [conn.fileno()])
received = b""
while b"\n" not in received:
    chunk = channel.recv(4096)
    if not chunk:
        break
    received += chunk
