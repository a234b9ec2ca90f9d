// Node's `ws` through rebound as an HTTP proxy, over `http-proxy-agent`: the request goes out
// in absolute form (GET http://host/path) to the proxy, as every HTTP_PROXY client sends it.
// Both modules are Debian's (node-ws; node-https-proxy-agent ships http-proxy-agent), found
// through NODE_PATH=/usr/share/nodejs. Echoes a text, a binary and a 1 MiB message, then closes;
// prints what happened as JSON. Usage: node ws_client.js PROXY_URL TARGET_URL
'use strict';
const crypto = require('crypto');
const WebSocket = require('ws');
const {HttpProxyAgent} = require('http-proxy-agent');

const [proxy, target] = process.argv.slice(2);
const out = {};
let printed = false;
function done() {
  if (printed) return;
  printed = true;
  console.log(JSON.stringify(out));
  process.exit(0);
}
setTimeout(() => {
  out.error = 'timeout';
  done();
}, 20000);

const big = crypto.randomBytes(1 << 20);
const ws = new WebSocket(target, {agent: new HttpProxyAgent(proxy), maxPayload: 4 << 20});
let step = 0;
ws.on('upgrade', (res) => {
  out.status = res.statusCode;
  out.attempts = res.headers['rebound-attempts'];
});
ws.on('unexpected-response', (req, res) => {
  out.status = res.statusCode;
  out.error_type = res.headers['rebound-error'];
  done();
});
ws.on('open', () => ws.send('hello'));
ws.on('message', (data, isBinary) => {
  if (step === 0) {
    out.text = data.toString();
    ws.send(Buffer.from([0, 1, 2, 255]));
  } else if (step === 1) {
    out.binary = data.toString('hex');
    out.binary_frame = isBinary;
    ws.send(big);
  } else if (step === 2) {
    out.big_ok = Buffer.compare(data, big) === 0;
    out.big_len = data.length;
    ws.close(1000);
  }
  step++;
});
ws.on('close', (code) => {
  out.close_code = code;
  done();
});
ws.on('error', (e) => {
  out.error = String(e);
  done();
});
