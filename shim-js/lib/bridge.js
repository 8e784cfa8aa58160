// DEALER side of the bridge. Symmetric RPC over [JSON header, optional payload] frames;
// the message shapes are declared once, in python/turn_memory/bridge/protocol.py.
import { Dealer } from 'zeromq';

const PROTOCOL = 1;

export class EngineUnavailableError extends Error {
  name = 'EngineUnavailableError';
}

export class EngineCallError extends Error {
  name = 'EngineCallError';
  constructor(info) {
    super(info?.message ?? 'engine call failed');
    this.code = info?.code ?? 'internal';
    this.manual = info?.manual;
    this.fix = info?.fix; // a refused handshake: how to fix it, in the engine's words
  }
}

export class Bridge {
  ready = false;
  #sock;
  #sendChain = Promise.resolve();
  #nextId = 1;
  #pending = new Map();
  #incoming = new Map();
  #hooks;
  #disposed = false;

  /**
   * @param hooks.onCall (method, params, payload, {signal, stream}) => Promise<{result, payload?}>
   * @param hooks.beforeSend () => void — flushes mirrored events so they precede every call/reply
   * @param hooks.onLost (reason) => void — the engine stopped answering the connection
   */
  constructor(hooks) {
    this.#hooks = hooks;
  }

  async open(endpoint, hello, timeoutMs) {
    if (this.#disposed) throw new EngineUnavailableError('turn-memory is shutting down');
    this.close('reconnecting');
    const sock = new Dealer({ linger: 0, sendHighWaterMark: 100000, receiveHighWaterMark: 100000 });
    this.#sock = sock;
    sock.connect(endpoint);
    this.#receive(sock);
    const welcome = await this.call('hello', { protocol: PROTOCOL, ...hello }, { timeoutMs, handshake: true });
    if (this.#sock === sock) this.ready = true;
    return welcome;
  }

  /** Close for good: DSH is unloading the plugin; nothing may reopen a socket after this. */
  dispose() {
    this.#disposed = true;
    this.close('stopped');
  }

  close(reason = 'closed') {
    this.ready = false;
    const sock = this.#sock;
    this.#sock = undefined;
    for (const { reject, timer } of this.#pending.values()) {
      clearTimeout(timer);
      reject(new EngineUnavailableError(`turn-memory engine ${reason}`));
    }
    this.#pending.clear();
    for (const controller of this.#incoming.values()) controller.abort(new EngineUnavailableError(reason));
    this.#incoming.clear();
    if (sock && !sock.closed) sock.close();
  }

  // zeromq v6 throws EBUSY when a send starts while another is pending: chain them.
  #send(header, payload) {
    const sock = this.#sock;
    if (!sock) return Promise.reject(new EngineUnavailableError('turn-memory engine is not connected'));
    const frames = payload === undefined ? [JSON.stringify(header)] : [JSON.stringify(header), payload];
    const sent = this.#sendChain.then(() => (sock.closed ? undefined : sock.send(frames)));
    this.#sendChain = sent.catch(() => {});
    return sent;
  }

  notify(method, params, payload) {
    if (!this.ready) return;
    this.#send({ v: PROTOCOL, kind: 'notify', method, params }, payload).catch(() => {});
  }

  /**
   * Call the engine. Every call has a timeout; an abort signal cancels it remotely. A long
   * call may set `liveness` ({everyMs, withinMs}): the engine is pinged while the call runs,
   * and the call fails at once if a ping goes unanswered — a hung engine must not hold a
   * step for the whole of a long timeout.
   */
  call(method, params, { payload, timeoutMs = 5000, signal, onStream, handshake = false, liveness } = {}) {
    if (!this.#sock || (!this.ready && !handshake)) {
      return Promise.reject(new EngineUnavailableError('turn-memory engine is unavailable'));
    }
    if (!handshake) this.#hooks.beforeSend();
    const id = `s${this.#nextId++}`;
    return new Promise((resolve, reject) => {
      const finish = () => {
        clearTimeout(entry.timer);
        clearInterval(probe);
        signal?.removeEventListener('abort', onAbort);
        this.#pending.delete(id);
      };
      const onAbort = () => {
        finish();
        this.#send({ v: PROTOCOL, kind: 'cancel', id }).catch(() => {});
        reject(signal.reason ?? new Error('aborted'));
      };
      const entry = {
        onStream,
        resolve: (value) => { finish(); resolve(value); },
        reject: (error) => { finish(); reject(error); },
        timer: setTimeout(() => {
          this.#send({ v: PROTOCOL, kind: 'cancel', id }).catch(() => {});
          entry.reject(new EngineUnavailableError(`turn-memory engine did not answer ${method} within ${timeoutMs} ms`));
          this.#hooks.onTimeout?.(method);
        }, timeoutMs),
      };
      this.#pending.set(id, entry);
      const probe = liveness && setInterval(() => {
        this.call('ping', {}, { timeoutMs: liveness.withinMs }).catch((error) => {
          if (!this.#pending.has(id)) return;
          this.#send({ v: PROTOCOL, kind: 'cancel', id }).catch(() => {});
          entry.reject(new EngineUnavailableError(`turn-memory engine stopped answering during ${method}: ${error.message}`));
        });
      }, liveness.everyMs);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#send({ v: PROTOCOL, kind: 'call', id, method, params }, payload).catch(entry.reject);
    });
  }

  async #receive(sock) {
    try {
      for await (const [header, payload] of sock) {
        let msg;
        try {
          msg = JSON.parse(header.toString());
        } catch {
          // a frame that does not parse may have been any call's reply: none of the calls
          // waiting can trust the stream any more; the connection is lost
          if (this.#sock === sock) this.#hooks.onLost?.('unparsable frame from the engine');
          return;
        }
        if (msg.kind === 'reply') {
          const pending = this.#pending.get(msg.id);
          if (!pending) continue;
          if (msg.error) pending.reject(new EngineCallError(msg.error));
          else pending.resolve({ result: msg.result, payload });
        } else if (msg.kind === 'stream') {
          this.#pending.get(msg.id)?.onStream?.(msg.params);
        } else if (msg.kind === 'cancel') {
          this.#incoming.get(msg.id)?.abort(new Error('cancelled by the engine'));
        } else if (msg.kind === 'call') {
          this.#serve(msg, payload);
        }
      }
    } catch (error) {
      if (this.#sock === sock) this.#hooks.onLost?.(String(error?.message ?? error));
    }
  }

  async #serve(msg, payload) {
    const controller = new AbortController();
    this.#incoming.set(msg.id, controller);
    const stream = (params) => this.#send({ v: PROTOCOL, kind: 'stream', id: msg.id, params }).catch(() => {});
    let reply;
    let out;
    try {
      const answer = await this.#hooks.onCall(msg.method, msg.params, payload, { signal: controller.signal, stream });
      reply = { v: PROTOCOL, kind: 'reply', id: msg.id, result: answer?.result ?? null };
      out = answer?.payload;
    } catch (error) {
      reply = {
        v: PROTOCOL, kind: 'reply', id: msg.id,
        error: { code: error?.code && typeof error.code === 'string' ? error.code : 'shim-error', message: String(error?.message ?? error) },
      };
    } finally {
      this.#incoming.delete(msg.id);
    }
    // Events the call appended are queued in the mirror; they must reach the engine first.
    this.#hooks.beforeSend();
    this.#send(reply, out).catch(() => {});
  }
}
