// A PostgreSQL store from Node: `Store.open("postgres://…")` on the server
// SESSIONLOG_TEST_PG names (`tools/pg-test-server.sh start`), with the same
// API as the other backends. Without the variable the test is skipped with
// a note, and fails under CI, where .ci/run starts the server.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')

const { Store } = require('..')
const { rejectsWith, cli } = require('./support')

const server = process.env.SESSIONLOG_TEST_PG

test('a postgres:// store opens, appends durably, locks its writer and reads back', async (t) => {
  if (!server) {
    assert.ok(!process.env.CI, 'SESSIONLOG_TEST_PG is unset under CI: .ci/run starts the test server')
    t.skip('SESSIONLOG_TEST_PG is unset; start a server with tools/pg-test-server.sh start')
    return
  }
  const schema = `node_${process.pid}_${Date.now() % 1000000000}`
  const location = `${server}?schema=${schema}`
  await rejectsWith(Store.open(location), 'IO')

  const store = await Store.open(location, { create: true })
  await store.createSession({ id: 'n1', cwd: '/work/app' })
  const writer = await store.openWriter('n1', { durability: 'fsync' })
  await rejectsWith(store.openWriter('n1'), 'LOCKED')
  await writer.append({ type: 'x-test/note', data: { n: 1 } })
  await writer.append({ type: 'x-test/note', data: { n: 2 } })
  await writer.close()

  const reopened = await Store.open(location)
  const snap = await reopened.snapshot('n1')
  assert.deepEqual(
    snap.events.map((event) => [event.seq, event.type, event.data.n]),
    [
      [1, 'x-test/note', 1],
      [2, 'x-test/note', 2],
    ],
  )
  const exported = cli(['export', location, '--session', 'n1'])
  assert.equal(exported.status, 0, exported.stderr)
  assert.equal(exported.stdout.trim().split('\n').length, 3, 'the header and both events')
})
