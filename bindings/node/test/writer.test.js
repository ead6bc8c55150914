// The store and its writer from Node: create, append, batch, conflict, rule
// violations, the errors a program branches on, one writer per session, and
// concurrent appends applied in call order.
'use strict'

const assert = require('node:assert/strict')
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { Store, SessionlogError, parseReviewResult } = require('..')
const { tempDir, rejectsWith } = require('./support')

const backends = [
  ['JSONL', (folder) => path.join(folder, 'sessions')],
  ['SQLite', (folder) => path.join(folder, 'sessions.db')],
]

for (const [backend, location] of backends) {
  test(`${backend}: create, append and batch, then read back as plain values`, async (t) => {
    const store = await Store.open(location(tempDir(t)), { create: true })
    const header = await store.createSession({ id: 's1', cwd: '/work/app', createdAt: 1700000000000 })
    assert.deepEqual(header, {
      kind: 'header',
      formatVersion: 1,
      id: 's1',
      createdAt: 1700000000000,
      cwd: '/work/app',
      parentSession: null,
      seedLength: 0,
      delegationDepth: 0,
      sandboxMode: null,
      approvalPolicy: null,
    })
    const writer = await store.openWriter('s1', { durability: 'fsync', keepSnapshot: true })
    assert.equal(writer.id, 's1')
    assert.equal(await writer.append({ type: 'turn/start', data: { turnId: 't1' }, ts: 1700000000001 }, { expectSeq: 1 }), 1)
    const data = { stepId: 'st1', turnId: 't1' }
    const note = { text: 'ünïcödé ✓ "quoted"\n', nested: [1, -2.5, null, true, { deep: [] }] }
    const seqs = await writer.appendBatch([
      { type: 'step/start', data },
      { type: 'x-test/note', data: note },
    ])
    assert.deepEqual(seqs, [2, 3])
    assert.deepEqual(await writer.appendBatch([]), [])
    await writer.close()

    const snap = await store.snapshot('s1')
    assert.deepEqual(snap.header, header)
    assert.equal(snap.tornTail, null)
    assert.deepEqual(
      snap.events.map(({ seq, type, data, batch }) => ({ seq, type, data, batch })),
      [
        { seq: 1, type: 'turn/start', data: { turnId: 't1' }, batch: undefined },
        { seq: 2, type: 'step/start', data, batch: 2 },
        { seq: 3, type: 'x-test/note', data: note, batch: undefined },
      ],
    )
    assert.equal(snap.events[0].ts, 1700000000001)
    assert.ok(Number.isSafeInteger(snap.events[1].ts))

    const list = await store.list()
    assert.deepEqual(list, [header])
  })

  test(`${backend}: a conflict and a rule violation write nothing`, async (t) => {
    const store = await Store.open(location(tempDir(t)), { create: true })
    await store.createSession({ id: 's1', cwd: '/w' })
    const writer = await store.openWriter('s1')
    await writer.append({ type: 'turn/start', data: { turnId: 't1' } })

    const conflict = await rejectsWith(writer.append({ type: 'turn/end', data: { turnId: 't1' } }, { expectSeq: 5 }), 'CONFLICT')
    assert.equal(conflict.expected, 5)
    assert.equal(conflict.actual, 2)
    assert.equal(conflict.seq, 2)

    // A step that is not open cannot end; a batch with one bad event is
    // refused whole.
    const rule = await rejectsWith(writer.append({ type: 'step/end', data: { stepId: 'nope' } }), 'RULE')
    assert.equal(rule.seq, 2)
    assert.match(rule.message, /step/)
    assert.ok(rule.path.startsWith(store.location), rule.path)
    const batch = await rejectsWith(
      writer.appendBatch([
        { type: 'step/start', data: { stepId: 'a', turnId: 't1' } },
        { type: 'approval/policy', data: { policy: 'sometimes' } },
      ]),
      'RULE',
    )
    assert.equal(batch.seq, 3)
    await rejectsWith(writer.append({ type: 'turn/start', data: 'not an object' }), 'RULE')

    // The writer goes on from where it was.
    assert.equal(await writer.append({ type: 'turn/end', data: { turnId: 't1' } }, { expectSeq: 2 }), 2)
    await writer.close()
    const snap = await store.snapshot('s1')
    assert.deepEqual(
      snap.events.map((e) => e.type),
      ['turn/start', 'turn/end'],
    )
  })

  test(`${backend}: a second writer of a session is LOCKED until the first closes`, async (t) => {
    const store = await Store.open(location(tempDir(t)), { create: true })
    await store.createSession({ id: 's1', cwd: '/w' })
    const first = await store.openWriter('s1')
    await rejectsWith(store.openWriter('s1'), 'LOCKED')
    await first.close()
    const second = await store.openWriter('s1')
    await second.close()
  })
}

test('the errors a program branches on carry their code, message and context', async (t) => {
  const folder = tempDir(t)
  await rejectsWith(Store.open(path.join(folder, 'missing')), 'IO')
  // An empty location names nothing: said so, not as a path error.
  const empty = await rejectsWith(Store.open(''), 'INVALID_ARGUMENT')
  assert.match(empty.message, /location is empty/)
  const store = await Store.open(path.join(folder, 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })

  await rejectsWith(store.createSession({ id: 's1', cwd: '/w' }), 'EXISTS')
  await rejectsWith(store.createSession({ id: '../escape', cwd: '/w' }), 'INVALID_ID')
  await rejectsWith(store.openWriter('a/b'), 'INVALID_ID')
  await rejectsWith(store.snapshot(42), 'INVALID_ID')
  await rejectsWith(store.snapshot('nobody'), 'NOT_FOUND')
  await rejectsWith(store.createSession({ id: 's2', cwd: '/w', sandboxMode: 'yolo' }), 'INVALID_ARGUMENT')
  assert.equal(fs.existsSync(path.join(folder, 'sessions', 's2.jsonl')), false)

  // A lone surrogate would reach the log as U+FFFD, and a mistyped boolean
  // would be coerced: both are refused, nothing made.
  await rejectsWith(store.createSession({ id: 's3', cwd: '/a\ud800b' }), 'INVALID_ARGUMENT')
  assert.equal(fs.existsSync(path.join(folder, 'sessions', 's3.jsonl')), false)
  await rejectsWith(store.fork('s1', 's4', { prompt: 'hi \ud800 there' }), 'INVALID_ARGUMENT')
  assert.equal(fs.existsSync(path.join(folder, 'sessions', 's4.jsonl')), false)
  await rejectsWith(Store.open(path.join(folder, 'other'), { create: 'false' }), 'INVALID_ARGUMENT')
  assert.equal(fs.existsSync(path.join(folder, 'other')), false)
  await rejectsWith(store.openWriter('s1', { keepSnapshot: 'false' }), 'INVALID_ARGUMENT')
  // A signal that is no AbortSignal is refused before anything follows.
  await rejectsWith(store.follow('s1', { signal: {} }).next(), 'INVALID_ARGUMENT')

  const writer = await store.openWriter('s1', { durability: 'buffered' })
  await rejectsWith(writer.append({ type: 'turn/start', data: { turnId: 't1' } }, { expectSeq: 0 }), 'INVALID_ARGUMENT')
  await rejectsWith(writer.append({ type: 'x', data: undefined }), 'INVALID_EVENT')
  await rejectsWith(writer.append({ type: 'x', data: { big: 10n } }), 'INVALID_EVENT')
  await rejectsWith(writer.append({ data: {} }), 'INVALID_EVENT')
  // An event whose reading throws (a getter, a proxy) is INVALID_EVENT too.
  await rejectsWith(writer.append({ get type() { throw new RangeError('boom') }, data: {} }), 'INVALID_EVENT')
  await rejectsWith(writer.append(new Proxy({}, { get() { throw new Error('proxy') } })), 'INVALID_EVENT')
  await rejectsWith(writer.append({ type: 'x-big', data: 'a'.repeat(17 * 1024 * 1024) }), 'INVALID_EVENT')
  await rejectsWith(store.openWriter('s1', { durability: 'sometimes' }), 'INVALID_ARGUMENT')
  await writer.close()
  await rejectsWith(writer.append({ type: 'turn/start', data: { turnId: 't1' } }), 'CLOSED')
  assert.deepEqual((await store.snapshot('s1')).events, [])
  await rejectsWith(store.project('s1', { at: 3 }), 'INVALID_ARGUMENT')

  // Corruption is refused with its line and byte offset, never skipped.
  const log = path.join(folder, 'sessions', 's1.jsonl')
  const w2 = await store.openWriter('s1')
  await w2.appendBatch([
    { type: 'x-a', data: {} },
    { type: 'x-b', data: {} },
  ])
  await w2.append({ type: 'x-c', data: {} })
  await w2.close()
  const lines = fs.readFileSync(log, 'utf8').split('\n')
  const offset = Buffer.byteLength(lines.slice(0, 2).join('\n') + '\n')
  lines[2] = lines[2].replace('"x-b"', '"x-B"')
  fs.writeFileSync(log, lines.join('\n'))
  const corrupt = await rejectsWith(store.snapshot('s1'), 'CORRUPT')
  assert.equal(corrupt.line, 3)
  assert.equal(corrupt.offset, offset)
  assert.equal(corrupt.path, log)
  await rejectsWith(store.openWriter('s1'), 'CORRUPT')
  assert.ok(corrupt instanceof Error)
  assert.equal(corrupt.name, 'SessionlogError')
})

test('1,000 concurrent appends are applied in call order and resolve in seq order', async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  // 500 turns: a turn/start that overtook the turn/end before it would
  // break a rule; the seqs must follow the calls exactly.
  const resolved = []
  const appends = []
  for (let n = 0; n < 1000; n += 1) {
    const turnId = `t${Math.floor(n / 2)}`
    const type = n % 2 === 0 ? 'turn/start' : 'turn/end'
    const expectSeq = n % 7 === 0 ? n + 1 : undefined
    appends.push(
      writer.append({ type, data: { turnId } }, { expectSeq }).then((seq) => {
        resolved.push(seq)
        return seq
      }),
    )
  }
  const seqs = await Promise.all(appends)
  assert.deepEqual(seqs, Array.from({ length: 1000 }, (_, n) => n + 1), 'the n-th call gets seq n')
  assert.deepEqual(resolved, seqs, 'promises resolve in seq order')
  await writer.close()
  const snap = await store.snapshot('s1')
  assert.equal(snap.events.length, 1000)
  snap.events.forEach((event, n) => {
    assert.equal(event.type, n % 2 === 0 ? 'turn/start' : 'turn/end')
    assert.deepEqual(event.data, { turnId: `t${Math.floor(n / 2)}` })
  })
})

test('a bulk of 6,000 appends issued in one loop, handed over in several groups, keeps call order', async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  // More appends than one group takes while another runs: the writer hands
  // several groups over before the first is done; the store must still
  // apply them in call order (a turn/start overtaking its turn/end breaks a
  // rule), with a refused append in the middle leaving the rest alone and
  // the close queued last running after every append. Durable, so that
  // the first group's fsync is still running when the next ones arrive.
  const settledOrder = []
  const appends = []
  let refused = null
  for (let n = 0; n < 6000; n += 1) {
    if (n === 2500) {
      refused = writer.append({ type: 'x-test/note', data: {} }, { expectSeq: 1 })
      refused.catch(() => settledOrder.push('refused'))
    }
    const type = n % 2 === 0 ? 'turn/start' : 'turn/end'
    appends.push(
      writer.append({ type, data: { turnId: `t${Math.floor(n / 2)}` } }).then((seq) => {
        settledOrder.push(seq)
        return seq
      }),
    )
  }
  const closed = writer.close().then(() => settledOrder.push('closed'))
  const seqs = await Promise.all(appends)
  await rejectsWith(refused, 'CONFLICT')
  await closed
  assert.deepEqual(seqs, Array.from({ length: 6000 }, (_, n) => n + 1), 'the n-th call gets seq n')
  const expected = [...seqs.slice(0, 2500), 'refused', ...seqs.slice(2500), 'closed']
  assert.deepEqual(settledOrder, expected, 'promises settle in call order, the close last')
  const snap = await store.snapshot('s1')
  assert.equal(snap.events.length, 6000)
  snap.events.forEach((event, n) => assert.equal(event.type, n % 2 === 0 ? 'turn/start' : 'turn/end'))
})

test('a refused append in a group of concurrent appends leaves the others', async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  const outcomes = await Promise.allSettled([
    writer.append({ type: 'turn/start', data: { turnId: 't1' } }),
    writer.append({ type: 'turn/start', data: { turnId: 't2' } }), // a second open turn
    writer.append({ type: 'turn/end', data: { turnId: 't1' } }, { expectSeq: 2 }),
    writer.append({ type: 'turn/end', data: { turnId: 't1' } }, { expectSeq: 3 }), // no turn open
  ])
  assert.deepEqual(
    outcomes.map((o) => (o.status === 'fulfilled' ? o.value : o.reason.code)),
    [1, 'RULE', 2, 'RULE'],
  )
  await writer.close()
})

test('an event that cannot be encoded is refused alone, never with the appends grouped with it', async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  const sparse = []
  sparse[1] = { type: 'x-test/note', data: 'after a hole' }
  const outcomes = await Promise.allSettled([
    writer.append({ type: 'x-test/note', data: 'first' }),
    writer.append({ type: 'x-test/note', data: 'second' }),
    writer.appendBatch(sparse),
    writer.append({ type: 'x\ud800', data: {} }),
    writer.append({ type: 'x-test/note', data: 'third', ts: 1.5 }),
    // A member the store does not write: an option put in the event.
    writer.append({ type: 'x-test/note', data: 'guarded', expectSeq: 99 }),
    writer.appendBatch([{ type: 'x-test/note', data: 'numbered', seq: 42 }]),
    writer.append({ type: 'x-test/note', data: 'fourth' }),
  ])
  assert.deepEqual(
    outcomes.map((o) => (o.status === 'fulfilled' ? o.value : o.reason.code)),
    [1, 2, 'INVALID_EVENT', 'INVALID_EVENT', 'INVALID_EVENT', 'INVALID_EVENT', 'INVALID_EVENT', 3],
  )
  assert.match(outcomes[2].reason.message, /event 0 must be an object/)
  assert.match(outcomes[3].reason.message, /lone surrogate/)
  assert.match(outcomes[4].reason.message, /ts must be an integer/)
  assert.match(outcomes[5].reason.message, /unknown member "expectSeq".*an option: append\(event, \{ expectSeq \}\)/)
  assert.match(outcomes[6].reason.message, /event 0 \(x-test\/note\): unknown member "seq", an event is \{type, data, ts\?\}/)
  await writer.close()
  const { events } = await store.snapshot('s1')
  assert.deepEqual(events.map((event) => event.data), ['first', 'second', 'fourth'])
})

test('the addon decodes each append of a group alone, and pairs each outcome with its own append', async (t) => {
  const addon = require('../sessionlog.node')
  // The addon's completions do not keep the process alive (index.js does).
  const alive = setInterval(() => {}, 1000)
  t.after(() => clearInterval(alive))
  const store = await addon.openStore(path.join(tempDir(t), 'sessions'), true)
  await store.createSession({ id: 's1', cwd: '/w' }, false)
  let answered
  const answer = new Promise((resolve) => {
    answered = resolve
  })
  const writer = await store.openWriter('s1', false, true, null, (error, text) => answered([error, text]))
  // The second append is not a batch `[expectSeq, events]`: index.js never
  // sends one, and the addon refuses it alone.
  writer.appendGroup('[[null,[["x-test/note",null,1]]],[null,5],[null,[["x-test/note",null,2]]],[null,[["x-test/note",null,3]]]]')
  const [error, text] = await answer
  assert.equal(error, null)
  const outcomes = JSON.parse(text)
  assert.equal(outcomes[0], 1)
  assert.equal(outcomes[1].code, 'INVALID_EVENT')
  assert.match(outcomes[1].message, /append 1 of its group/)
  assert.deepEqual(outcomes.slice(2), [2, 3])
  writer.close()
})

test('a second close waits for the first, and gives its outcome', async (t) => {
  const folder = path.join(tempDir(t), 'sessions')
  const store = await Store.open(folder, { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  const appends = [1, 2, 3].map((n) => writer.append({ type: 'x-test/note', data: n }))
  const first = writer.close()
  await writer.close()
  // Read as the second close resolves, before anything else runs.
  const lines = fs.readFileSync(path.join(folder, 's1.jsonl'), 'utf8').split('\n').filter(Boolean)
  assert.equal(lines.length, 1 + 3, 'every append queued before is applied')
  const other = await store.openWriter('s1')
  await other.close()
  await first
  assert.deepEqual(await Promise.all(appends), [1, 2, 3])
})

test('a store opened by a relative path stays where it was opened after process.chdir', async (t) => {
  const folder = tempDir(t)
  const elsewhere = path.join(folder, 'elsewhere')
  fs.mkdirSync(elsewhere)
  const before = process.cwd()
  t.after(() => process.chdir(before))
  process.chdir(folder)
  const logs = await Store.open('sessions', { create: true })
  const database = await Store.open('x.db', { create: true })
  assert.equal(logs.location, path.join(fs.realpathSync(folder), 'sessions'))
  process.chdir(elsewhere)
  await logs.createSession({ id: 'two', cwd: '/w' })
  await database.createSession({ id: 'a', cwd: '/w' })
  assert.ok(fs.existsSync(path.join(folder, 'sessions', 'two.jsonl')))
  assert.ok(!fs.existsSync(path.join(elsewhere, 'sessions')))
  const writer = await database.openWriter('a')
  const absolute = await Store.open(path.join(folder, 'x.db'))
  await rejectsWith(absolute.openWriter('a'), 'LOCKED')
  assert.equal(await writer.append({ type: 'x-test/note', data: 1 }), 1)
  assert.equal(await writer.append({ type: 'x-test/note', data: 2 }), 2)
  await writer.close()
  // A text that reads as a URL is not a path: refused as the command line
  // refuses it, and no folder of that name is made.
  for (const mistyped of ['Postgres://user@localhost/db', 'postgres:/db', 'Postgresql:db']) {
    const refused = await Store.open(mistyped, { create: true }).then(
      () => null,
      (error) => error,
    )
    assert.ok(refused instanceof SessionlogError, `${mistyped} is refused`)
  }
  assert.deepEqual(
    fs.readdirSync(elsewhere).filter((name) => /^postgres/i.test(name)),
    [],
    'no folder is made of a mistyped URL',
  )
  // `..` is the file system's: through a symlink, as `sessionlog` reads it.
  fs.mkdirSync(path.join(elsewhere, 'real', 'sub'), { recursive: true })
  fs.symlinkSync(path.join(elsewhere, 'real', 'sub'), path.join(elsewhere, 'link'))
  await Store.open('link/../beside', { create: true })
  assert.ok(fs.existsSync(path.join(elsewhere, 'real', 'beside')))
})

test('options given as null are no options; the errors name the option as JavaScript spells it', async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  await Store.open(location, { create: true })
  const created = await Store.open(location, null)
  await created.createSession({ id: 's1', cwd: '/w' }, null)
  await created.createSession({ id: 's2', cwd: '/w' }, { durability: null })
  await (await created.openWriter('s2', { durability: null })).close()
  const writer = await created.openWriter('s1', { keepSnapshot: false })
  assert.equal(await writer.append({ type: 'x-test/note', data: 1 }, null), 1)
  const sealed = await rejectsWith(writer.seal({ key: 'junk' }), 'INVALID_ARGUMENT')
  assert.match(sealed.message, /^key: /)
  // A writer opened without the snapshot is a call the API cannot take,
  // not a damaged log.
  const request = await rejectsWith(writer.reviewRequestText({}), 'INVALID_ARGUMENT')
  assert.match(request.message, /keepSnapshot: false/)
  assert.doesNotMatch(request.message, /WriterOptions/)
  await rejectsWith(writer.append({ type: 'x-test/note', data: 1 }, 'fast'), 'INVALID_ARGUMENT')
  await writer.close()
  await rejectsWith(created.openWriter('s1', { sealKey: 'junk' }), 'INVALID_ARGUMENT').then((error) => {
    assert.match(error.message, /^sealKey: /)
  })
})

test('a member no call takes is refused, never dropped: a misspelt option would run the call otherwise', async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  const store = await Store.open(location, { create: true })
  const misspelt = await rejectsWith(store.createSession({ id: 's1', cwd: '/w', sandbox_mode: 'read-only' }), 'INVALID_ARGUMENT')
  assert.match(misspelt.message, /"sandbox_mode"/)
  assert.match(misspelt.message, /sandboxMode/)
  await rejectsWith(store.createSession({ id: 's1', cwd: '/w' }, { durabilty: 'buffered' }), 'INVALID_ARGUMENT')
  assert.deepEqual(await store.list(), [], 'nothing was created')
  await store.createSession({ id: 's1', cwd: '/w', sandboxMode: 'read-only' })
  const sealkey = await rejectsWith(store.openWriter('s1', { sealkey: 'k' }), 'INVALID_ARGUMENT')
  assert.match(sealkey.message, /"sealkey"/)
  await rejectsWith(store.fork('s1', 'c1', { promt: 'go' }), 'INVALID_ARGUMENT')
  await rejectsWith(store.project('s1', { At: 1 }), 'INVALID_ARGUMENT')
  await rejectsWith(Store.open(location, { crate: true }), 'INVALID_ARGUMENT')
  const writer = await store.openWriter('s1')
  await rejectsWith(writer.append({ type: 'x-test/note', data: 1 }, { expectseq: 1 }), 'INVALID_ARGUMENT')
  await rejectsWith(writer.seal({ keys: 'k' }), 'INVALID_ARGUMENT')
  await rejectsWith(writer.reviewRequest({}, { maxbytes: 10 }), 'INVALID_ARGUMENT')
  // None of them wrote anything.
  assert.equal(await writer.append({ type: 'x-test/note', data: 1 }, { expectSeq: 1 }), 1)
  await writer.close()
  const following = store.follow('s1', { fromseq: 2 })
  await assert.rejects(following.next(), (error) => error instanceof SessionlogError && error.code === 'INVALID_ARGUMENT')
})

test('a pending action JSON cannot write is INVALID_ACTION, as every failure a SessionlogError', async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  const cycle = { callId: 'c1', tool: 'shell', arguments: {} }
  cycle.arguments.self = cycle
  for (const pending of [{ callId: 'c1', tool: 'shell', arguments: { n: 10n } }, cycle]) {
    const refused = await rejectsWith(writer.reviewRequest(pending), 'INVALID_ACTION')
    assert.match(refused.message, /^the pending action cannot be written as JSON: /)
  }
  await writer.close()
})

for (const [backend, location] of backends) {
  test(`${backend}: switchPreset writes the preset's values and the preset, as one batch after what was queued`, async (t) => {
    const store = await Store.open(location(tempDir(t)), { create: true })
    await store.createSession({ id: 's1', cwd: '/w' })
    const writer = await store.openWriter('s1')
    const note = writer.append({ type: 'x-test/note', data: 1 })
    const switched = await writer.switchPreset('auto', { approval: 'never' })
    assert.equal(await note, 1)
    assert.deepEqual(switched, {
      session: 's1',
      preset: 'auto',
      seqs: [2, 3, 4],
      sandboxMode: 'danger-full-access',
      approvalPolicy: 'never',
    })
    const { events } = await store.snapshot('s1')
    assert.deepEqual(
      events.slice(1).map((event) => [event.type, event.data]),
      [
        ['sandbox/mode', { mode: 'danger-full-access' }],
        ['approval/policy', { policy: 'never' }],
        ['permission/preset', { preset: 'auto' }],
      ],
    )
    const projection = await store.project('s1')
    assert.equal(projection.preset, 'auto')
    assert.equal(projection.sandboxMode.effective, 'danger-full-access')
    assert.equal(projection.approvalPolicy.effective, 'never')
    // Full access is danger-full-access under `never`, as auto runs now:
    // only the preset is written.
    assert.deepEqual((await writer.switchPreset('full-access')).seqs, [5])
    assert.deepEqual(await writer.switchPreset('read-only', { expectSeq: 6 }).then((s) => s.seqs), [6, 7, 8])
    const conflict = await rejectsWith(writer.switchPreset('auto', { approval: 'ask', expectSeq: 3 }), 'CONFLICT')
    assert.equal(conflict.actual, 9)
    const bare = await rejectsWith(writer.switchPreset('auto'), 'INVALID_ARGUMENT')
    assert.match(bare.message, /approval/)
    await rejectsWith(writer.switchPreset('full-access', { approval: 'ask' }), 'INVALID_ARGUMENT')
    await rejectsWith(writer.switchPreset('root'), 'INVALID_ARGUMENT')
    await rejectsWith(writer.switchPreset(null), 'INVALID_ARGUMENT')
    assert.equal((await store.snapshot('s1')).events.length, 8, 'nothing written by a refused switch')
    await writer.close()
    await rejectsWith(writer.switchPreset('read-only'), 'CLOSED')
  })
}

test('a burst of appends longer than one JavaScript string is handed over in parts; a result no string holds is TOO_LARGE', { timeout: 120_000 }, async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1', { durability: 'buffered' })
  await writer.appendBatch([
    { type: 'turn/start', data: { turnId: 't' } },
    { type: 'step/start', data: { stepId: 's', turnId: 't' } },
    {
      type: 'request/header',
      data: { provider: 'p', model: 'm', approvalPolicy: 'ask', sandboxMode: 'workspace-write', tools: [{ name: 'sh', description: 'd', parameters: {} }] },
    },
  ])
  // 36 appends of 15 MiB: 540 MiB in all, past the longest string (512 MiB).
  // Messages of the person, each of which the reviewer is shown.
  const text = 'x'.repeat(15 * 1024 * 1024)
  const message = { type: 'message', data: { role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text }] } }
  const appends = Array.from({ length: 36 }, () => writer.append(message))
  const seqs = await Promise.all(appends)
  assert.deepEqual(seqs, Array.from({ length: 36 }, (_, index) => index + 4))
  const pending = { callId: 'c', stepId: 's', name: 'sh', arguments: {} }
  const request = await rejectsWith(writer.reviewRequestText(pending, { maxBytes: 2 ** 40 }), 'TOO_LARGE')
  assert.match(request.message, /^the review request of session s1 is \d+ bytes, more than one JavaScript string holds/)
  // The writer goes on.
  assert.equal(await writer.append({ type: 'x-test/note', data: 1 }), 40)
  await writer.close()
  const snapshot = await rejectsWith(store.snapshot('s1'), 'TOO_LARGE')
  assert.match(snapshot.message, /^session s1 is \d+ bytes of JSON, .*follow\(\)/)
})

test('LOCKED across two Node processes', { timeout: 60_000 }, async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  const store = await Store.open(location, { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const holder = spawn(
    process.execPath,
    [
      '-e',
      `const { Store } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       (async () => {
         const store = await Store.open(${JSON.stringify(location)});
         const writer = await store.openWriter('s1');
         await writer.append({ type: 'turn/start', data: { turnId: 't1' } });
         process.stdout.write('holding\\n');
         process.stdin.once('data', async () => { await writer.close(); process.exit(0) });
       })().catch((error) => { console.error(error); process.exit(1) });`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  )
  t.after(() => holder.kill())
  await new Promise((resolve, reject) => {
    holder.stdout.once('data', resolve)
    holder.once('exit', (code) => reject(new Error(`the holder exited with ${code}`)))
  })
  const locked = await rejectsWith(store.openWriter('s1'), 'LOCKED')
  assert.match(locked.message, /s1/)
  holder.stdin.write('release\n')
  const code = await new Promise((resolve) => holder.once('exit', resolve))
  assert.equal(code, 0)
  const writer = await store.openWriter('s1')
  assert.equal(await writer.append({ type: 'turn/end', data: { turnId: 't1' } }), 2)
  await writer.close()
})

test('an append in flight keeps the process alive, an idle open writer does not', { timeout: 60_000 }, async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  const store = await Store.open(location, { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  // Nothing else holds the event loop: the append, not awaited, must still
  // be written and resolved, and then the process must end on its own with
  // the writer left open.
  const child = spawnSync(
    process.execPath,
    [
      '-e',
      `const { Store } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       Store.open(${JSON.stringify(location)})
         .then((store) => store.openWriter('s1'))
         .then((writer) => {
           writer.append({ type: 'turn/start', data: { turnId: 't1' } }).then((seq) => process.stdout.write('appended ' + seq + '\\n'))
         })`,
    ],
    { encoding: 'utf8', timeout: 30_000 },
  )
  assert.equal(child.signal, null, 'the process did not end on its own')
  assert.equal(child.status, 0, child.stderr)
  assert.equal(child.stdout, 'appended 1\n')
  const snap = await store.snapshot('s1')
  assert.deepEqual(
    snap.events.map((event) => [event.seq, event.type]),
    [[1, 'turn/start']],
  )
})

test('a writer collected without close releases its lock', { timeout: 60_000 }, async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  const store = await Store.open(location, { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const child = spawnSync(
    process.execPath,
    [
      '--expose-gc',
      '-e',
      `const { Store } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       (async () => {
         const store = await Store.open(${JSON.stringify(location)});
         await (async () => {
           const writer = await store.openWriter('s1');
           await writer.append({ type: 'turn/start', data: { turnId: 't1' } });
         })();
         const held = await store.openWriter('s1').then(() => 'open', (error) => error.code);
         for (let round = 0; round < 20; round += 1) {
           global.gc();
           await new Promise((resolve) => setTimeout(resolve, 50));
         }
         const writer = await store.openWriter('s1');
         const seq = await writer.append({ type: 'turn/end', data: { turnId: 't1' } });
         await writer.close();
         process.stdout.write(held + ' ' + seq + '\\n');
       })().catch((error) => { console.error(error); process.exit(1) });`,
    ],
    { encoding: 'utf8', timeout: 30_000 },
  )
  assert.equal(child.status, 0, child.stderr)
  assert.equal(child.stdout, 'LOCKED 2\n')
})

test('SessionlogError is exported and is an Error', () => {
  const error = new SessionlogError('IO', 'boom', { path: '/x' })
  assert.ok(error instanceof Error)
  assert.equal(error.code, 'IO')
  assert.equal(error.path, '/x')
})

test('a panic of the addon is an error, and the process lives on', async () => {
  const addon = require('../sessionlog.node')
  const failure = (error) => JSON.parse(error.message)
  assert.throws(
    () => addon.panicForTests(),
    (error) => failure(error).code === 'PANIC' && /for the tests/.test(failure(error).message),
  )
  await assert.rejects(addon.panicOnPoolForTests(), (error) => failure(error).code === 'PANIC')
  // Still alive, and still working.
  assert.deepEqual(parseReviewResult({ blocks: [{ type: 'text', text: '{"risk":"low","decision":"allow"}' }], stop: 'stop' }), {
    risk: 'low',
    decision: 'allow',
  })
})
