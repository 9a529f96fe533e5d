// callback_client.mjs: times n sequential GETs on one keep-alive connection and prints their
// latencies (ms) as a JSON array: the callback API's metadata read from inside a Sandbox
// (run there with nsenter, HTTPS with the installation CA), and the same read through the
// gateway's REST API from the host (plain HTTP), for the callbacks scenario of bench.mjs.
//
//   node callback_client.mjs <url> <bearer token> <n> [CA file]
import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';

const [url, token, nArg, caFile] = process.argv.slice(2);
const n = Number(nArg);
const u = new URL(url);
const lib = u.protocol === 'https:' ? https : http;
const agent = new lib.Agent({ keepAlive: true, maxSockets: 1, ...(caFile ? { ca: readFileSync(caFile) } : {}) });

function get() {
  return new Promise((resolve, reject) => {
    const req = lib.request(u, { agent, headers: { Authorization: `Bearer ${token}` } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

await get(); // the handshake and the connection, not timed
const lat = [];
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  await get();
  lat.push(performance.now() - t0);
}
agent.destroy();
process.stdout.write(JSON.stringify(lat) + '\n');
