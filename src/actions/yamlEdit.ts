import {
  isAlias,
  isCollection,
  isMap,
  isScalar,
  isSeq,
  parseDocument,
  stringify,
  type Node as YamlNode,
  type Scalar,
  type YAMLMap,
  type YAMLSeq,
} from 'yaml';
import { AtelierError } from '../core/index.js';

/**
 * Targeted key edits of a YAML file that leave every byte outside the edited value as it was
 * (comments, blank lines, anchors, quoting and flow style elsewhere). The file is parsed with
 * the `yaml` library only to find the source range of the value; the edit is one splice of the
 * original text, never a re-serialisation of the document.
 */
export interface Splice {
  start: number;
  end: number;
  insert: string;
}

export interface KeyEdit {
  text: string;
  splice: Splice;
}

function refuse(file: string, message: string): AtelierError {
  return new AtelierError('PRECONDITION_FAILED', `${file}: ${message}`, { field: file });
}

/** The document's top-level value as plain data; throws on invalid YAML or a non-mapping. */
export function readYamlMapping(text: string, file: string): Record<string, unknown> {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) throw refuse(file, `not valid YAML (${doc.errors[0]!.message.split('\n')[0]}): fix it by hand first`);
  const value: unknown = doc.toJS({ maxAliasCount: 100 });
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw refuse(file, 'the top level must be a mapping (key: value)');
  return value as Record<string, unknown>;
}

function columnOf(text: string, offset: number): number {
  return offset - (text.lastIndexOf('\n', offset - 1) + 1);
}

/** Block YAML for `value`, every line but the first indented by `indent` spaces, ending with `eol`. */
function renderBlock(value: unknown, indent: number, eol: string): string {
  const lines = stringify(value, { indent: 2, lineWidth: 0, version: '1.1' }).replace(/\n$/, '').split('\n');
  return lines.map((l, i) => (i === 0 ? l : ' '.repeat(indent) + l)).join(eol) + eol;
}

function renderFlow(value: unknown): string {
  return stringify(value, { collectionStyle: 'flow', flowCollectionPadding: false, lineWidth: 0, version: '1.1' }).replace(/\n$/, '');
}

function isScalarValue(value: unknown): boolean {
  return value === null || typeof value !== 'object';
}

function nested(path: string[], value: unknown): unknown {
  return path.reduceRight<unknown>((acc, k) => ({ [k]: acc }), value);
}

/** `key: value` lines for a new entry of a block mapping whose keys sit at column `indent`. */
function renderPair(key: string, value: unknown, indent: number, eol: string): string {
  const k = stringify(key).replace(/\n$/, '');
  if (isScalarValue(value))
    return `${' '.repeat(indent)}${k}: ${stringify(value, { lineWidth: 0, version: '1.1' }).replace(/\n$/, '')}${eol}`;
  if (Array.isArray(value) && value.length === 0) return `${' '.repeat(indent)}${k}: []${eol}`;
  return `${' '.repeat(indent)}${k}:${eol}${' '.repeat(indent + 2)}${renderBlock(value, indent + 2, eol)}`;
}

function checkEditable(node: YamlNode, file: string, where: string): void {
  if (isAlias(node))
    throw refuse(file, `${where} is an alias (*${node.source}): edit it by hand, an edit here would change what the alias means`);
  if (node.anchor) throw refuse(file, `${where} carries the anchor &${node.anchor}, which other keys may reuse: edit it by hand`);
}

/**
 * Sets `path` (a chain of mapping keys) to `value`. Existing block values are replaced in block
 * style at their own indentation, flow values in flow style; a missing key is added at the end of
 * its mapping with the mapping's indentation. The result is checked: it parses, the path holds
 * `value`, and every other key reads as before.
 */
export function setKey(text: string, path: string[], value: unknown, file: string): KeyEdit {
  if (path.length === 0) throw new Error('setKey needs a path');
  const before = readYamlMapping(text, file);
  const doc = parseDocument(text);
  const eol = text.includes('\r\n') ? '\r\n' : '\n';
  let splice: Splice | undefined;

  const root = doc.contents;
  if (root === null || (isScalar(root) && (root.value === null || root.value === undefined))) {
    // Empty file or comments only: append the new key at the end, at column 0.
    const sep = text.length > 0 && !text.endsWith('\n') ? eol : '';
    splice = { start: text.length, end: text.length, insert: sep + renderPair(path[0]!, nested(path.slice(1), value), 0, eol) };
  } else {
    if (!isMap(root)) throw refuse(file, 'the top level must be a mapping (key: value)');
    let map: YAMLMap = root;
    for (let i = 0; i < path.length && !splice; i++) {
      const key = path[i]!;
      const where = path.slice(0, i + 1).join('.');
      if (map.flow) {
        // A flow mapping ({a: 1, b: 2}) on the way: rewritten as a whole, in flow style.
        checkEditable(map, file, path.slice(0, i).join('.') || 'the document');
        const plain = map.toJSON() as Record<string, unknown>;
        const updated = setPlain(plain, path.slice(i), value);
        const [s, e] = map.range!;
        splice = { start: s, end: e, insert: renderFlow(updated) };
        break;
      }
      const pair = map.items.find((p) => isScalar(p.key) && p.key.value === key);
      if (!pair) {
        const [, end] = map.range!;
        const first = map.items[0];
        const indent = first && isScalar(first.key) && first.key.range ? columnOf(text, first.key.range[0]) : 0;
        const sep = end > 0 && text[end - 1] !== '\n' ? eol : '';
        splice = { start: end, end, insert: sep + renderPair(key, nested(path.slice(i + 1), value), indent, eol) };
        break;
      }
      const node = pair.value as YamlNode | null;
      const last = i === path.length - 1;
      if (node && isMap(node) && !last) {
        checkEditable(node, file, where);
        map = node;
        continue;
      }
      const target = last ? value : nested(path.slice(i + 1), value);
      const keyCol = isScalar(pair.key) && pair.key.range ? columnOf(text, pair.key.range[0]) : 0;
      if (node === null || (isScalar(node) && (node.value === null || node.value === undefined) && node.range![0] === node.range![1])) {
        // `key:` with nothing after it: the value goes on the following lines.
        const at = node?.range ? node.range[0] : (pair.key as YamlNode).range![1] + 1;
        splice = isScalarValue(target)
          ? { start: at, end: at, insert: ` ${renderFlow(target)}` }
          : { start: at, end: at, insert: eol + ' '.repeat(keyCol + 2) + renderBlock(target, keyCol + 2, eol).replace(/\r?\n$/, '') };
        break;
      }
      checkEditable(node, file, where);
      const [s, valueEnd] = node.range!;
      if (isCollection(node) && !node.flow) {
        // A block collection: its range runs to the end of its last line (newline included).
        const col = columnOf(text, s);
        if (
          isScalarValue(target) ||
          (Array.isArray(target) && target.length === 0) ||
          (isMap(node) && !isMapValue(target)) ||
          (isSeq(node) && !Array.isArray(target))
        ) {
          // The value changes kind: put it on the key's line.
          const keyEnd = (pair.key as YamlNode).range![1];
          const inline = isScalarValue(target) || (Array.isArray(target) && target.length === 0) ? ` ${renderFlow(target)}${eol}` : null;
          splice = inline
            ? { start: text.indexOf(':', keyEnd) + 1, end: valueEnd, insert: inline }
            : { start: s, end: valueEnd, insert: renderBlock(target, col, eol) };
        } else {
          splice = (isSeq(node) && Array.isArray(target) && editScalarList(text, node, target, col, eol, valueEnd)) || undefined;
          if (!splice) {
            let insert = renderBlock(target, col, eol);
            if (text[valueEnd - 1] !== '\n') insert = insert.replace(/\r?\n$/, '');
            splice = { start: s, end: valueEnd, insert };
          }
        }
        break;
      }
      if (isCollection(node) || isScalarValue(target)) {
        // A flow collection keeps flow style; a scalar replaced by a scalar stays on its line.
        splice = { start: s, end: valueEnd, insert: renderFlow(target) };
        break;
      }
      // A scalar replaced by a collection: the block goes on the following lines.
      const keyEnd = (pair.key as YamlNode).range![1];
      const colon = text.indexOf(':', keyEnd) + 1;
      splice = {
        start: colon,
        end: valueEnd,
        insert: eol + ' '.repeat(keyCol + 2) + renderBlock(target, keyCol + 2, eol).replace(/\r?\n$/, ''),
      };
    }
  }
  if (!splice) throw new Error('unreachable: no splice');
  const out = text.slice(0, splice.start) + splice.insert + text.slice(splice.end);
  // The edit is checked, not trusted: the new file parses, holds the value, and nothing else moved.
  const after = readYamlMapping(out, file);
  const expected = setPlain(structuredClone(before), path, value);
  if (JSON.stringify(canonical(after)) !== JSON.stringify(canonical(expected)))
    throw refuse(file, `the layout around ${path.join('.')} could not be edited in place: edit it by hand`);
  return { text: out, splice };
}

/**
 * A block list of scalars set to another list of scalars (an `egress.allow` host added or
 * removed): the items that stay keep their own lines, trailing comments and the own-line comments
 * after them; only the lines of removed items go, and new items are written where they fall in the
 * new order. Null when the list holds anything but plain scalars (the caller rewrites it whole).
 */
function editScalarList(text: string, node: YAMLSeq, target: unknown[], col: number, eol: string, valueEnd: number): Splice | null {
  const items = node.items as YamlNode[];
  if (!target.every(isScalarValue)) return null;
  if (!items.every((item) => isScalar(item) && !item.anchor && item.range && isScalarValue(item.value))) return null;
  const lineStart = (offset: number): number => text.lastIndexOf('\n', offset - 1) + 1;
  const lineEnd = (offset: number): number => {
    const nl = text.indexOf('\n', offset);
    return nl < 0 || nl >= valueEnd ? valueEnd : nl + 1;
  };
  // Each item's segment: its own line (with its trailing comment) and the comment or blank lines
  // just above it, so that a comment moves, or goes, with the item it introduces.
  const ends = items.map((item) => {
    // The end of the item's last line: the yaml library's range can run past it, over the blank
    // lines that follow the list's last item.
    let end = item.range![1];
    while (end > item.range![0] && /\s/.test(text[end - 1]!)) end--;
    return lineEnd(end);
  });
  const segments = ends.map((end, i) => text.slice(i === 0 ? lineStart(items[0]!.range![0]) : ends[i - 1], end));
  const tail = text.slice(ends.at(-1), valueEnd);
  const values = items.map((item) => (item as Scalar).value);
  let out = '';
  let next = 0;
  for (const value of target) {
    const found = values.findIndex((v, i) => i >= next && v === value);
    if (found >= 0) {
      let segment = segments[found]!;
      if (!segment.endsWith('\n')) segment += eol;
      out += segment;
      next = found + 1;
    } else out += `${' '.repeat(col)}- ${renderFlow(value)}${eol}`;
  }
  out += tail;
  if (text[valueEnd - 1] !== '\n') out = out.replace(/\r?\n$/, '');
  return { start: lineStart(items[0]!.range![0]), end: valueEnd, insert: out };
}

function isMapValue(v: unknown): boolean {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function setPlain(obj: Record<string, unknown>, path: string[], value: unknown): Record<string, unknown> {
  let cur = obj;
  for (let i = 0; i < path.length - 1; i++) {
    const k = path[i]!;
    const next = cur[k];
    if (!isMapValue(next)) cur[k] = {};
    cur = cur[k] as Record<string, unknown>;
  }
  cur[path[path.length - 1]!] = value;
  return obj;
}

/** JSON with sorted keys (for comparisons and fingerprints). */
export function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (isMapValue(value))
    return Object.fromEntries(
      Object.keys(value as object)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  return value;
}

/** The value at `path` in plain data, or undefined. */
export function getPlain(obj: unknown, path: string[]): unknown {
  let cur = obj;
  for (const k of path) {
    if (!isMapValue(cur)) return undefined;
    cur = (cur as Record<string, unknown>)[k];
  }
  return cur;
}
