// The row config as the shim takes it: `TurnMemoryEngine.Config` (the Standard Schema cordis runs
// before constructing the plugin) fills in the `engine` defaults (lib/defaults.js;
// tests/unit/test_config.py keeps them equal to the Python model) and refuses nothing: the
// engine validates every key in its handshake (tests/unit/test_config.py holds each refusal,
// with the key and message). `engineSettings` is what the shim runs with meanwhile: a value it
// cannot start the engine with takes its default, so the engine still starts and names it.
// index.js imports the real DSH packages, so this file needs them resolvable (see
// resolve-node-path.mjs).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { ENGINE_DEFAULTS } from '../lib/defaults.js';
import TurnMemoryEngine, { name } from '../lib/index.js';
import { engineSettings } from '../lib/settings.js';

const { Config } = TurnMemoryEngine;
const validate = (value) => Config['~standard'].validate(value);

/** Values the engine refuses for each engine key (test_config.py: the same table, with messages). */
const BAD = {
  command: [[], 'turn-memory serve', ['turn-memory', 1], {}, null],
  transport: ['udp', '', 1, 'IPC', null],
  logFile: [5, ['a'], false],
  startTimeoutMs: [-1, Number.NaN, Number.POSITIVE_INFINITY, '100', null],
  hookTimeoutMs: [-0.5, '2000', true],
  manualTimeoutMs: [-1, Number.NaN],
  restartDelayMs: [-20, '500'],
  recycleAfterTimeouts: [-1, Number.NEGATIVE_INFINITY, '3'],
  livenessMs: [-1, '5000', null],
};

describe('row config', () => {
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
      hookTimeoutMs: 1500,
      manualTimeoutMs: 1,
      restartDelayMs: 100,
      recycleAfterTimeouts: 5,
      livenessMs: 1000,
    };
    assert.deepEqual(validate({ engine }), { value: { engine } });
    assert.deepEqual(engineSettings({ engine }), { settings: engine, unusable: [] });
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

  test('a bad engine value is never refused here: it reaches the engine as given', () => {
    for (const [key, values] of Object.entries(BAD)) {
      for (const v of values) {
        const result = validate({ engine: { [key]: v }, turns: { enabled: true } });
        assert.equal(result.issues, undefined, `${key}=${JSON.stringify(v)} refused`);
        assert.equal(result.value.engine[key], v, `${key}=${JSON.stringify(v)} changed`);
      }
    }
    for (const value of [[], 'turn-memory', 3, true]) assert.deepEqual(validate(value), { value });
    for (const engine of [[], 'serve', 3]) assert.deepEqual(validate({ engine }), { value: { engine } });
  });

  test('the shim runs with the default of each value it cannot start the engine with, and says which', () => {
    // a string transport runs as given: anything but 'ipc' and 'tcp' acts as 'auto'
    const runsAsGiven = { transport: ['udp', '', 'IPC'] };
    for (const [key, values] of Object.entries(BAD)) {
      for (const v of values) {
        const expected = runsAsGiven[key]?.includes(v)
          ? { settings: { ...ENGINE_DEFAULTS, [key]: v }, unusable: [] }
          : { settings: { ...ENGINE_DEFAULTS }, unusable: [`engine.${key}`] };
        assert.deepEqual(engineSettings({ engine: { [key]: v } }), expected, `${key}=${JSON.stringify(v)}`);
      }
    }
    assert.deepEqual(engineSettings({ engine: { command: [], logFile: 1, hookTimeoutMs: 'x', transport: 'tcp' } }), {
      settings: { ...ENGINE_DEFAULTS, transport: 'tcp' }, unusable: ['engine.command', 'engine.hookTimeoutMs', 'engine.logFile'],
    });
    for (const logFile of ['', null]) {
      assert.deepEqual(engineSettings({ engine: { logFile } }), { settings: { ...ENGINE_DEFAULTS }, unusable: [] });
    }
    for (const config of [3, 'x', [], undefined, null]) {
      assert.deepEqual(engineSettings(config), { settings: { ...ENGINE_DEFAULTS }, unusable: [] }, JSON.stringify(config));
    }
    assert.deepEqual(engineSettings({ engine: 'serve' }), { settings: { ...ENGINE_DEFAULTS }, unusable: ['engine'] });
  });

  test('the defaults are frozen and the shim runs with them as they are', () => {
    assert.ok(Object.isFrozen(ENGINE_DEFAULTS));
    assert.ok(Object.isFrozen(ENGINE_DEFAULTS.command));
    assert.deepEqual(validate({ engine: ENGINE_DEFAULTS }), { value: { engine: { ...ENGINE_DEFAULTS } } });
    assert.deepEqual(engineSettings({ engine: ENGINE_DEFAULTS }), { settings: { ...ENGINE_DEFAULTS }, unusable: [] });
    assert.deepEqual(Object.keys(ENGINE_DEFAULTS).sort(), [
      'command', 'hookTimeoutMs', 'livenessMs', 'manualTimeoutMs', 'recycleAfterTimeouts', 'restartDelayMs', 'startTimeoutMs',
      'transport',
    ]);
  });
});
