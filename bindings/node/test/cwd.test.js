// A store opened by a relative path, in a process that then changes its
// working folder (a runtime running a tool there): its writer goes on
// writing the same session, and finds the log's name where it opened it.
// A file of its own, since the working folder is the process's.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')

const { Store } = require('..')
const { tempDir } = require('./support')

for (const [backend, name] of [
  ['JSONL', 'sessions'],
  ['SQLite', 'sessions.db'],
]) {
  test(`${backend}: a writer of a store opened by a relative path outlives a change of working folder`, async (t) => {
    const folder = tempDir(t)
    const elsewhere = tempDir(t)
    const before = process.cwd()
    t.after(() => process.chdir(before))
    process.chdir(folder)
    const store = await Store.open(name, { create: true })
    await store.createSession({ id: 'w1', cwd: '/work/app' })
    const writer = await store.openWriter('w1', { durability: 'fsync' })
    assert.equal(await writer.append({ type: 'x-test/note', data: { n: 1 } }), 1)
    process.chdir(elsewhere)
    assert.equal(await writer.append({ type: 'x-test/note', data: { n: 2 } }), 2)
    await writer.close()
    const reread = await Store.open(`${folder}/${name}`)
    const snapshot = await reread.snapshot('w1')
    assert.deepEqual(snapshot.events.map((event) => event.seq), [1, 2])
  })
}
