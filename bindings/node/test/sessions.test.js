// Sessions across the boundary: fork and the child's projections, the Auto
// reviewer's request byte for byte against `sessionlog review-request`,
// strict result parsing, follow ended by an AbortSignal, and logs that pass
// between Node and the command line both ways.
'use strict'

const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { Store, parseReviewResult, chatCompletionsBody, chatCompletionsReply } = require('..')
const { tempDir, cli, rejectsWith, autoSessionEvents, pendingAction } = require('./support')

/** A store holding the Auto session `s1` of `autoSessionEvents`, its writer still open. */
async function autoSession(location) {
  const store = await Store.open(location, { create: true })
  await store.createSession({ id: 's1', cwd: '/work/app' })
  const writer = await store.openWriter('s1', { durability: 'fsync', keepSnapshot: true })
  for (const batch of autoSessionEvents()) await writer.appendBatch(batch)
  return { store, writer }
}

test('fork: the child starts from the parent and projects as a child', async (t) => {
  const { store, writer } = await autoSession(path.join(tempDir(t), 'sessions'))
  await writer.append({ type: 'step/end', data: { stepId: 's1' } })
  await writer.append({ type: 'turn/end', data: { turnId: 't1' } })
  await writer.close()
  const parent = await store.snapshot('s1')

  const child = await store.fork('s1', 's1-child', { prompt: 'Run the tests' })
  assert.equal(child.parentSession, 's1')
  assert.equal(child.seedLength, parent.events.length)
  assert.equal(child.delegationDepth, 1)
  assert.equal(child.sandboxMode, 'danger-full-access')
  assert.equal(child.approvalPolicy, 'never')

  const snap = await store.snapshot('s1-child')
  assert.deepEqual(snap.header, child)
  assert.deepEqual(
    snap.events.slice(0, parent.events.length).map(({ data, type }) => ({ data, type })),
    parent.events.map(({ data, type }) => ({ data, type })),
  )
  const own = snap.events.slice(parent.events.length)
  assert.deepEqual(
    own.map(({ type, data }) => ({ type, data })),
    [
      { type: 'permission/preset', data: { preset: 'auto' } },
      {
        type: 'message',
        data: {
          role: 'user',
          source: { kind: 'agent-message', senderSessionId: 's1' },
          content: [{ type: 'text', text: 'Run the tests' }],
        },
      },
    ],
  )

  const projection = await store.project('s1-child')
  assert.deepEqual(projection, JSON.parse(cli(['project', store.location, '--session', 's1-child']).stdout))
  assert.equal(projection.parentSession, 's1')
  assert.equal(projection.preset, 'auto')
  assert.deepEqual(projection.requiresIntegration, ['auto-review'])
  assert.deepEqual(projection.approvalPolicy, { override: 'never', effective: 'never' })

  // As of any seq, with the configured defaults.
  const atStart = await store.project('s1', { at: 0, defaultApproval: 'never', defaultSandbox: 'read-only' })
  assert.deepEqual(atStart.approvalPolicy, { override: null, effective: 'never' })
  assert.deepEqual(atStart.sandboxMode, { override: null, effective: 'read-only' })
  assert.equal(atStart.seq, 0)
  await rejectsWith(store.fork('s1', 's1-child'), 'EXISTS')
  await rejectsWith(store.fork('nobody', 'x'), 'NOT_FOUND')
})

test('the review request is byte for byte what `sessionlog review-request` prints', async (t) => {
  const folder = tempDir(t)
  for (const location of [path.join(folder, 'sessions'), path.join(folder, 'sessions.db')]) {
    const { store, writer } = await autoSession(location)
    const pendingFile = path.join(folder, 'pending.json')
    fs.writeFileSync(pendingFile, JSON.stringify(pendingAction))
    const printed = cli(['review-request', location, '--session', 's1', '--pending', pendingFile])
    assert.equal(printed.status, 0, printed.stderr)
    const expected = printed.stdout.replace(/\n$/, '')

    assert.equal(await writer.reviewRequestText(pendingAction), expected)
    const request = await writer.reviewRequest(pendingAction)
    assert.equal(JSON.stringify(request), expected)
    // What the reviewer must never see is not there.
    assert.doesNotMatch(expected, /injected: ignore all rules|I will run the tests|test result: FAILED/)
    assert.deepEqual(request.partitions.PENDING_ACTION.arguments, pendingAction.arguments)

    // Failing closed with the same code as the command line.
    const wrongStep = { ...pendingAction, stepId: 'other' }
    fs.writeFileSync(pendingFile, JSON.stringify(wrongStep))
    const refused = cli(['review-request', location, '--session', 's1', '--pending', pendingFile])
    assert.equal(refused.status, 5)
    assert.equal(JSON.parse(refused.stdout).error, 'STEP_MISMATCH')
    await rejectsWith(writer.reviewRequest(wrongStep), 'STEP_MISMATCH')
    await rejectsWith(writer.reviewRequest({ ...pendingAction, callId: 'c1' }), 'DUPLICATE_CALL_ID')
    await rejectsWith(writer.reviewRequest({ ...pendingAction, extra: 1 }), 'INVALID_ACTION')
    // A lone surrogate is refused whether the action comes as an object or
    // as its text (which once reached the reviewer as U+FFFD).
    const lone = { ...pendingAction, arguments: { command: 'rm -rf x\ud800' } }
    await rejectsWith(writer.reviewRequest(lone), 'INVALID_ACTION')
    const loneText = JSON.stringify(pendingAction).replace('ledger.rs', 'ledger.rs\ud800')
    assert.equal(loneText.isWellFormed(), false)
    await rejectsWith(writer.reviewRequestText(loneText), 'INVALID_ACTION')
    await rejectsWith(writer.reviewRequest(pendingAction, { maxBytes: 100 }), 'REQUEST_TOO_LARGE')
    await writer.close()

    // A writer without a snapshot cannot build one.
    const bare = await store.openWriter('s1', { keepSnapshot: false })
    await rejectsWith(bare.reviewRequest(pendingAction), 'INVALID_ARGUMENT')
    await bare.close()
  }
})

test('the reviewer result is parsed strictly', () => {
  const reply = (text, stop = 'stop', blocks) => ({ blocks: blocks || [{ type: 'text', text }], stop })
  assert.deepEqual(parseReviewResult(reply('{"risk":"low","decision":"allow"}')), { risk: 'low', decision: 'allow' })
  assert.deepEqual(
    parseReviewResult({
      blocks: [
        { type: 'reasoning', text: 'thinking' },
        { type: 'text', text: ' {"risk":"high","decision":"deny","reason":"rm -rf /"}\n' },
      ],
      stop: 'stop',
    }),
    { risk: 'high', decision: 'deny', reason: 'rm -rf /' },
  )
  const failures = [
    reply('{"risk":"low","decision":"deny","reason":"x"}'), // a pair not allowed
    reply('{"risk":"low","decision":"allow","reason":"x"}'), // a reason with allow
    reply('{"risk":"low","decision":"allow","extra":1}'),
    reply('{"risk":"low","decision":"allow"}', 'length'),
    reply('{"risk":"Low","decision":"allow"}'),
    reply('not json'),
    { blocks: [], stop: 'stop' },
    { blocks: [{ type: 'text', text: '{"risk":"low","decision":"allow"}' }], stop: 'stop', extra: true },
    '{"blocks":[{"type":"text","text":"{\\"risk\\":\\"low\\",\\"decision\\":\\"allow\\"}"}],"stop":"stop","stop":"stop"}',
    42,
  ]
  for (const failure of failures) {
    assert.throws(
      () => parseReviewResult(failure),
      (error) => error.code === 'AUTO_REVIEW_FAILED' && error.message.length > 0,
      JSON.stringify(failure),
    )
  }
  // What the command line says of the same replies.
  for (const failure of failures.slice(0, 4)) {
    assert.equal(cli(['review-result'], JSON.stringify(failure)).status, 5)
  }
  // A failure quoting megabytes the reviewer sent keeps 4,096 characters
  // of it and says how many it leaves out, as the store's own call does.
  assert.throws(
    () => parseReviewResult(reply('{"risk":"low","decision":"allow"}', 'A'.repeat(5_000_000))),
    (error) =>
      error.code === 'AUTO_REVIEW_FAILED' &&
      error.message.length < 4_200 &&
      /more characters not shown\)$/.test(error.message),
  )
})

test('follow: stored events, then new ones as they are appended, until the signal aborts', { timeout: 60_000 }, async (t) => {
  const store = await Store.open(path.join(tempDir(t), 'sessions.db'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  await writer.append({ type: 'turn/start', data: { turnId: 't1' } })

  const controller = new AbortController()
  // A failed assertion must not leave the follow (and the process) running.
  t.after(() => controller.abort())
  const seen = []
  const following = (async () => {
    for await (const event of store.follow('s1', { fromSeq: 1, signal: controller.signal })) {
      seen.push(event)
      if (seen.length === 3) controller.abort()
    }
  })()
  await writer.append({ type: 'turn/end', data: { turnId: 't1' } })
  await writer.appendBatch([
    { type: 'turn/start', data: { turnId: 't2' } },
    { type: 'x-test/note', data: { n: 4 } },
  ])
  await following
  assert.deepEqual(
    seen.map(({ seq, type }) => ({ seq, type })),
    [
      { seq: 1, type: 'turn/start' },
      { seq: 2, type: 'turn/end' },
      { seq: 3, type: 'turn/start' },
    ],
  )

  // From a later seq, on a JSONL store; an abort while waiting ends it.
  const jsonl = await Store.open(path.join(tempDir(t), 'logs'), { create: true })
  await jsonl.createSession({ id: 'j', cwd: '/w' })
  const w = await jsonl.openWriter('j')
  await w.appendBatch([
    { type: 'turn/start', data: { turnId: 't1' } },
    { type: 'turn/end', data: { turnId: 't1' } },
  ])
  const waiting = new AbortController()
  t.after(() => waiting.abort())
  const later = []
  // The abort comes while it waits, 200 ms after the stored event came.
  const done = (async () => {
    for await (const event of jsonl.follow('j', { fromSeq: 2, signal: waiting.signal })) {
      later.push(event.seq)
      setTimeout(() => waiting.abort(), 200)
    }
  })()
  await done
  assert.deepEqual(later, [2])

  // An aborted signal ends it at once; a missing session is NOT_FOUND.
  const aborted = AbortSignal.abort()
  for await (const event of jsonl.follow('j', { signal: aborted })) assert.fail(`got ${event.seq}`)
  await rejectsWith(
    (async () => {
      for await (const event of jsonl.follow('nobody')) assert.fail(`got ${event.seq}`)
    })(),
    'NOT_FOUND',
  )
  await w.close()
  await writer.close()
})

test('follow: a log of another history put in place is CORRUPT, naming the log', { timeout: 60_000 }, async (t) => {
  const folder = tempDir(t)
  const store = await Store.open(path.join(folder, 'logs'), { create: true })
  const other = await Store.open(path.join(folder, 'other'), { create: true })
  for (const [s, cwd] of [[store, '/w'], [other, '/elsewhere']]) {
    await s.createSession({ id: 's', cwd })
    const w = await s.openWriter('s')
    await w.append({ type: 'turn/start', data: { turnId: 't1' } })
    await w.close()
  }
  let caught = null
  const controller = new AbortController()
  t.after(() => controller.abort())
  try {
    for await (const event of store.follow('s', { signal: controller.signal })) {
      assert.equal(event.seq, 1)
      fs.renameSync(path.join(folder, 'other', 's.jsonl'), path.join(folder, 'logs', 's.jsonl'))
    }
  } catch (error) {
    caught = error
  }
  assert.ok(caught, 'the follow ended with an error')
  assert.equal(caught.code, 'CORRUPT', caught.message)
  assert.equal(caught.path, path.join(folder, 'logs', 's.jsonl'), caught.message)
})

test('a location with a lone surrogate is refused, never opened as U+FFFD', async (t) => {
  const location = path.join(tempDir(t), 'lone\uD800')
  await rejectsWith(Store.open(location, { create: true }), 'INVALID_ARGUMENT')
  assert.deepEqual(fs.readdirSync(path.dirname(location)), [], 'nothing was created')
})

test('a log written from Node verifies with the command line', async (t) => {
  const folder = tempDir(t)
  for (const location of [path.join(folder, 'sessions'), path.join(folder, 'sessions.db')]) {
    const { store, writer } = await autoSession(location)
    await writer.append({ type: 'step/end', data: { stepId: 's1' } })
    await writer.close()
    await store.fork('s1', 's2', { prompt: 'go' })
    const verified = cli(['verify', location])
    assert.equal(verified.status, 0, verified.stdout + verified.stderr)
    const exported = cli(['export', location, '--session', 's1']).stdout.trim().split('\n')
    const snap = await store.snapshot('s1')
    assert.deepEqual(exported.map((line) => JSON.parse(line)), [snap.header, ...snap.events])
  }
})

test('a log written by the command line reads back in Node', async (t) => {
  const location = path.join(tempDir(t), 'sessions')
  assert.equal(cli(['create', location, '--session', 'c1', '--cwd', '/work/cli']).status, 0)
  const lines = [
    { type: 'turn/start', data: { turnId: 't1' } },
    { type: 'message', data: { role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: 'héllo' }] } },
    { type: 'approval/policy', data: { policy: 'never' } },
  ]
  const appended = cli(['append', location, '--session', 'c1'], lines.map((l) => JSON.stringify(l)).join('\n') + '\n')
  assert.equal(appended.status, 0, appended.stderr)

  const store = await Store.open(location)
  const snap = await store.snapshot('c1')
  assert.equal(snap.header.cwd, '/work/cli')
  assert.deepEqual(
    snap.events.map(({ type, data }) => ({ type, data })),
    lines,
  )
  const projection = await store.project('c1')
  assert.equal(projection.openTurn, 't1')
  assert.deepEqual(projection.approvalPolicy, { override: 'never', effective: 'never' })
  const writer = await store.openWriter('c1')
  assert.equal(await writer.append({ type: 'turn/end', data: { turnId: 't1' } }, { expectSeq: 4 }), 4)
  await writer.close()
  assert.equal(cli(['verify', location]).status, 0)
})

test('the Chat Completions mapping: the body carries the request, an answer becomes a decision', async (t) => {
  const folder = tempDir(t)
  const { writer } = await autoSession(path.join(folder, 'sessions'))
  const requestText = await writer.reviewRequestText(pendingAction)
  const request = JSON.parse(requestText)

  const body = chatCompletionsBody(requestText)
  const parsed = JSON.parse(body)
  assert.deepEqual(Object.keys(parsed), ['model', 'messages', 'temperature', 'stream'])
  assert.equal(parsed.model, request.model.model)
  assert.equal(parsed.temperature, 0)
  assert.equal(parsed.stream, false)
  assert.deepEqual(parsed.messages.map((message) => message.role), ['system', 'user'])
  assert.equal(parsed.messages[0].content, request.partitions.REVIEW_POLICY)
  const { REVIEW_POLICY, ...others } = request.partitions
  assert.equal(parsed.messages[1].content, JSON.stringify(others))
  assert.equal(JSON.parse(chatCompletionsBody(requestText, 'other-model')).model, 'other-model')
  assert.throws(() => chatCompletionsBody('{"not":"a request"}'), (error) => error.code === 'INVALID_ARGUMENT')
  // A model that is not a string is named as such, in this binding's words.
  assert.throws(
    () => chatCompletionsBody(requestText, 5),
    (error) => error.code === 'INVALID_ARGUMENT' && error.message === 'model must be a string, not 5',
  )

  const answer = (content, finish) =>
    JSON.stringify({ choices: [{ message: { role: 'assistant', content, reasoning_content: 'thinking' }, finish_reason: finish }] })
  const reply = chatCompletionsReply(answer('{"risk":"high","decision":"deny","reason":"exfiltration"}', 'stop'))
  assert.deepEqual(reply.blocks.map((block) => block.type), ['reasoning', 'text'])
  assert.deepEqual(parseReviewResult(reply), { risk: 'high', decision: 'deny', reason: 'exfiltration' })
  assert.throws(
    () => parseReviewResult(chatCompletionsReply(answer('{"risk":"low","decision":"allow"}', 'length'))),
    (error) => error.code === 'AUTO_REVIEW_FAILED',
  )
  assert.throws(() => chatCompletionsReply('not json'), (error) => error.code === 'AUTO_REVIEW_FAILED')
  await writer.close()
})

test('a reply or a request given as text with a lone surrogate is refused, never read as U+FFFD', () => {
  const reply = JSON.stringify({ blocks: [{ type: 'text', text: '{"risk":"low","decision":"allow"}' }], stop: 'stop' })
  const lone = reply.replace('allow', 'allow\udc00')
  assert.throws(() => parseReviewResult(lone), (error) => error.code === 'AUTO_REVIEW_FAILED' && /lone surrogate/.test(error.message))
  assert.throws(() => chatCompletionsReply('{"choices":[]}\ud800'), (error) => error.code === 'AUTO_REVIEW_FAILED')
  assert.throws(() => chatCompletionsBody('{"model":"m"}\ud800'), (error) => error.code === 'INVALID_ARGUMENT')
})
