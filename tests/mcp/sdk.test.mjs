// `subagent-supervisor mcp` driven by the official MCP TypeScript SDK, the way an MCP client (Claude
// Code, Codex, an agent SDK) drives it: the SDK spawns the server over stdio and calls every tool.
// Run by CTest as mcp_sdk_test (tests/CMakeLists.txt); by hand:
//   SUBAGENT_BIN_DIR=build/bin SUBAGENT_SOURCE_DIR=$PWD node --test tests/mcp/sdk.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

const BIN = process.env.SUBAGENT_BIN_DIR;
const SRC = process.env.SUBAGENT_SOURCE_DIR;
assert.ok(BIN && SRC, 'SUBAGENT_BIN_DIR and SUBAGENT_SOURCE_DIR must be set');
const SUPERVISOR = join(BIN, 'subagent-supervisor');

const root = mkdtempSync(join(tmpdir(), 'subagent-mcp-sdk-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
let counter = 0;
function tempDir(name) {
  const d = join(root, `${name}-${++counter}`);
  mkdirSync(d, { recursive: true });
  return d;
}

// A replay script: one scripted assistant turn per line (supervisor/models/replay_provider.cpp).
function script(turns) {
  const file = join(tempDir('script'), 'model.jsonl');
  writeFileSync(file, turns.map((t) => JSON.stringify(t)).join('\n') + '\n');
  return `replay:${file}`;
}

const FINAL = { content: '## Summary\ndone\n## Found\nnothing more' };
const SLOW_FOREVER = {
  content: 'working',
  tool_calls: [{ name: 'list_dir', arguments: {} }],
  delay_ms: 300,
  repeat: 'forever',
};

async function connect({ workspace, model, extra = [], elicit = null, stderr = [] }) {
  const state = tempDir('state');
  const transport = new StdioClientTransport({
    command: SUPERVISOR,
    args: ['mcp', '--workspace', workspace, '--model', model, '--state-dir', join(state, 'work'),
      '--lock-dir', join(state, 'locks'), '--transcript-dir', join(state, 'transcripts'), ...extra],
    env: { XDG_STATE_HOME: state },
    stderr: 'pipe',
  });
  transport.stderr?.on('data', (d) => stderr.push(d.toString()));
  const client = new Client({ name: 'sdk-test', version: '1.0.0' },
    { capabilities: elicit ? { elicitation: {} } : {} });
  if (elicit) client.setRequestHandler(ElicitRequestSchema, elicit);
  await client.connect(transport);
  return { client, state, transcripts: join(state, 'transcripts') };
}

async function until(what, check, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const presetsOnDisk = readdirSync(join(SRC, 'policies'))
  .filter((f) => f.endsWith('.json') && f !== 'schema.json')
  .map((f) => f.replace(/\.json$/, ''))
  .sort();

test('initialize, then tools/list offers five tools with schemas and annotations', async () => {
  const { client } = await connect({ workspace: SRC, model: script([FINAL]) });
  try {
    assert.equal(client.getServerVersion().name, 'subagent-supervisor');
    assert.ok(client.getServerCapabilities().tools, 'the server declares the tools capability');
    assert.match(client.getInstructions(), /agent_spawn/);
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(),
      ['agent_apply', 'agent_cancel', 'agent_list', 'agent_output', 'agent_spawn']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', `${t.name} input schema`);
      assert.equal(t.outputSchema.type, 'object', `${t.name} output schema`);
      assert.equal(typeof t.annotations.readOnlyHint, 'boolean', `${t.name} annotations`);
      assert.ok(t.description.length > 40, `${t.name} has a description`);
    }
    // Hosts may run read-only tools without asking, and stopping a child destroys nothing.
    assert.equal(byName.agent_list.annotations.readOnlyHint, true);
    assert.equal(byName.agent_output.annotations.readOnlyHint, true);
    assert.equal(byName.agent_cancel.annotations.destructiveHint, false);
    assert.equal(byName.agent_apply.annotations.destructiveHint, true);
    // No type arrays anywhere ("type": ["integer", "string"]): anyOf, which every host reads.
    const typeArrays = [];
    const walk = (v, path) => {
      if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${path}/${i}`));
      else if (v && typeof v === 'object') {
        if (Array.isArray(v.type)) typeArrays.push(path);
        for (const [k, x] of Object.entries(v)) walk(x, `${path}/${k}`);
      }
    };
    for (const t of tools) walk({ in: t.inputSchema, out: t.outputSchema }, t.name);
    assert.deepEqual(typeArrays, []);
    assert.equal(byName.agent_spawn.inputSchema.properties.limits.properties.timeout.anyOf.length, 2);
    const spawn = byName.agent_spawn;
    assert.deepEqual([...spawn.inputSchema.properties.preset.enum].sort(), presetsOnDisk);
    for (const p of presetsOnDisk) assert.match(spawn.description, new RegExp(`- ${p}: `), `description lists ${p}`);
    assert.deepEqual([...spawn.inputSchema.required].sort(), ['brief', 'description', 'preset']);
  } finally {
    await client.close();
  }
});

test('--presets narrows what is offered and what may be spawned', async () => {
  const { client } = await connect({ workspace: SRC, model: script([FINAL]), extra: ['--presets', 'explore,reviewer'] });
  try {
    const { tools } = await client.listTools();
    const spawn = tools.find((t) => t.name === 'agent_spawn');
    assert.deepEqual([...spawn.inputSchema.properties.preset.enum].sort(), ['explore', 'reviewer']);
    assert.doesNotMatch(spawn.description, /- worker: /);
    const r = await client.callTool({ name: 'agent_spawn',
      arguments: { preset: 'worker', brief: 'edit things', description: 'not offered' } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /worker/);
  } finally {
    await client.close();
  }
});

test('a sync agent_spawn runs a real explore child and returns its envelope, with progress', async () => {
  const { client } = await connect({ workspace: SRC, model: `replay:${join(SRC, 'examples/explore-demo.jsonl')}` });
  try {
    const progress = [];
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'explore', description: 'map the protocol module',
      brief: 'Find where the protocol framing is implemented. Cite files and lines.' } },
    undefined, { onprogress: (p) => progress.push({ ...p, at: Date.now() }), timeout: 120000 });
    assert.equal(r.isError, false);
    const env = r.structuredContent;
    assert.equal(env.status, 'completed', env.reason);
    assert.equal(env.preset, 'explore');
    assert.ok(env.tool_calls > 0, 'the child used its tools');
    assert.ok(env.sandbox.applied.includes('seccomp') && env.sandbox.applied.includes('landlock'));
    assert.deepEqual(JSON.parse(r.content[0].text), env, 'the text is the same envelope');
    assert.ok(env.transcript && existsSync(env.transcript), 'a transcript was written');
    assert.ok(progress.length >= 1, 'progress notifications arrived');
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
    assert.match(progress.at(-1).message, /step|queued|running/);
    // Rate-limited (at most one per 500 ms), and none after the result: a host has forgotten the
    // token by then (Claude Code logs "unknown token").
    for (let i = 1; i < progress.length; i++)
      assert.ok(progress[i].at - progress[i - 1].at >= 400, `progress ${i} came ${progress[i].at - progress[i - 1].at} ms after the one before`);
    const count = progress.length;
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(progress.length, count, 'no progress notification after the result');
  } finally {
    await client.close();
  }
});

test('background spawn, then agent_list, agent_output (with wait) and agent_cancel', async () => {
  const { client } = await connect({ workspace: SRC, model: script([SLOW_FOREVER]) });
  try {
    const quickModel = script([FINAL]);
    const slow = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'explore', brief: 'list the directory forever', description: 'slow child', background: true } });
    assert.equal(slow.isError, false);
    const slowId = slow.structuredContent.child_id;
    assert.match(slow.structuredContent.state, /queued|running/);

    const quick = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'explore', brief: 'say done', description: 'quick child', background: true, model: quickModel } });
    const quickId = quick.structuredContent.child_id;
    const quickOut = await client.callTool({ name: 'agent_output',
      arguments: { child_id: quickId, wait_seconds: 60 } }, undefined, { timeout: 90000 });
    assert.equal(quickOut.structuredContent.state, 'done');
    assert.equal(quickOut.structuredContent.envelope.status, 'completed');

    await until('the slow child to take steps', async () => {
      const o = await client.callTool({ name: 'agent_output', arguments: { child_id: slowId } });
      return o.structuredContent.state === 'running' && o.structuredContent.budget_use.steps >= 2;
    });
    const now = await client.callTool({ name: 'agent_output', arguments: { child_id: slowId } });
    assert.equal(now.structuredContent.envelope, null, 'no envelope while it runs');

    const list = await client.callTool({ name: 'agent_list', arguments: {} });
    const rows = Object.fromEntries(list.structuredContent.children.map((c) => [c.child_id, c]));
    assert.equal(rows[slowId].state, 'running');
    assert.equal(rows[slowId].description, 'slow child');
    assert.equal(rows[quickId].status, 'completed');

    const c = await client.callTool({ name: 'agent_cancel', arguments: { child_id: slowId, reason: 'enough' } });
    assert.equal(c.isError, false);
    const out = await client.callTool({ name: 'agent_output', arguments: { child_id: slowId, wait_seconds: 30 } },
      undefined, { timeout: 60000 });
    assert.equal(out.structuredContent.state, 'done');
    assert.equal(out.structuredContent.envelope.status, 'cancelled');
    assert.match(out.structuredContent.envelope.reason, /enough/);
  } finally {
    await client.close();
  }
});

test('a cancellation notification from the client cancels the child of a sync spawn', async () => {
  const { client } = await connect({ workspace: SRC, model: script([SLOW_FOREVER]) });
  try {
    const abort = new AbortController();
    const call = client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'explore', brief: 'list forever', description: 'to be aborted' } }, undefined, { signal: abort.signal });
    const row = await until('the child to run', async () => {
      const l = await client.callTool({ name: 'agent_list', arguments: {} });
      return l.structuredContent.children.find((c) => c.state === 'running');
    });
    abort.abort('the user pressed escape');
    await assert.rejects(call);
    const done = await until('the child to be cancelled', async () => {
      const o = await client.callTool({ name: 'agent_output', arguments: { child_id: row.child_id } });
      return o.structuredContent.state === 'done' && o.structuredContent;
    });
    assert.equal(done.envelope.status, 'cancelled');
    assert.match(done.envelope.reason, /cancelled by the client/);
  } finally {
    await client.close();
  }
});

// The worker preset asks before run_command of anything that is not a build/test command.
function approvalScript() {
  return script([
    { content: 'make a file', tool_calls: [{ name: 'run_command', arguments: { command: 'touch approved.txt' } }] },
    FINAL,
  ]);
}

test('an "ask" decision is put to the user through elicitation: approved, the command runs', async () => {
  const ws = tempDir('ws');
  const asked = [];
  const { client } = await connect({ workspace: ws, model: approvalScript(), elicit: async (req) => {
    asked.push(req.params);
    return { action: 'accept', content: { approve: true } };
  } });
  try {
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'worker', brief: 'create approved.txt', description: 'touch a file' } }, undefined, { timeout: 120000 });
    assert.equal(r.structuredContent.status, 'completed', r.structuredContent.reason);
    assert.equal(asked.length, 1);
    assert.match(asked[0].message, new RegExp(r.structuredContent.id));
    assert.match(asked[0].message, /worker: touch a file/);
    assert.match(asked[0].message, /touch approved\.txt/);
    assert.equal(asked[0].requestedSchema.properties.approve.type, 'boolean');
    assert.ok(existsSync(join(ws, 'approved.txt')), 'the approved command ran in the workspace');
    assert.equal(r.structuredContent.tools_denied, 0);
    assert.deepEqual(r.structuredContent.denials, []);
  } finally {
    await client.close();
  }
});

test('elicitation declined: the command is denied and never runs', async () => {
  const ws = tempDir('ws');
  let asked = 0;
  const { client } = await connect({ workspace: ws, model: approvalScript(), elicit: async () => {
    asked++;
    return { action: 'decline' };
  } });
  try {
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'worker', brief: 'create approved.txt', description: 'touch a file' } }, undefined, { timeout: 120000 });
    assert.equal(asked, 1);
    assert.equal(r.structuredContent.tools_denied, 1);
    assert.equal(r.structuredContent.denials.length, 1);
    assert.equal(r.structuredContent.denials[0].tool, 'run_command');
    assert.equal(r.structuredContent.denials[0].rule, 'ask: declined by parent');
    assert.equal(r.structuredContent.denials_omitted, 0);
    assert.ok(!existsSync(join(ws, 'approved.txt')));
  } finally {
    await client.close();
  }
});

test('a client without elicitation: "ask" is denied at once (the no-approver rule)', async () => {
  const ws = tempDir('ws');
  const { client } = await connect({ workspace: ws, model: approvalScript(), extra: ['--approval-timeout', '10m'] });
  try {
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'worker', brief: 'create approved.txt', description: 'touch a file' } }, undefined, { timeout: 120000 });
    assert.equal(r.structuredContent.status, 'completed');
    assert.equal(r.structuredContent.tools_denied, 1, 'denied at once, not after the 10 minute timeout');
    assert.deepEqual(r.structuredContent.denials.map((d) => [d.tool, d.rule]), [['run_command', 'ask: no approver']]);
    assert.ok(!existsSync(join(ws, 'approved.txt')));
    const transcript = readFileSync(r.structuredContent.transcript, 'utf8');
    assert.match(transcript, /no approver is attached/);
  } finally {
    await client.close();
  }
});

// A one-commit repository and a model whose implementation child writes NEW.md there.
function repoAndWriter() {
  const ws = tempDir('repo');
  const git = (...a) => execFileSync('git', ['-C', ws, ...a], { stdio: 'pipe' });
  git('init', '-q');
  writeFileSync(join(ws, 'README'), 'hello\n');
  git('add', 'README');
  git('-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'init');
  const model = script([
    { content: 'write', tool_calls: [{ name: 'write_file', arguments: { path: 'NEW.md', content: 'from the child\n' } }] },
    FINAL,
  ]);
  return { ws, model };
}

test('agent_apply applies the patch an implementation child returned', async () => {
  const { ws, model } = repoAndWriter();
  const { client } = await connect({ workspace: ws, model });
  try {
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'implementation', brief: 'add NEW.md', description: 'add a file' } }, undefined, { timeout: 120000 });
    assert.equal(r.structuredContent.status, 'completed', r.structuredContent.reason);
    assert.ok(!existsSync(join(ws, 'NEW.md')), 'the child worked on an isolated copy');
    const a = await client.callTool({ name: 'agent_apply', arguments: { child_id: r.structuredContent.id } });
    assert.equal(a.isError, false, a.content[0].text);
    assert.equal(a.structuredContent.ok, true);
    assert.deepEqual(a.structuredContent.files, ['NEW.md']);
    assert.equal(readFileSync(join(ws, 'NEW.md'), 'utf8'), 'from the child\n');
    const again = await client.callTool({ name: 'agent_apply', arguments: { child_id: r.structuredContent.id } });
    assert.equal(again.isError, true, 'a patch that no longer applies is reported');
  } finally {
    await client.close();
  }
});

test('agent_apply the client cancels: no answer comes for it, the session goes on, and the patch lands once', async () => {
  const { ws, model } = repoAndWriter();
  const { client } = await connect({ workspace: ws, model });
  const errors = [];
  client.onerror = (e) => errors.push(String(e));  // the SDK's "response for an unknown message ID"
  try {
    const r = await client.callTool({ name: 'agent_spawn', arguments: {
      preset: 'implementation', brief: 'add NEW.md', description: 'add a file' } }, undefined, { timeout: 120000 });
    assert.equal(r.structuredContent.status, 'completed', r.structuredContent.reason);
    const abort = new AbortController();
    const cancelled = client.callTool({ name: 'agent_apply', arguments: { child_id: r.structuredContent.id } },
      undefined, { signal: abort.signal });
    abort.abort('the host changed its mind');
    await assert.rejects(cancelled);
    // Applies run one at a time in the order asked: once this second one is answered, the first is
    // done (answered to nobody). Exactly one of the two applied the patch.
    const second = await client.callTool({ name: 'agent_apply', arguments: { child_id: r.structuredContent.id } });
    assert.equal(readFileSync(join(ws, 'NEW.md'), 'utf8'), 'from the child\n');
    if (second.isError) assert.match(second.content[0].text, /appl/);
    else assert.deepEqual(second.structuredContent.files, ['NEW.md']);
    const list = await client.callTool({ name: 'agent_list', arguments: {} });
    assert.equal(list.isError, false, list.content[0].text);
    assert.deepEqual(errors, [], 'nothing answered the cancelled request');
  } finally {
    await client.close();
  }
});

test('host-added wait_for_previous (Gemini CLI) is ignored on every tool; real typos are still refused', async () => {
  const { client } = await connect({ workspace: SRC, model: script([SLOW_FOREVER]) });
  try {
    const bg = await client.callTool({ name: 'agent_spawn', arguments: { preset: 'explore', brief: 'b',
      description: 'with host field', background: true, wait_for_previous: true } });
    assert.equal(bg.isError, false, bg.content[0].text);
    const id = bg.structuredContent.child_id;
    const list = await client.callTool({ name: 'agent_list', arguments: { wait_for_previous: false } });
    assert.equal(list.isError, false, list.content[0].text);
    assert.ok(list.structuredContent.children.some((c) => c.child_id === id));
    const out = await client.callTool({ name: 'agent_output', arguments: { child_id: id, wait_for_previous: true } });
    assert.equal(out.isError, false, out.content[0].text);
    // Twins: a misspelt field, or the host field with a type no host sends, is refused by name.
    const typo = await client.callTool({ name: 'agent_list', arguments: { wait_for_previus: true } });
    assert.equal(typo.isError, true);
    assert.match(typo.content[0].text, /wait_for_previus: unknown field/);
    const wrong = await client.callTool({ name: 'agent_output', arguments: { child_id: id, wait_for_previous: 'yes' } });
    assert.equal(wrong.isError, true);
    assert.match(wrong.content[0].text, /wait_for_previous: unknown field/);
    const c = await client.callTool({ name: 'agent_cancel', arguments: { child_id: id, wait_for_previous: true } });
    assert.equal(c.isError, false, c.content[0].text);
  } finally {
    await client.close();
  }
});

test('bad calls get errors that name what was wrong', async () => {
  const { client } = await connect({ workspace: SRC, model: script([FINAL]) });
  try {
    await assert.rejects(client.callTool({ name: 'agent_teleport', arguments: {} }),
      (e) => e instanceof McpError && e.code === -32602 && /agent_teleport/.test(e.message));
    const call = async (name, args) => {
      const r = await client.callTool({ name, arguments: args });
      assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} should fail`);
      return r.content[0].text;
    };
    assert.match(await call('agent_spawn', { preset: 'explore', description: 'x' }), /brief: missing/);
    assert.match(await call('agent_spawn', { preset: 'explore', brief: 'b', description: 'x', colour: 'red' }),
      /colour: unknown field/);
    assert.match(await call('agent_spawn', { preset: 'explore', brief: 'b', description: 'x',
      limits: { max_steps: 100000 } }), /max_steps/);
    assert.match(await call('agent_spawn', { preset: 'explore', brief: 'b', description: 'x', workspace: '/' }),
      /outside the allowed roots/);
    assert.match(await call('agent_spawn', { preset: 'nope', brief: 'b', description: 'x' }), /nope/);
    assert.match(await call('agent_output', { child_id: 'nobody' }), /no child 'nobody'/);
    assert.match(await call('agent_output', { child_id: 'nobody', wait_seconds: -1 }), /wait_seconds/);
    assert.match(await call('agent_cancel', {}), /child_id: missing/);
    assert.match(await call('agent_list', { all: true }), /all: unknown field/);
    // The server is still fine after all that.
    const ok = await client.callTool({ name: 'agent_spawn', arguments: { preset: 'explore', brief: 'b', description: 'x' } });
    assert.equal(ok.structuredContent.status, 'completed');
  } finally {
    await client.close();
  }
});
