// The examples of the package's README and of the main README's "From
// TypeScript" section run as written (their `import` turned into a
// `require` of this package), in a fresh folder.
'use strict'

const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { tempDir, workspace } = require('./support')

const AsyncFunction = (async () => {}).constructor

/** The first ```ts block of `file` after `heading`. */
function example(file, heading) {
  const text = fs.readFileSync(file, 'utf8')
  const from = text.indexOf(heading)
  assert.ok(from >= 0, `${file} has no ${heading}`)
  const start = text.indexOf('```ts\n', from) + '```ts\n'.length
  return text.slice(start, text.indexOf('```', start))
}

async function run(t, code) {
  const imports = /^import \{([^}]*)\} from "sessionlog";$/m
  assert.match(code, imports)
  const body = code.replace(imports, (_, names) => `const {${names}} = require(${JSON.stringify(path.resolve(__dirname, '..'))});`)
  const folder = tempDir(t)
  const previous = process.cwd()
  const log = t.mock.method(console, 'log', () => {})
  process.chdir(folder)
  try {
    await new AsyncFunction('require', body)(require)
  } finally {
    process.chdir(previous)
    log.mock.restore()
  }
  return folder
}

test("the package README's example runs", { timeout: 60_000 }, async (t) => {
  const folder = await run(t, example(path.join(__dirname, '..', 'README.md'), '## Example'))
  assert.deepEqual(fs.readdirSync(path.join(folder, 'sessions')).sort(), ['s1-child.jsonl', 's1.jsonl'])
})

test("the main README's From TypeScript example runs", { timeout: 60_000 }, async (t) => {
  const folder = await run(t, example(path.join(workspace, 'README.md'), '## From TypeScript'))
  assert.deepEqual(fs.readdirSync(path.join(folder, 'sessions')).sort(), ['s1-child.jsonl', 's1.jsonl'])
})
