// The Node.js binding against the Rust API on the same disk, in the same
// run: durable appends one at a time, 10,000 buffered appends, and the
// snapshot of a 100k-event session. The Rust side is the `baseline` example
// (bench/baseline.rs); the two sides alternate round by round so that a
// disk whose speed drifts weighs on both alike, and each ratio is taken
// from the medians.
//
//   npm run bench                                  (or: node bench/bench.js)
//   SESSIONLOG_BENCH_DIR=/mnt/disk npm run bench    another disk
//   SESSIONLOG_BENCH_ROUNDS=7 npm run bench         more rounds (default 5)
//
// Targets: durable append from Node >= 0.8x Rust, both one at a time;
// 10,000 buffered appends >= 0.5x Rust (issued together, as a bulk import
// makes them, against Rust appending one at a time; the one-at-a-time Node
// figure is printed too); snapshot <= 2x (Rust snapshot + JSON.parse of the
// same bytes).
'use strict'

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const { Store } = require('..')

const workspace = path.resolve(__dirname, '..', '..', '..')
const rounds = Number(process.env.SESSIONLOG_BENCH_ROUNDS || 5)
const benchDir = process.env.SESSIONLOG_BENCH_DIR || os.tmpdir()
const DURABLE_APPENDS = 1000
const BUFFERED_APPENDS = 10000
const SNAPSHOT_EVENTS = 100000

function buildBaseline() {
  const built = spawnSync(
    'cargo',
    ['build', '--release', '-p', 'sessionlog-node', '--example', 'baseline', '--message-format=json-render-diagnostics'],
    { cwd: workspace, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 },
  )
  if (built.status !== 0) throw new Error('cargo build of the baseline failed')
  for (const line of built.stdout.split('\n')) {
    if (!line.startsWith('{')) continue
    const message = JSON.parse(line)
    if (message.reason === 'compiler-artifact' && message.target.name === 'baseline' && message.executable) {
      return message.executable
    }
  }
  throw new Error('cargo built no baseline executable')
}

function rust(baseline, args) {
  const run = spawnSync(baseline, args, { encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`baseline ${args.join(' ')}: ${run.stderr}`)
  return JSON.parse(run.stdout)
}

function note(n) {
  return { type: 'x-bench/note', data: { n, text: 'a note of about one hundred bytes, as a small runtime event carries' } }
}

function fresh(name) {
  return fs.mkdtempSync(path.join(benchDir, `sessionlog-bench-${name}-`))
}

/**
 * Node: `count` appends, awaited one at a time as a runtime makes them, or
 * (`together`) issued at once, each its own promise, then awaited.
 */
async function nodeAppends(count, durability, together) {
  const folder = fresh('node')
  try {
    const store = await Store.open(path.join(folder, 'logs'), { create: true })
    await store.createSession({ id: 'bench', cwd: '/bench' }, { durability })
    const writer = await store.openWriter('bench', { durability, keepSnapshot: false })
    const started = process.hrtime.bigint()
    if (together) {
      const appends = []
      for (let n = 0; n < count; n += 1) appends.push(writer.append(note(n)))
      await Promise.all(appends)
    } else {
      for (let n = 0; n < count; n += 1) await writer.append(note(n))
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9
    await writer.close()
    return { seconds, count }
  } finally {
    fs.rmSync(folder, { recursive: true, force: true })
  }
}

function rustAppends(baseline, count, durability) {
  const folder = fresh('rust')
  try {
    return rust(baseline, ['append', path.join(folder, 'logs'), String(count), durability])
  } finally {
    fs.rmSync(folder, { recursive: true, force: true })
  }
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

function rate({ seconds, count }) {
  return count / seconds
}

async function compareAppends(baseline, { label, durability, count, together }) {
  const node = []
  const rustRuns = []
  for (let round = 0; round < rounds; round += 1) {
    rustRuns.push(rate(rustAppends(baseline, count, durability)))
    node.push(rate(await nodeAppends(count, durability, together)))
  }
  const ratio = median(node) / median(rustRuns)
  return { label, rust: median(rustRuns), node: median(node), ratio }
}

async function compareSnapshot(baseline) {
  const folder = fresh('snapshot')
  try {
    const location = path.join(folder, 'logs')
    const store = await Store.open(location, { create: true })
    await store.createSession({ id: 'big', cwd: '/bench' }, { durability: 'buffered' })
    const writer = await store.openWriter('big', { durability: 'buffered', keepSnapshot: false })
    for (let n = 0; n < SNAPSHOT_EVENTS; n += 1000) {
      await writer.appendBatch(Array.from({ length: 1000 }, (_, k) => note(n + k)))
    }
    await writer.close()
    // The same bytes as one JSON text: the log's records as an array.
    const bytes = fs.readFileSync(path.join(location, 'big.jsonl'), 'utf8')
    const asArray = `[${bytes.trimEnd().split('\n').join(',')}]`
    const rustRuns = []
    const parseRuns = []
    const nodeRuns = []
    for (let round = 0; round < rounds; round += 1) {
      rustRuns.push(rust(baseline, ['snapshot', location, 'big']).seconds)
      let started = process.hrtime.bigint()
      const parsed = JSON.parse(asArray)
      parseRuns.push(Number(process.hrtime.bigint() - started) / 1e9)
      if (parsed.length !== SNAPSHOT_EVENTS + 1) throw new Error('the parsed log is short')
      started = process.hrtime.bigint()
      const snap = await store.snapshot('big')
      nodeRuns.push(Number(process.hrtime.bigint() - started) / 1e9)
      if (snap.events.length !== SNAPSHOT_EVENTS) throw new Error('the snapshot is short')
    }
    const budget = median(rustRuns) + median(parseRuns)
    return {
      rust: median(rustRuns),
      parse: median(parseRuns),
      node: median(nodeRuns),
      bytes: bytes.length,
      ratio: median(nodeRuns) / budget,
    }
  } finally {
    fs.rmSync(folder, { recursive: true, force: true })
  }
}

async function main() {
  const baseline = buildBaseline()
  console.log(`sessionlog Node.js bench: ${rounds} rounds in ${benchDir}, Node ${process.version}`)
  const cases = [
    { label: 'durable append, one at a time', durability: 'fsync', count: DURABLE_APPENDS, target: 0.8 },
    { label: `${BUFFERED_APPENDS} buffered appends, one at a time`, durability: 'buffered', count: BUFFERED_APPENDS },
    { label: `${BUFFERED_APPENDS} buffered appends, issued together`, durability: 'buffered', count: BUFFERED_APPENDS, together: true, target: 0.5 },
    { label: `${DURABLE_APPENDS} durable appends, issued together`, durability: 'fsync', count: DURABLE_APPENDS, together: true },
  ]
  const lines = []
  for (const measured of cases) {
    const row = await compareAppends(baseline, measured)
    const target = measured.target === undefined ? '(no target)' : `>= ${measured.target}`
    lines.push([row, target, measured.target === undefined || row.ratio >= measured.target])
  }
  for (const [row, target, met] of lines) {
    console.log(
      `${row.label}: Rust ${row.rust.toFixed(0)} ev/s, Node ${row.node.toFixed(0)} ev/s, ` +
        `ratio ${row.ratio.toFixed(2)} (target ${target}${met ? '' : ', MISSED'})`,
    )
  }
  const snapshot = await compareSnapshot(baseline)
  console.log(
    `snapshot of ${SNAPSHOT_EVENTS} events (${(snapshot.bytes / 1e6).toFixed(1)} MB): Rust ${(snapshot.rust * 1000).toFixed(1)} ms, ` +
      `JSON.parse ${(snapshot.parse * 1000).toFixed(1)} ms, Node ${(snapshot.node * 1000).toFixed(1)} ms, ` +
      `ratio ${snapshot.ratio.toFixed(2)} of the sum (target <= 2${snapshot.ratio <= 2 ? '' : ', MISSED'})`,
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
