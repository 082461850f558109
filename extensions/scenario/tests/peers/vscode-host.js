#!/usr/bin/env node
// A host written with a stock third-party JSON-RPC library, vscode-jsonrpc,
// driving a real extension process over its stdin and stdout. Run by
// tests/vscode_peer.rs as `node vscode-host.js EXTENSION_EXECUTABLE`.
//
// vscode-jsonrpc frames messages with Content-Length headers; the Open Conduit
// protocol is one JSON object per line, so the reader and writer below do
// newline-delimited JSON. Everything else (ids, matching answers, cancellation
// with `$/cancelRequest`) is the library's own.
//
// Prints one line per check passed ("ok: ...") and exits 0; on a failure it
// prints "FAILED: ..." to stderr and exits 1.
'use strict';

const { spawn } = require('node:child_process');
const {
  AbstractMessageReader,
  AbstractMessageWriter,
  CancellationTokenSource,
  ResponseError,
  createMessageConnection,
} = require('vscode-jsonrpc/node');

class LineReader extends AbstractMessageReader {
  constructor(readable) {
    super();
    this.readable = readable;
    this.buffer = '';
  }

  listen(callback) {
    const onData = (chunk) => {
      this.buffer += chunk.toString('utf8');
      let nl;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        if (line.trim() === '') continue;
        try {
          callback(JSON.parse(line));
        } catch (e) {
          this.fireError(e);
        }
      }
    };
    this.readable.on('data', onData);
    this.readable.on('error', (e) => this.fireError(e));
    this.readable.on('close', () => this.fireClose());
    return { dispose: () => this.readable.off('data', onData) };
  }
}

class LineWriter extends AbstractMessageWriter {
  constructor(writable) {
    super();
    this.writable = writable;
    this.writable.on('error', (e) => this.fireError(e));
    this.writable.on('close', () => this.fireClose());
  }

  write(msg) {
    return new Promise((resolve, reject) => {
      this.writable.write(JSON.stringify(msg) + '\n', 'utf8', (e) => (e ? reject(e) : resolve()));
    });
  }

  end() {
    this.writable.end();
  }
}

function check(cond, what) {
  if (!cond) throw new Error(what);
}

async function main() {
  const exe = process.argv[2];
  check(exe, 'usage: vscode-host.js EXTENSION_EXECUTABLE');
  const child = spawn(exe, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const conn = createMessageConnection(new LineReader(child.stdout), new LineWriter(child.stdin));

  const cancelSeen = new Promise((resolve) => {
    conn.onNotification('scenario.cancel_seen', (tag) => resolve(tag));
  });
  conn.listen();

  const init = await conn.sendRequest('initialize', {
    protocol_versions: [1],
    host: { name: 'vscode-jsonrpc peer', version: '0' },
  });
  check(init.protocol_version === 1, `initialize answered protocol_version ${JSON.stringify(init.protocol_version)}`);
  check(init.manifest && init.manifest.name === 'scenario', `initialize answered manifest ${JSON.stringify(init.manifest)}`);
  console.log(`ok: initialize protocol_version=${init.protocol_version} manifest=${init.manifest.name}`);

  const echoed = await conn.sendRequest('scenario.echo', { hello: 'vscode-jsonrpc' });
  check(echoed && echoed.hello === 'vscode-jsonrpc', `scenario.echo answered ${JSON.stringify(echoed)}`);
  console.log(`ok: scenario.echo answered ${JSON.stringify(echoed)}`);

  // A call that only ends when cancelled. vscode-jsonrpc sends
  // `$/cancelRequest` and keeps waiting for the answer, so this hangs unless the
  // extension honours that name.
  const source = new CancellationTokenSource();
  const slow = conn.sendRequest('scenario.wait_cancel', { tag: 'vscode' }, source.token);
  // In flight once a call sent after it has been answered.
  await conn.sendRequest('scenario.echo', { after: 'wait_cancel' });
  source.cancel();
  let cancelled;
  try {
    const v = await slow;
    throw new Error(`the cancelled call answered a result: ${JSON.stringify(v)}`);
  } catch (e) {
    check(e instanceof ResponseError, `the cancelled call failed with ${e}`);
    cancelled = e;
  }
  check(cancelled.code === -32800, `the cancelled call answered code ${cancelled.code}: ${cancelled.message}`);
  console.log(`ok: cancelled scenario.wait_cancel answered ${cancelled.code} ${cancelled.message}`);
  const tag = await cancelSeen;
  check(tag && tag.tag === 'vscode', `scenario.cancel_seen carried ${JSON.stringify(tag)}`);
  console.log(`ok: the handler saw the cancellation of ${JSON.stringify(tag)}`);

  const again = await conn.sendRequest('scenario.echo', { still: 'serving' });
  check(again && again.still === 'serving', `scenario.echo after the cancel answered ${JSON.stringify(again)}`);
  console.log('ok: still serving after the cancel');

  await conn.sendRequest('shutdown', {});
  conn.end();
  conn.dispose();
  child.stdin.end();
  const how = await exited;
  check(how.code === 0, `the extension exited with ${JSON.stringify(how)}`);
  console.log('ok: shutdown, and the extension exited 0');
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`FAILED: ${e && e.message ? e.message : e}`);
    process.exit(1);
  },
);
