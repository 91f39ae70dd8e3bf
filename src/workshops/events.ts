/**
 * A workshop's lifecycle, as `WorkshopService` publishes it to the other rooms of the server
 * (terminals, the MCP gateway…), so that they never have to watch URLs or the database to learn
 * that a workshop they hold something for is going away:
 * - `deleting`: someone allowed to delete it asked; published before anything is torn down (its
 *   sandbox is still there), so live connections into it can be cut with the reason.
 * - `stopped`: it was suspended (its processes frozen); what needs it running should let go.
 * - `deleted`: it is gone (its row too); whatever was kept for it can be forgotten.
 */
export type WorkshopEvent = { type: 'deleting'; id: string } | { type: 'stopped'; id: string } | { type: 'deleted'; id: string };

export type WorkshopEventType = WorkshopEvent['type'];

/**
 * A listener: called in the order listeners subscribed, each awaited before the next (and before
 * the operation goes on), so a `deleting` listener's cuts are done before the sandbox goes. A
 * listener that throws (or rejects) is logged and never fails the operation: the workshop's
 * owner asked for it, and the room that failed cleans up on `deleted` or at its next start.
 */
export type WorkshopListener<T extends WorkshopEventType = WorkshopEventType> = (
  event: Extract<WorkshopEvent, { type: T }>,
) => void | Promise<void>;

/** The lifecycle events of one `WorkshopService` (see WorkshopEvent). */
export class WorkshopEvents {
  private readonly listeners = new Map<WorkshopEventType, WorkshopListener[]>();

  constructor(private readonly log: { warn(obj: object, msg?: string): void }) {}

  /** Subscribes `listener` to events of `type`; the returned function unsubscribes it. */
  on<T extends WorkshopEventType>(type: T, listener: WorkshopListener<T>): () => void {
    const list = this.listeners.get(type) ?? [];
    const fn = listener as unknown as WorkshopListener;
    list.push(fn);
    this.listeners.set(type, list);
    return () => {
      const current = this.listeners.get(type) ?? [];
      const i = current.indexOf(fn);
      if (i >= 0) current.splice(i, 1);
    };
  }

  /** Publishes `event` to its listeners, one after the other; resolves when all are done. */
  async emit(event: WorkshopEvent): Promise<void> {
    for (const listener of [...(this.listeners.get(event.type) ?? [])]) {
      try {
        await listener(event);
      } catch (err) {
        this.log.warn({ err: String(err), workshop: event.id, event: event.type }, 'a workshop lifecycle listener failed');
      }
    }
  }
}
