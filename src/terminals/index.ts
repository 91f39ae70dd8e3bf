// Terminals: PTYs, byte tunnels (port-forward, ssh -L), the SSH endpoint and agent sessions, in
// workshops. The server's routes map HTTP and WebSocket onto `createTerminals(…)`.

/** Builds the terminals room (PTYs, tunnels, the SSH endpoint, agent sessions) for one server. */
export { createTerminals, SSH_PORT } from './terminals.js';
export type { ApprovalNotice, OpenTarget, SessionStart, Terminals, TerminalsOptions } from './terminals.js';
/** Sends one control event (JSON text frame) on a terminal or tunnel WebSocket. */
export { sendEvent } from './bridge.js';
/** Sends an error event on a WebSocket, then closes it. */
export { failSocket } from './bridge.js';
/** Attaches a WebSocket to a terminal (output, input, resize, signals); resolves when it detaches. */
export { attachPty } from './bridge.js';
/** Bridges a WebSocket and a connection inside the workshop (a tunnel's WebSocket form). */
export { bridgeSocket } from './bridge.js';
/** The command an agent preset (claude, gemini) runs in a workshop. */
export { presetCommand } from './sessions.js';
export type { SessionInfo } from './sessions.js';
export type { Sealer, SshKeyInfo } from './ssh.js';
export type { TerminalTarget } from './pty.js';
