/**
 * Run by the server under `nsenter --net` (see netns.ts): opens a listening TCP socket on
 * 127.0.0.1:PORT inside a workshop's network namespace and hands it to the server over the IPC
 * channel, then exits. The socket stays in the workshop's namespace; the server accepts on it.
 */
import net from 'node:net';

const port = Number(process.argv[2]);
const server = net.createServer();
server.on('error', (err) => {
  process.send?.({ error: err.message }, () => process.exit(1));
});
server.listen({ host: '127.0.0.1', port, backlog: 511 }, () => {
  process.send?.('listening', server, () => process.exit(0));
});
