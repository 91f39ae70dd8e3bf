# Run by the server under `nsenter --net` (see connector.ts), one per running workshop while it is
# used: connects to 127.0.0.1:PORT inside the workshop's network namespace for each request and
# hands the connected socket over, as netns-connect.py does for one (Node's IPC wire format,
# SCM_RIGHTS), without a process start per connection. Requests are JSON lines
# {"id": N, "port": P}; answers are {"id": N} with the socket, or {"id": N, "error": "ECONNREFUSED"}.
# Exits when the server closes the channel.
import errno
import json
import os
import socket

channel = socket.socket(fileno=int(os.environ["NODE_CHANNEL_FD"]))
buffered = b""
requests = []


def read_lines():
    """Reads what the server sent; requests are queued, acknowledgements returned."""
    global buffered
    chunk = channel.recv(65536)
    if not chunk:
        raise SystemExit(0)
    buffered += chunk
    acks = 0
    while b"\n" in buffered:
        line, buffered = buffered.split(b"\n", 1)
        if not line.strip():
            continue
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("cmd") == "NODE_HANDLE_ACK":
            acks += 1
        elif isinstance(m, dict) and isinstance(m.get("id"), int) and isinstance(m.get("port"), int):
            requests.append(m)
    return acks


def send(obj):
    channel.sendall((json.dumps(obj) + "\n").encode())


while True:
    while not requests:
        read_lines()
    req = requests.pop(0)
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.settimeout(5)
    try:
        conn.connect(("127.0.0.1", req["port"]))
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0, "ETIMEDOUT" if isinstance(e, TimeoutError) else "EIO")
        conn.close()
        send({"id": req["id"], "error": name})
        continue
    conn.setblocking(True)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message = json.dumps({"cmd": "NODE_HANDLE", "type": "net.Socket", "msg": {"id": req["id"]}}) + "\n"
    socket.send_fds(channel, [message.encode()], [conn.fileno()])
    conn.close()
    # As Node's own sender does: the next socket only once this one was taken.
    while read_lines() == 0:
        pass
