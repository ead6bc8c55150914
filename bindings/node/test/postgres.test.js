// A PostgreSQL store from Node: `Store.open("postgres://…")` on the server
// SESSIONLOG_TEST_PG names (`tools/pg-test-server.sh start`), with the same
// API as the other backends. Without the variable the test is skipped with
// a note, and fails under CI, where .ci/run starts the server.
'use strict'

const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
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

test('a server that ends the connections: CONNECTION_LOST, and follow reads on', { timeout: 60_000 }, async (t) => {
  if (!server) {
    assert.ok(!process.env.CI, 'SESSIONLOG_TEST_PG is unset under CI: .ci/run starts the test server')
    t.skip('SESSIONLOG_TEST_PG is unset; start a server with tools/pg-test-server.sh start')
    return
  }
  const schema = `node_lost_${process.pid}_${Date.now() % 1000000000}`
  const name = `${schema}_reader`
  const writing = await Store.open(`${server}?schema=${schema}`, { create: true })
  const reading = await Store.open(`${server}?schema=${schema}&application_name=${name}`)
  await writing.createSession({ id: 'f1', cwd: '/work/app' })
  const writer = await writing.openWriter('f1')
  await writer.append({ type: 'x-test/note', data: { n: 1 } })

  const controller = new AbortController()
  // A failed assertion must not leave the follow (and the process) running.
  t.after(() => controller.abort())
  const seen = []
  let wake = () => {}
  const followed = (async () => {
    for await (const event of reading.follow('f1', { signal: controller.signal })) {
      seen.push(event.seq)
      wake()
    }
  })()
  const waitFor = async (count) => {
    const deadline = Date.now() + 20_000
    while (seen.length < count) {
      assert.ok(Date.now() < deadline, `follow delivered ${JSON.stringify(seen)}, not ${count} events`)
      await new Promise((resolve) => {
        wake = resolve
        setTimeout(resolve, 200)
      })
    }
  }
  await waitFor(1)

  // Every connection of the reading stores ends, as in a restart.
  const probing = await Store.open(`${server}?schema=${schema}&application_name=${name}_probe`)
  assert.equal((await probing.snapshot('f1')).events.length, 1)
  const psql = ['psql', '/usr/lib/postgresql/15/bin/psql'].find((candidate) => {
    return spawnSync(candidate, ['--version']).status === 0
  })
  assert.ok(psql, 'no psql to end the connections with')
  const ended = spawnSync(
    psql,
    [server, '-Atc', `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE '${name}%'`],
    { encoding: 'utf8' },
  )
  assert.equal(ended.status, 0, ended.stderr)
  assert.ok(Number(ended.stdout.trim()) >= 2, `not both connections ended: ${ended.stdout}`)

  // The call that meets the ended connection says so; the next connects again.
  const lost = await rejectsWith(probing.snapshot('f1'), 'CONNECTION_LOST')
  assert.ok(!lost.message.includes('password'), lost.message)
  assert.equal((await probing.snapshot('f1')).events.length, 1)

  await writer.append({ type: 'x-test/note', data: { n: 2 } })
  await waitFor(2)
  assert.deepEqual(seen, [1, 2])
  controller.abort()
  await followed
  await writer.close()
})
