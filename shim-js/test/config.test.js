// The row config as the shim validates it (`TurnMemoryEngine.Config`, a Standard Schema that
// cordis runs before constructing the plugin) and the `engine` defaults it fills in
// (lib/defaults.js; tests/unit/test_config.py keeps those equal to the Python model).
// index.js imports the real DSH packages, so this file needs them resolvable (see
// resolve-node-path.mjs).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { ENGINE_DEFAULTS } from '../lib/defaults.js';
import TurnMemoryEngine, { name } from '../lib/index.js';

const { Config } = TurnMemoryEngine;
const validate = (value) => Config['~standard'].validate(value);

describe('config validation', () => {
  test('the plugin exposes a Standard Schema v1 as its static Config', () => {
    assert.equal(name, 'dsh-turn-memory');
    assert.equal(Config['~standard'].version, 1);
    assert.equal(Config['~standard'].vendor, 'turn-memory');
    assert.equal(typeof Config['~standard'].validate, 'function');
  });

  test('no config, or an empty one: every engine default is filled in', () => {
    for (const value of [undefined, null, {}, { engine: {} }]) {
      const result = validate(value);
      assert.equal(result.issues, undefined, JSON.stringify(value));
      assert.deepEqual(result.value, { engine: { ...ENGINE_DEFAULTS } });
    }
  });

  test('a valid config passes: its engine values override the defaults, the rest is filled in', () => {
    const engine = {
      command: ['/opt/tm/bin/turn-memory', 'serve', '--verbose'],
      transport: 'tcp',
      logFile: '/tmp/tm.log',
      startTimeoutMs: 0,
      hookTimeoutMs: 1500.5,
      manualTimeoutMs: 1,
      restartDelayMs: 100,
      recycleAfterTimeouts: 5,
    };
    assert.deepEqual(validate({ engine }), { value: { engine } });
    for (const transport of ['auto', 'ipc', 'tcp']) {
      assert.equal(validate({ engine: { transport } }).value.engine.transport, transport);
    }
    const partial = validate({ engine: { hookTimeoutMs: 900 } }).value.engine;
    assert.deepEqual(partial, { ...ENGINE_DEFAULTS, hookTimeoutMs: 900 });
  });

  test('keys outside engine (and unknown engine keys) pass through untouched: the engine validates them', () => {
    const config = {
      turns: { enabled: true, landingBarrier: true },
      hints: { minThoughtChars: 4000 },
      tpyo: 'the engine refuses this in its handshake',
      engine: { transport: 'ipc', someFutureKey: 3 },
    };
    const { value, issues } = validate(config);
    assert.equal(issues, undefined);
    assert.deepEqual(value, { ...config, engine: { ...ENGINE_DEFAULTS, transport: 'ipc', someFutureKey: 3 } });
    assert.equal(value.turns, config.turns, 'policy sections are passed on as given');
    assert.deepEqual(config.engine, { transport: 'ipc', someFutureKey: 3 }, 'the input is not modified');
  });

  test('each bad engine value is reported with its path', () => {
    const bad = {
      command: [[], 'turn-memory serve', ['turn-memory', 1], {}, null],
      transport: ['udp', '', 1, 'IPC', null],
      logFile: [5, ['a'], false, null],
      startTimeoutMs: [-1, Number.NaN, Number.POSITIVE_INFINITY, '100', null],
      hookTimeoutMs: [-0.5, '2000', true],
      manualTimeoutMs: [-1, Number.NaN],
      restartDelayMs: [-20, '500'],
      recycleAfterTimeouts: [-1, Number.NEGATIVE_INFINITY, '3'],
    };
    for (const [key, values] of Object.entries(bad)) {
      for (const v of values) {
        const result = validate({ engine: { [key]: v }, turns: { enabled: true } });
        assert.equal(result.value, undefined, `${key}=${JSON.stringify(v)} passed`);
        assert.equal(result.issues?.length, 1, `${key}=${JSON.stringify(v)}`);
        assert.deepEqual(result.issues[0].path, ['engine', key]);
        assert.match(result.issues[0].message, new RegExp(`^engine\\.${key} must be `));
      }
    }
  });

  test('every bad engine value is reported at once', () => {
    const { issues } = validate({ engine: { command: [], transport: 'udp', logFile: 1, hookTimeoutMs: -1, restartDelayMs: 'x' } });
    assert.deepEqual(issues.map((i) => i.path.join('.')), [
      'engine.command', 'engine.transport', 'engine.logFile', 'engine.hookTimeoutMs', 'engine.restartDelayMs',
    ]);
  });

  test('a config or engine section that is not an object is refused', () => {
    for (const value of [[], 'turn-memory', 3, true]) {
      const { issues } = validate(value);
      assert.deepEqual(issues, [{ message: 'config must be an object' }], JSON.stringify(value));
    }
    for (const engine of [[], 'serve', 3]) {
      const { issues } = validate({ engine });
      assert.deepEqual(issues, [{ message: 'engine must be an object', path: ['engine'] }], JSON.stringify(engine));
    }
  });

  test('the defaults are frozen and pass the shim\'s own validation', () => {
    assert.ok(Object.isFrozen(ENGINE_DEFAULTS));
    assert.ok(Object.isFrozen(ENGINE_DEFAULTS.command));
    assert.deepEqual(validate({ engine: ENGINE_DEFAULTS }), { value: { engine: { ...ENGINE_DEFAULTS } } });
    assert.deepEqual(Object.keys(ENGINE_DEFAULTS).sort(), [
      'command', 'hookTimeoutMs', 'manualTimeoutMs', 'recycleAfterTimeouts', 'restartDelayMs', 'startTimeoutMs', 'transport',
    ]);
  });
});
