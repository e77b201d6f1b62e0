// examples/light-client/light-client.mjs against two real `letus serve` nodes: agreement, a fork (a different
// block at the same version on node B), and a rollback (a proxy that starts reporting an older digest).
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LIGHT_CLIENT, cleanup, getJson, hex, jsonLines, postBlock, run, startNode, startProxy, writesFor } from './helpers.js';

after(cleanup);

const WATCH = hex('key-3');

function lightClient(nodes, extra, opts) {
  const args = [LIGHT_CLIENT, ...nodes.flatMap((u) => ['--node', u]), '--watch', WATCH, '--quiet', ...extra];
  return run(process.execPath, args, { timeoutMs: 60000, ...opts });
}

/** Both nodes get the same blocks 1..n. */
async function sameBlocks(nodes, from, to) {
  for (let v = from; v <= to; v++) for (const n of nodes) await postBlock(n.url, v, writesFor(v * 10, 10, `v${v}`));
}

describe('light client', () => {
  it('follows two agreeing nodes: agreement, verified consistency and keys, exit 0', async () => {
    const [a, b] = await Promise.all([startNode(), startNode()]);
    await sameBlocks([a, b], 1, 3);
    let posted = false;
    const r = await lightClient([a.url, b.url], ['--rounds', '4', '--interval-ms', '200'], {
      onStdoutLine: (line) => {
        const e = JSON.parse(line);
        // After the first round, both nodes move forward by two blocks.
        if (e.event === 'round' && e.round === 1 && !posted) {
          posted = true;
          sameBlocks([a, b], 4, 5).catch(() => {});
        }
      },
    });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const ev = jsonLines(r.stdout);
    assert.deepEqual(ev.filter((e) => e.event === 'alarm'), []);
    const reports = ev.filter((e) => e.event === 'digest' && !e.lookup);
    assert.ok(reports.some((e) => e.source === a.url && e.report === 'new'));
    assert.ok(reports.some((e) => e.source === b.url && e.report === 'agreement'));
    const cons = ev.filter((e) => e.event === 'consistency');
    assert.ok(cons.some((e) => e.source === a.url && e.from === 3 && e.to >= 4), JSON.stringify(cons));
    assert.ok(cons.some((e) => e.source === b.url && e.from === 3 && e.to >= 4), JSON.stringify(cons));
    const keys = ev.filter((e) => e.event === 'key');
    assert.ok(keys.length >= 8);
    assert.ok(keys.every((k) => k.present === false || typeof k.value === 'string'));
    const summary = ev.at(-1);
    assert.equal(summary.event, 'summary');
    assert.equal(summary.ok, true);
    assert.equal(summary.rounds, 4);
  });

  it('reports a fork when node B gets a different block at the same version, exit 1', async () => {
    const [a, b] = await Promise.all([startNode(), startNode()]);
    await sameBlocks([a, b], 1, 3);
    let posted = false;
    const r = await lightClient([a.url, b.url], ['--interval-ms', '200'], {
      onStdoutLine: (line) => {
        const e = JSON.parse(line);
        if (e.event === 'round' && e.round === 1 && !posted) {
          posted = true;
          postBlock(a.url, 4, writesFor(1000, 5, 'honest'))
            .then(() => postBlock(b.url, 4, writesFor(1000, 5, 'forked')))
            .catch(() => {});
        }
      },
    });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const ev = jsonLines(r.stdout);
    assert.ok(ev.some((e) => e.event === 'round' && e.round === 1 && e.alarms === 0), 'round 1 saw agreement');
    const alarms = ev.filter((e) => e.event === 'alarm');
    assert.ok(alarms.length >= 1);
    const fork = alarms.find((e) => e.kind === 'fork');
    assert.ok(fork, JSON.stringify(alarms));
    assert.equal(fork.version, 4);
    assert.equal(fork.conflicts_with.version, 4);
    assert.notEqual(fork.root, fork.conflicts_with.root);
    const summary = ev.at(-1);
    assert.equal(summary.ok, false);
    assert.ok(summary.alarms.includes('fork'));
  });

  it('reports a fork between nodes at different heights (cross-check at the common version)', async () => {
    const [a, b] = await Promise.all([startNode(), startNode()]);
    await sameBlocks([a, b], 1, 2);
    await postBlock(a.url, 3, writesFor(500, 3, 'honest'));
    await postBlock(a.url, 4, writesFor(600, 3, 'honest'));
    await postBlock(b.url, 3, writesFor(500, 3, 'forked')); // B lags at 3, with another block 3
    const r = await lightClient([a.url, b.url], ['--rounds', '2', '--interval-ms', '100']);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const fork = jsonLines(r.stdout).find((e) => e.event === 'alarm' && e.kind === 'fork');
    assert.ok(fork);
    assert.equal(fork.version, 3);
  });

  it('reports a rollback when a node starts reporting an older digest, exit 1', async () => {
    const [a, b] = await Promise.all([startNode(), startNode()]);
    await sameBlocks([a, b], 1, 4);
    let rollback = false;
    // In front of A: honest until `rollback`, then GET /v1/digest answers with A's digest at version 2.
    const proxy = await startProxy(a.url, async (req, res, forward) => {
      if (rollback && req.url === '/v1/digest') {
        const old = await getJson(`${a.url}/v1/digest/2`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(old));
        return;
      }
      forward();
    });
    const r = await lightClient([proxy.url, b.url], ['--interval-ms', '200'], {
      onStdoutLine: (line) => {
        const e = JSON.parse(line);
        if (e.event === 'round' && e.round === 2) rollback = true;
      },
    });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const ev = jsonLines(r.stdout);
    const alarms = ev.filter((e) => e.event === 'alarm');
    assert.equal(alarms.length, 1, JSON.stringify(alarms));
    assert.equal(alarms[0].kind, 'rollback');
    assert.equal(alarms[0].source, proxy.url);
    assert.equal(alarms[0].version, 2);
    assert.equal(alarms[0].previous.version, 4);
    assert.deepEqual(ev.at(-1).alarms, ['rollback']);
  });

  it('a checkpoint conflict and usage errors', async () => {
    const a = await startNode();
    await postBlock(a.url, 1, writesFor(0, 5, 'x'));
    const d = (await getJson(`${a.url}/v1/digest/1`)).digests[0];
    const wrong = { ...d, root: d.root.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
    const r = await lightClient([a.url], ['--rounds', '1', '--checkpoint', JSON.stringify(wrong)]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.ok(jsonLines(r.stdout).some((e) => e.event === 'alarm' && e.kind === 'checkpoint_conflict'));
    const ok = await lightClient([a.url], ['--rounds', '1', '--checkpoint', JSON.stringify(d)]);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    const u = await run(process.execPath, [LIGHT_CLIENT]);
    assert.equal(u.code, 2);
    const bad = await run(process.execPath, [LIGHT_CLIENT, '--node', a.url, '--rounds', 'x']);
    assert.equal(bad.code, 2);
  });
});
