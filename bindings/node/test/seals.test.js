// Seals from Node: a writer opened with a seal key seals every turn, an
// explicit seal, the head as an anchor, and what the command line's verify
// makes of them (with the key trusted, with another key, after an edit).
'use strict'

const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { Store } = require('..')
const { cli, tempDir, rejectsWith } = require('./support')

const backends = [
  ['JSONL', (folder) => path.join(folder, 'sessions')],
  ['SQLite', (folder) => path.join(folder, 'sessions.db')],
]

function keygen(folder, name) {
  const file = path.join(folder, name)
  const made = cli(['keygen', file])
  assert.equal(made.status, 0, made.stderr)
  return { file, text: fs.readFileSync(file, 'utf8'), pub: `${file}.pub` }
}

for (const [backend, location] of backends) {
  test(`${backend}: a writer with a seal key seals each turn, seal() seals now, head is an anchor`, async (t) => {
    const folder = tempDir(t)
    const key = keygen(folder, 'runtime.key')
    const other = keygen(folder, 'other.key')
    const where = location(folder)
    const store = await Store.open(where, { create: true })
    await store.createSession({ id: 's1', cwd: '/w' })
    const writer = await store.openWriter('s1', { sealKey: key.text })
    assert.equal(await writer.append({ type: 'turn/start', data: { turnId: 't1' } }), 1)
    assert.equal(await writer.append({ type: 'turn/end', data: { turnId: 't1' } }), 2)
    // The turn's seal took seq 3, so the next event is 4.
    assert.equal(await writer.append({ type: 'turn/start', data: { turnId: 't2' } }, { expectSeq: 4 }), 4)
    assert.equal(await writer.seal({ key: key.text }), 5)
    await writer.close()

    const snap = await store.snapshot('s1')
    const seals = snap.events.filter((event) => event.type === 'seal')
    assert.deepEqual(
      seals.map(({ seq, data }) => [seq, data.throughSeq, data.key]),
      [
        [3, 2, fs.readFileSync(key.pub, 'utf8').trim()],
        [5, 4, fs.readFileSync(key.pub, 'utf8').trim()],
      ],
    )
    const head = await store.head('s1')
    assert.equal(head.session, 's1')
    assert.equal(head.seq, 5)
    assert.match(head.chain, /^sha256:[0-9a-f]{64}$/)
    const anchors = path.join(folder, 'anchors.jsonl')
    fs.writeFileSync(anchors, cli(['head', where]).stdout)
    assert.deepEqual(JSON.parse(fs.readFileSync(anchors, 'utf8')), head)

    const trusted = cli(['verify', where, '--trust', key.pub, '--require-sealed', '--anchor', anchors])
    assert.equal(trusted.status, 0, trusted.stdout + trusted.stderr)
    const untrusted = cli(['verify', where, '--trust', other.pub])
    assert.equal(untrusted.status, 7, untrusted.stdout)

    // An unsealed event after the last seal fails --require-sealed.
    const more = await store.openWriter('s1')
    await more.append({ type: 'turn/end', data: { turnId: 't2' } })
    await more.close()
    assert.equal(cli(['verify', where, '--require-sealed']).status, 7)
    assert.equal(cli(['verify', where, '--anchor', anchors]).status, 0)
  })
}

test('a key that is not a key file is refused without quoting it', async (t) => {
  const folder = tempDir(t)
  const key = keygen(folder, 'runtime.key')
  const store = await Store.open(path.join(folder, 'sessions'), { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const damaged = key.text.slice(0, -3) + '\n'
  const error = await rejectsWith(store.openWriter('s1', { sealKey: damaged }), 'INVALID_ARGUMENT')
  assert.ok(!error.message.includes(damaged.slice(20, 40)), error.message)
  await rejectsWith(store.openWriter('s1', { sealKey: 42 }), 'INVALID_ARGUMENT')
  const writer = await store.openWriter('s1')
  await rejectsWith(writer.seal({ key: fs.readFileSync(`${key.file}.pub`, 'utf8') }), 'INVALID_ARGUMENT')
  // Nothing was written by the refused seal; an unsigned one is seq 1.
  assert.equal(await writer.seal(), 1)
  await writer.close()
})

/** CRC-32 (IEEE) of the session id followed by a record's body, as the format signs a line. */
function crc32(text) {
  let crc = 0xffffffff
  for (const byte of Buffer.from(text, 'utf8')) {
    crc ^= byte
    for (let bit = 0; bit < 8; bit += 1) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1
  }
  return ((crc ^ 0xffffffff) >>> 0).toString(16).padStart(8, '0')
}

test('a record edited under a seal, its CRC recomputed, is refused with SEAL', async (t) => {
  const folder = tempDir(t)
  const where = path.join(folder, 'sessions')
  const store = await Store.open(where, { create: true })
  await store.createSession({ id: 's1', cwd: '/w' })
  const writer = await store.openWriter('s1')
  await writer.append({ type: 'x-note/text', data: { text: 'approved by alice' } })
  await writer.seal()
  await writer.close()
  const log = path.join(where, 's1.jsonl')
  const lines = fs.readFileSync(log, 'utf8').split('\n')
  const body = lines[1].slice(0, lines[1].lastIndexOf(',"crc":')).replace('alice', 'mallory')
  lines[1] = `${body},"crc":"${crc32('s1' + body)}"}`
  fs.writeFileSync(log, lines.join('\n'))
  const verdict = cli(['verify', log])
  assert.equal(verdict.status, 7, verdict.stdout + verdict.stderr)
  assert.match(verdict.stdout, /seq 2/)
  const error = await rejectsWith(store.openWriter('s1'), 'SEAL')
  assert.equal(error.seq, 2)
  await rejectsWith(store.project('s1'), 'SEAL')
})
