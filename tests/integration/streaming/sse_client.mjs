// sse_client.mjs: a small Server-Sent Events client for the streaming tests, on node:http so that
// each stream is its own connection (as EventSource makes it) and can be cut at any moment. Every
// event and comment is kept with the time it arrived.
import http from 'node:http';

// Opens GET path on gw; resolves once the response headers are in. The result:
//   status, headers, text (the body of a non-200), events [{id, event, data, json, at}],
//   comments [{text, at}], retry, ended (a promise: the server ended the stream), close().
export function openStream(gw, path, { token, lastEventId, headers = {}, agent } = {}) {
  const h = { Accept: 'text/event-stream', ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (lastEventId !== undefined) h['Last-Event-ID'] = String(lastEventId);
  return new Promise((resolve, reject) => {
    const rq = http.request(`${gw.url}${path}`, { method: 'GET', headers: h, agent: agent ?? false });
    rq.on('error', reject);
    rq.on('response', (res) => {
      const s = {
        status: res.statusCode,
        headers: res.headers,
        text: '',
        events: [],
        comments: [],
        retry: null,
        waiters: [],
        close() { rq.destroy(); },
        // Resolves with the events once pred(events) is true (checked on every new event).
        until(pred, timeoutMs = 15000, what = 'events') {
          if (pred(s.events)) return Promise.resolve(s.events);
          return new Promise((ok, fail) => {
            const t = setTimeout(() => fail(new Error(`timed out waiting for ${what}; got ${JSON.stringify(s.events.map((e) => [e.id, e.event]))}`)), timeoutMs);
            s.waiters.push({ pred, ok: (v) => { clearTimeout(t); ok(v); } });
          });
        },
      };
      let buf = '';
      s.ended = new Promise((ok) => {
        res.on('end', () => ok(true));
        res.on('error', () => ok(false));
        res.on('close', () => ok(false));
      });
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (s.status !== 200) { s.text += d; return; }
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = { id: null, event: 'message', data: null, at: Date.now() };
          let isEvent = false;
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) { s.comments.push({ text: line.slice(1).trim(), at: Date.now() }); continue; }
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            const value = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
            if (field === 'retry') s.retry = Number(value);
            else if (field === 'id') { ev.id = value; }
            else if (field === 'event') { ev.event = value; }
            else if (field === 'data') { ev.data = ev.data === null ? value : `${ev.data}\n${value}`; isEvent = true; }
          }
          if (!isEvent) continue;
          try { ev.json = JSON.parse(ev.data); } catch { ev.json = undefined; }
          s.events.push(ev);
          s.waiters = s.waiters.filter((w) => (w.pred(s.events) ? (w.ok(s.events), false) : true));
        }
      });
      resolve(s);
    });
    rq.end();
  });
}
