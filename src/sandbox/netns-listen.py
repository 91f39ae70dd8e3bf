# Run by the server under `nsenter --net` (see netns.ts): listens on 127.0.0.1:PORT inside a
# workshop's network namespace and hands the listening socket to the server, then exits.
#
# The hand-over uses the IPC channel Node opens for a child spawned with an 'ipc' stdio
# (NODE_CHANNEL_FD): one JSON line {"cmd": "NODE_HANDLE", "type": "net.Server", ...} sent with
# the socket as SCM_RIGHTS, which Node turns into a net.Server ('message' event), answered by
# {"cmd": "NODE_HANDLE_ACK"}. That is Node's own wire format for `child.send(msg, server)`;
# Python starts in ~40 ms where a Node helper takes ~140 ms, on every workshop start.
import json
import os
import socket
import sys

port = int(sys.argv[1])
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(511)
channel = socket.socket(fileno=int(os.environ["NODE_CHANNEL_FD"]))
message = json.dumps({"cmd": "NODE_HANDLE", "type": "net.Server", "msg": "listening"}) + "\n"
socket.send_fds(channel, [message.encode()], [listener.fileno()])
# Wait for the acknowledgement: the socket is the server's once it has taken it.
received = b""
while b"\n" not in received:
    chunk = channel.recv(4096)
    if not chunk:
        break
    received += chunk
