import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../web/src/api.js';
import { copyMode, fieldOf, formParameters, inputKind, planCommand, shellQuote } from '../web/src/cockpitForm.js';

// The cockpit's logic that is not drawing: how a parameter is typed in, what the form sends, where
// the server's refusal is shown, and when the page offers a command to copy instead of applying.
describe('the cockpit form', () => {
  const params = [
    { name: 'entry', type: 'string', required: true, description: 'a host' },
    { name: 'simulators', type: 'JSON list', required: false, description: 'a list' },
    { name: 'enabled', type: 'true|false', required: false, description: 'on or off' },
  ];

  it('types a parameter in by its declared type', () => {
    assert.deepEqual(inputKind('true|false'), { kind: 'select', options: ['true', 'false'] });
    assert.deepEqual(inputKind('redis'), { kind: 'select', options: ['redis'] });
    assert.deepEqual(inputKind('JSON list'), { kind: 'json' });
    assert.deepEqual(inputKind('string'), { kind: 'text' });
  });

  it('sends what was typed, refuses an empty required value and JSON that does not parse before anything is sent', () => {
    assert.deepEqual(formParameters(params, { entry: 'api.example.com', simulators: '[{"name":"pg"}]', enabled: '' }), {
      parameters: { entry: 'api.example.com', simulators: [{ name: 'pg' }] },
      errors: {},
    });
    const bad = formParameters(params, { entry: '  ', simulators: '[{' });
    assert.equal(bad.errors.entry, 'entry is required');
    assert.match(bad.errors.simulators!, /^simulators: not valid JSON/);
  });

  it("puts the schema's refusal at the field the server names, and nothing else", () => {
    const refusal = new ApiError(400, 'INVALID_ARGUMENT', 'egress.allow: parameter entry: an egress entry is …', {
      field: 'parameters.entry',
    });
    assert.equal(fieldOf(refusal, params), 'entry');
    assert.equal(fieldOf(new ApiError(400, 'INVALID_ARGUMENT', 'x', { field: 'parameters.simulators.0.name' }), params), 'simulators');
    assert.equal(fieldOf(new ApiError(400, 'INVALID_ARGUMENT', 'x', { field: 'parameters.other' }), params), undefined);
    assert.equal(fieldOf(new ApiError(409, 'PRECONDITION_FAILED', 'x', { field: 'parameters.entry' }), params), undefined);
    assert.equal(fieldOf(new Error('x'), params), undefined);
  });

  it('shows class C, and every action while the write guard is off, as a command to copy', () => {
    assert.equal(copyMode('C', 'apply'), true);
    assert.equal(copyMode('A', 'copy-command'), true);
    assert.equal(copyMode('B', 'copy-command'), true);
    assert.equal(copyMode('A', 'apply'), false);
  });

  it('quotes the plan command for a POSIX shell', () => {
    assert.equal(shellQuote("it's"), `'it'\\''s'`);
    assert.equal(
      planCommand('simulators.compose', 'shop', { simulators: [{ name: 'pg' }], entry: 'a b' }),
      `atelier actions plan simulators.compose --project shop --param 'simulators=[{"name":"pg"}]' --param 'entry=a b'`,
    );
  });
});
