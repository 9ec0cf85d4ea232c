// `subagent-supervisor mcp` on the wire, below the SDK: what a broken or hostile client sends (lines
// that are not JSON, batches, wrong ids, requests before initialize), version negotiation, and how
// the server ends (end of input, SIGTERM) with a child still running.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const BIN = process.env.SUBAGENT_BIN_DIR;
const SRC = process.env.SUBAGENT_SOURCE_DIR;
assert.ok(BIN && SRC, 'SUBAGENT_BIN_DIR and SUBAGENT_SOURCE_DIR must be set');

const root = mkdtempSync(join(tmpdir(), 'subagent-mcp-wire-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));

const SLOW = join(root, 'slow.jsonl');
writeFileSync(SLOW, JSON.stringify({ content: 'working', tool_calls: [{ name: 'list_dir', arguments: {} }],
  delay_ms: 300, repeat: 'forever' }) + '\n');

let n = 0;
class Server {
  constructor(extra = []) {
    const state = join(root, `state-${++n}`);
    this.proc = spawn(join(BIN, 'subagent-supervisor'), ['mcp', '--workspace', SRC, '--model', `replay:${SLOW}`,
      '--state-dir', join(state, 'work'), '--lock-dir', join(state, 'locks'), '--transcript-dir',
      join(state, 'transcripts'), ...extra], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, XDG_STATE_HOME: state } });
    this.messages = [];
    this.waiters = [];
    this.stderr = '';
    this.proc.stderr.on('data', (d) => { this.stderr += d; });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const m = JSON.parse(line);  // every line on stdout must be one JSON-RPC message
      assert.equal(m.jsonrpc, '2.0', `not JSON-RPC: ${line}`);
      this.messages.push(m);
      for (const w of [...this.waiters]) w();
    });
  }
  raw(text) { this.proc.stdin.write(text); }
  send(m) { this.raw(JSON.stringify(m) + '\n'); }
  next(pred, ms = 30000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const i = this.messages.findIndex(pred);
        if (i < 0) return false;
        const [m] = this.messages.splice(i, 1);
        this.waiters = this.waiters.filter((w) => w !== check);
        clearTimeout(timer);
        resolve(m);
        return true;
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error(`no matching message within ${ms} ms; stderr: ${this.stderr}`));
      }, ms);
      if (!check()) this.waiters.push(check);
    });
  }
  reply(id) { return this.next((m) => m.id === id && ('result' in m || 'error' in m)); }
  async initialize(version = '2025-11-25') {
    this.send({ jsonrpc: '2.0', id: 'init', method: 'initialize',
      params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'wire-test', version: '1' } } });
    const r = await this.reply('init');
    this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }
}

test('bad lines and bad requests get JSON-RPC errors naming what was wrong, and the server keeps going', async () => {
  const s = new Server();
  try {
    s.send({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    let r = await s.reply(1);
    assert.equal(r.error.code, -32600);
    assert.match(r.error.message, /initialize/);

    const init = await s.initialize();
    assert.equal(init.result.protocolVersion, '2025-11-25');
    assert.equal(init.result.serverInfo.name, 'subagent-supervisor');

    s.raw('this is not json\n');
    r = await s.next((m) => m.error?.code === -32700);
    assert.equal(r.id, null);

    s.raw(Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('{"broken utf-8"}\n')]));
    r = await s.next((m) => m.error && m.id === null);
    assert.ok(r.error.code === -32700 || r.error.code === -32600);

    s.send([{ jsonrpc: '2.0', id: 2, method: 'ping' }]);
    r = await s.next((m) => m.error?.code === -32600 && /batch/.test(m.error.message));

    s.send({ jsonrpc: '1.0', id: 3, method: 'ping' });
    r = await s.reply(3);
    assert.equal(r.error.code, -32600);
    assert.match(r.error.message, /jsonrpc/);

    s.send({ jsonrpc: '2.0', id: { x: 1 }, method: 'ping' });
    r = await s.next((m) => m.error && /id: must be/.test(m.error.message));

    s.send({ jsonrpc: '2.0', id: 4, method: 'resources/list' });
    r = await s.reply(4);
    assert.equal(r.error.code, -32601);
    assert.match(r.error.message, /resources\/list/);

    s.send({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { arguments: {} } });
    r = await s.reply(5);
    assert.equal(r.error.code, -32602);
    assert.match(r.error.message, /name/);

    s.send({ jsonrpc: '2.0', id: 6, method: 'initialize', params: { protocolVersion: '2025-11-25' } });
    r = await s.reply(6);
    assert.equal(r.error.code, -32600);
    assert.match(r.error.message, /already/);

    s.send({ jsonrpc: '2.0', method: 'notifications/something_new' });  // ignored, never answered
    s.send({ jsonrpc: '2.0', id: 'p', method: 'ping' });
    r = await s.reply('p');
    assert.deepEqual(r.result, {});
    assert.equal(s.messages.length, 0, `unexpected messages: ${JSON.stringify(s.messages)}`);
  } finally {
    s.proc.kill('SIGKILL');
  }
});

test('a line longer than --max-line is refused and the next one is served', async () => {
  const s = new Server(['--max-line', '4096']);
  try {
    await s.initialize();
    s.raw(JSON.stringify({ jsonrpc: '2.0', id: 'big', method: 'ping', params: { pad: 'x'.repeat(10000) } }) + '\n');
    const r = await s.next((m) => m.error && m.id === null);
    assert.match(r.error.message, /long|4096/);
    s.send({ jsonrpc: '2.0', id: 'after', method: 'ping' });
    assert.deepEqual((await s.reply('after')).result, {});
  } finally {
    s.proc.kill('SIGKILL');
  }
});

test('version negotiation: a known revision is echoed, an unknown one gets the newest', async () => {
  for (const [asked, expect] of [['2025-06-18', '2025-06-18'], ['2024-11-05', '2024-11-05'], ['1999-01-01', '2025-11-25']]) {
    const s = new Server();
    try {
      const r = await s.initialize(asked);
      assert.equal(r.result.protocolVersion, expect, `asked ${asked}`);
      assert.deepEqual(r.result.capabilities, { tools: { listChanged: false } });
    } finally {
      s.proc.kill('SIGKILL');
    }
  }
  const s = new Server();
  try {
    s.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} });
    const r = await s.reply(1);
    assert.equal(r.error.code, -32602);
    assert.match(r.error.message, /protocolVersion/);
  } finally {
    s.proc.kill('SIGKILL');
  }
});

async function startSlowChild(s) {
  await s.initialize();
  s.send({ jsonrpc: '2.0', id: 'spawn', method: 'tools/call', params: { name: 'agent_spawn',
    arguments: { preset: 'explore', brief: 'list forever', description: 'long job' } } });
  for (;;) {
    s.send({ jsonrpc: '2.0', id: 'list', method: 'tools/call', params: { name: 'agent_list', arguments: {} } });
    const l = await s.reply('list');
    const running = l.result.structuredContent.children.find((c) => c.state === 'running');
    if (running) return running.child_id;
    await new Promise((r) => setTimeout(r, 100));
  }
}

for (const [how, stop] of [
  ['the client closes stdin', (s) => s.proc.stdin.end()],
  ['SIGTERM', (s) => s.proc.kill('SIGTERM')],
  // Codex stops its servers with SIGTERM and repeats it; an impatient user presses Ctrl-C twice.
  ['SIGTERM twice in a row', (s) => { s.proc.kill('SIGTERM'); s.proc.kill('SIGTERM'); }],
  ['SIGINT, then SIGTERM 50 ms later', (s) => {
    s.proc.kill('SIGINT');
    setTimeout(() => s.proc.kill('SIGTERM'), 50);
  }],
  // A signal in every moment of the shutdown, the last moments of the exit included.
  ['SIGTERM every 2 ms until it exits', (s) => {
    const t = setInterval(() => { try { s.proc.kill('SIGTERM'); } catch { /* gone */ } }, 2);
    s.proc.on('exit', () => clearInterval(t));
  }],
  ['SIGTERM three times, 20 ms apart', (s) => {
    s.proc.kill('SIGTERM');
    setTimeout(() => s.proc.kill('SIGTERM'), 20);
    setTimeout(() => s.proc.kill('SIGTERM'), 40);
  }],
]) {
  test(`${how} mid-spawn: the child is cancelled, its envelope reported, the server exits 0`, async () => {
    const s = new Server();
    const id = await startSlowChild(s);
    stop(s);
    const r = await s.reply('spawn');
    assert.equal(r.result.structuredContent.id, id);
    assert.equal(r.result.structuredContent.status, 'cancelled');
    const { code, signal } = await s.exited;
    assert.equal(signal, null, `the server died by ${signal}`);
    assert.equal(code, 0);
  });
}
