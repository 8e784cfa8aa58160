// The declarations cache (lib/public-tools.js): written whole or not at all, and a write the
// OS refuses (Windows: another process holds the file without share-delete) leaves nothing
// behind and throws nothing into DSH.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { writeJson } from '../lib/public-tools.js';

describe('declarations cache', () => {
  test('is written whole, and not rewritten when it already says the same', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-declared-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'turn-memory', 'declared.json');
    writeJson(file, { publicTools: [{ name: 'read_session_history' }] });
    assert.equal(readFileSync(file, 'utf8'), '{"publicTools":[{"name":"read_session_history"}]}');
    writeJson(file, { publicTools: [{ name: 'read_session_history' }] });
    assert.deepEqual(readdirSync(join(dir, 'turn-memory')), ['declared.json']);
  });

  test('a replace the OS refuses leaves no temporary file and throws nothing', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-declared-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'declared.json');
    mkdirSync(file); // a rename over a directory fails on every OS
    writeJson(file, { publicTools: [] });
    assert.deepEqual(readdirSync(dir), ['declared.json']);
  });
});
