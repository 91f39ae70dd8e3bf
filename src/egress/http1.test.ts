import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BodyFramer, fieldList, forwarded, HttpFramingError, parseRequestHead, parseResponseHead, reasonPhrase } from './http1.js';

const req = (text: string, max = 8192) => parseRequestHead(Buffer.from(text, 'latin1'), max);

function refused(text: string, status: number, why: RegExp): void {
  assert.throws(
    () => req(text),
    (err: unknown) => err instanceof HttpFramingError && err.status === status && why.test(err.message),
    JSON.stringify(text),
  );
}

/** Run a body through a framer in pieces of `step` bytes; returns what it wrote and what was left over. */
function frame(f: BodyFramer, input: string, step = 1000): { out: string; rest: string } {
  const buf = Buffer.from(input, 'latin1');
  const out: Buffer[] = [];
  let i = 0;
  while (i < buf.length && !f.done) {
    const piece = buf.subarray(i, Math.min(buf.length, i + step));
    const used = f.push(piece, 0, out);
    i += used;
    if (used < piece.length) break;
  }
  return { out: Buffer.concat(out).toString('latin1'), rest: buf.subarray(i).toString('latin1') };
}

describe('parseRequestHead', () => {
  it('parses an absolute-form request head and says where it ends', () => {
    const text = 'GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, X-Hop\r\nContent-Length: 3\r\n\r\nabcGET';
    const h = req(text)!;
    assert.deepEqual([h.method, h.target, h.minor, h.contentLength, h.chunked], ['GET', 'http://a.test/x', 1, 3, false]);
    assert.deepEqual([...h.connection], ['keep-alive', 'x-hop']);
    assert.equal(text.slice(h.end), 'abcGET');
    assert.equal(req('GET http://a.test/ HTTP/1.1\r\nHost: a'), undefined, 'incomplete');
    assert.equal(req('\r\nGET http://a.test/ HTTP/1.0\r\n\r\n')!.minor, 0, 'a leading empty line is ignored');
  });

  it('keeps every field where it was sent, and says which go on to the next hop', () => {
    const text =
      'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-A:  1 \t\r\nConnection: Keep-Alive, X-Hop\r\nX-Hop: 2\r\n' +
      'Keep-Alive: timeout=5\r\nProxy-Authorization: Basic x\r\nTE: trailers\r\nContent-Length: 0\r\nx-b:\r\n\r\n';
    const h = req(text)!;
    assert.deepEqual(fieldList(h), [
      'Host',
      'a.test',
      'X-A',
      '1',
      'Connection',
      'Keep-Alive, X-Hop',
      'X-Hop',
      '2',
      'Keep-Alive',
      'timeout=5',
      'Proxy-Authorization',
      'Basic x',
      'TE',
      'trailers',
      'Content-Length',
      '0',
      'x-b',
      '',
    ]);
    const kept: string[] = [];
    for (let i = 0; i < h.spans.length; i += 5) if (forwarded(h, i)) kept.push(h.raw.toString('latin1', h.spans[i], h.spans[i + 1]));
    assert.deepEqual(kept, ['X-A', 'x-b'], 'hop-by-hop, Connection-named, Host and framing fields stay behind');
    const plain = req('GET http://a.test/ HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: AAA\r\nExpect: 100-Continue\r\n\r\n')!;
    assert.deepEqual([plain.upgrade, plain.http2Settings, plain.expect, plain.connection.size], ['h2c', true, '100-continue', 0]);
  });

  it('reads Connection tokens from every Connection field', () => {
    const two = req('GET http://a.test/ HTTP/1.1\r\nConnection: Keep-Alive\r\nConnection: X-Hop, close\r\n\r\n')!;
    assert.deepEqual([...two.connection].sort(), ['close', 'keep-alive', 'x-hop']);
    assert.equal(two.connectionNamesFields, true);
    const one = req('GET http://a.test/ HTTP/1.1\r\nConnection: keep-alive\r\n\r\n')!;
    assert.deepEqual([[...one.connection], one.connectionNamesFields], [['keep-alive'], false], 'the first head left it as it was');
  });

  it('refuses every ambiguous framing (request smuggling)', () => {
    refused('POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n', 400, /both/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n', 400, /both/);
    refused('POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n', 400, /more than one/);
    refused('POST http://a/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n', 400, /not a number/);
    refused('POST http://a/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n', 400, /not a number/);
    refused('POST http://a/ HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n', 400, /not a number/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n', 501, /only Transfer-Encoding: chunked/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n', 501, /chunked/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n', 501, /chunked/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n', 501, /chunked/);
    refused('POST http://a/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n', 400, /HTTP\/1\.0/);
    refused('POST http://a/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n', 400, /invalid header name/);
  });

  it('refuses bare LF and CR, obs-fold, control characters, and malformed request lines', () => {
    refused('GET http://a/ HTTP/1.1\nHost: a\n\n', 400, /bare LF/);
    refused('GET http://a/ HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n', 400, /bare LF/);
    refused('GET http://a/ HTTP/1.1\r\nX: a\rInjected: b\r\n\r\n', 400, /bare LF or CR/);
    refused('GET http://a/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n', 400, /obs-fold/);
    refused('GET http://a/ HTTP/1.1\r\nX: a\u0000b\r\n\r\n', 400, /control characters/);
    refused('GET http://a/ HTTP/1.1\r\n: a\r\n\r\n', 400, /without a name/);
    refused('GET  http://a/ HTTP/1.1\r\n\r\n', 400, /request line/);
    refused('GET http://a/\t HTTP/1.1\r\n\r\n', 400, /request line/);
    refused('GET http://\u00e0.test/ HTTP/1.1\r\n\r\n', 400, /request line/);
    refused('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 400, /request line/);
    refused('GET http://a/ HTTP/1.1\r\nHost: a\n', 400, /bare LF/);
  });

  it('bounds the head and the number of fields', () => {
    assert.throws(
      () => req(`GET http://a/ HTTP/1.1\r\nX: ${'a'.repeat(9000)}`),
      (e: unknown) => e instanceof HttpFramingError && e.status === 431,
    );
    assert.throws(
      () => req(`GET http://a/ HTTP/1.1\r\nX: ${'a'.repeat(9000)}\r\n\r\n`),
      (e: unknown) => e instanceof HttpFramingError && e.status === 431,
    );
    const many = Array.from({ length: 300 }, (_, i) => `X${i}: 1\r\n`).join('');
    assert.throws(
      () => req(`GET http://a/ HTTP/1.1\r\n${many}\r\n`),
      (e: unknown) => e instanceof HttpFramingError && e.status === 431,
    );
  });
});

describe('parseResponseHead', () => {
  it('reads the status and the framing; Transfer-Encoding overrides Content-Length', () => {
    const r = parseResponseHead(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc'), 8192)!;
    assert.deepEqual([r.status, reasonPhrase(r), r.contentLength, r.chunked, r.end], [200, 'OK', 3, false, 38]);
    const c = parseResponseHead(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n'), 8192)!;
    assert.deepEqual([c.contentLength, c.chunked], [undefined, true]);
    const g = parseResponseHead(Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n'), 8192)!;
    assert.deepEqual([g.chunked, g.otherCoding], [false, true]);
    assert.equal(reasonPhrase(parseResponseHead(Buffer.from('HTTP/1.1 204\r\n\r\n'), 8192)!), '');
    for (const bad of [
      'HTTP/1.1 200 OK\nX: 1\r\n\r\n',
      'HTTP/2 200\r\n\r\n',
      'ICY 200 OK\r\n\r\n',
      'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n',
    ])
      assert.throws(
        () => parseResponseHead(Buffer.from(bad), 8192),
        (e: unknown) => e instanceof HttpFramingError && e.status === 502,
        bad,
      );
  });
});

describe('BodyFramer', () => {
  it('counts a Content-Length body and leaves the next message alone', () => {
    assert.deepEqual(frame(new BodyFramer('length', 5, true, 400, 0), 'helloGET /', 3), { out: 'hello', rest: 'GET /' });
  });

  it('checks chunked bodies and writes them out canonically, byte by byte or at once', () => {
    const body = '5;name=value\r\nhello\r\n006\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT';
    for (const step of [1, 3, 1000]) {
      assert.deepEqual(frame(new BodyFramer('chunked', 0, true, 400, 1024), body, step), {
        out: '5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n',
        rest: 'NEXT',
      });
      assert.deepEqual(frame(new BodyFramer('chunked', 0, false, 400, 1024), body, step).out, 'hello world', 'decoded for HTTP/1.0');
    }
  });

  it('refuses bad chunk sizes and chunks longer than announced', () => {
    for (const bad of [
      '-1\r\n',
      '0x5\r\nhello\r\n',
      ' 5\r\nhello\r\n',
      '5 5\r\n',
      'fffffffffffffffff\r\n',
      '5\nhello\r\n',
      '5\r\nhelloXX\r\n0\r\n\r\n',
      '\r\n',
      'g\r\n',
    ]) {
      assert.throws(
        () => frame(new BodyFramer('chunked', 0, true, 400, 1024), bad),
        (e: unknown) => e instanceof HttpFramingError && e.status === 400,
        JSON.stringify(bad),
      );
    }
    assert.throws(
      () => frame(new BodyFramer('chunked', 0, true, 400, 1024), `${'0'.repeat(5000)}1\r\n`),
      (e: unknown) => e instanceof HttpFramingError,
      'an endless chunk-size line',
    );
    assert.throws(
      () => frame(new BodyFramer('chunked', 0, true, 400, 64), `0\r\n${'X: 1\r\n'.repeat(20)}\r\n`),
      (e: unknown) => e instanceof HttpFramingError,
      'trailers beyond the limit',
    );
  });
});
