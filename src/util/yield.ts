/**
 * Let the event loop run (I/O, messages, an abort) before continuing: setImmediate in Node; a MessageChannel hop in
 * browsers (no 4 ms timer clamp).
 */
export function yieldToEventLoop(): Promise<void> {
  const si = (globalThis as { setImmediate?: (f: () => void) => void }).setImmediate;
  if (si !== undefined) return new Promise((res) => si(res));
  return new Promise((res) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => {
      ch.port1.close();
      res();
    };
    ch.port2.postMessage(null);
  });
}
