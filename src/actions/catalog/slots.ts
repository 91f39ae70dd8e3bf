import { z } from 'zod';
import { keyEditAction } from './configEdit.js';

const Slot = z.strictObject({
  slot: z.string().regex(/^[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?$/, 'a slot name is a DNS label (lower-case letters, digits, -)'),
});
type SlotParams = z.infer<typeof Slot>;
const help = [{ name: 'slot', type: 'string', required: true, description: 'the name of a shared, long-lived simulator instance' }];

function list(current: unknown): string[] | string {
  if (current === undefined || current === null) return [];
  if (!Array.isArray(current) || current.some((x) => typeof x !== 'string'))
    return 'slots: in atelier.yaml is not a list of names: fix it by hand first';
  return current as string[];
}

/** `slots.assign`: attaches a shared simulator instance ("emplacement") to the project. */
export const slotsAssign = keyEditAction<SlotParams>({
  id: 'slots.assign',
  title: 'attach a shared simulator instance (slot) to the project',
  path: ['slots'],
  parameters: Slot,
  parameterHelp: help,
  compute(current, { slot }) {
    const l = list(current);
    if (typeof l === 'string') return l;
    if (l.includes(slot)) return `slot ${slot} is already attached to this project`;
    return { value: [...l, slot] };
  },
  inverseDescription: 'restore atelier.yaml to its exact prior bytes (the slot is detached again)',
});

/** `slots.remove`: detaches a shared simulator instance from the project. */
export const slotsRemove = keyEditAction<SlotParams>({
  id: 'slots.remove',
  title: 'detach a shared simulator instance (slot) from the project',
  path: ['slots'],
  parameters: Slot,
  parameterHelp: help,
  compute(current, { slot }) {
    const l = list(current);
    if (typeof l === 'string') return l;
    if (!l.includes(slot)) return `slot ${slot} is not attached to this project`;
    return { value: l.filter((x) => x !== slot) };
  },
  inverseDescription: 'restore atelier.yaml to its exact prior bytes (the slot is attached again)',
});
