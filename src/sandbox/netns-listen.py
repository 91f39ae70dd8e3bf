# Run by the server under `nsenter --net` (see netns.ts): listens on each ADDRESS:PORT given
# inside a workshop's network namespace and hands the listening sockets to the server, one by
# one in the order given, then exits.
#
# The hand-over uses the IPC channel Node opens for a child spawned with an 'ipc' stdio
# (NODE_CHANNEL_FD): one JSON line {"cmd": "NODE_HANDLE", "type": "net.Server", ...} sent with
# the socket as SCM_RIGHTS, which Node turns into a net.Server ('message' event), answered by
# {"cmd": "NODE_HANDLE_ACK"}. That is Node's own wire format for `child.send(msg, server)`;
# Python starts in ~40 ms where a Node helper takes ~140 ms, on every workshop start.
import os
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])  # the shared modules' directory, named by the spawner (src/core/python.ts)
from node_ipc import Channel, Closed  # noqa: E402

channel = Channel()
for index, arg in enumerate(sys.argv[1:]):
    address, _, port = arg.rpartition(":")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address or "127.0.0.1", int(port)))
    except OSError as err:
        sys.stderr.write("cannot listen on %s: %s\n" % (arg, err.strerror))
        sys.exit(1)
    listener.listen(511)
    try:
        # The socket is the server's once it has acknowledged it.
        channel.send_handle("net.Server", "listening:%d" % index, listener.fileno())
    except Closed:
        sys.exit(1)
    listener.close()
