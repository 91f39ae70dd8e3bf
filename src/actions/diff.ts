const CONTEXT = 3;

function lines(text: string): string[] {
  if (text === '') return [];
  const out = text.split('\n');
  if (out[out.length - 1] === '') out.pop();
  return out;
}

function range(start: number, count: number): string {
  // Unified diff numbers lines from 1; an empty side is written `N,0` with N the line before.
  if (count === 0) return `${start},0`;
  return count === 1 ? `${start + 1}` : `${start + 1},${count}`;
}

/**
 * A unified diff (`diff -u`) between two versions of one file. The edits of this module change
 * one contiguous region, so the common first and last lines are trimmed and the rest is one hunk
 * with three lines of context: exact for such edits, and linear in the file's size.
 */
export function unifiedDiff(file: string, before: string | null, after: string | null): string {
  const a = lines(before ?? '');
  const b = lines(after ?? '');
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  if (head === a.length && head === b.length && (before === null) === (after === null)) return '';
  const from = Math.max(0, head - CONTEXT);
  const aEnd = Math.min(a.length, a.length - tail + CONTEXT);
  const bEnd = Math.min(b.length, b.length - tail + CONTEXT);
  const out = [before === null ? '--- /dev/null' : `--- a/${file}`, after === null ? '+++ /dev/null' : `+++ b/${file}`];
  out.push(`@@ -${range(from, aEnd - from)} +${range(from, bEnd - from)} @@`);
  for (let i = from; i < head; i++) out.push(` ${a[i]}`);
  for (let i = head; i < a.length - tail; i++) out.push(`-${a[i]}`);
  for (let i = head; i < b.length - tail; i++) out.push(`+${b[i]}`);
  for (let i = a.length - tail; i < aEnd; i++) out.push(` ${a[i]}`);
  return `${out.join('\n')}\n`;
}
