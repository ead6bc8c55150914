// Builds the native addon from this workspace's source, in release mode,
// and copies it to sessionlog.node beside index.js. Nothing is downloaded:
// cargo builds the `sessionlog-node` crate with the toolchain on the machine.
//
//   node scripts/build.js              the addon
//   node scripts/build.js --with-cli   the addon and the `sessionlog` binary the tests run
'use strict'

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const here = path.resolve(__dirname, '..')
const workspace = path.resolve(here, '..', '..')
const packages = ['-p', 'sessionlog-node']
if (process.argv.includes('--with-cli')) packages.push('-p', 'sessionlog')

const cargo = process.env.CARGO || 'cargo'
const built = spawnSync(cargo, ['build', '--release', ...packages, '--message-format=json-render-diagnostics'], {
  cwd: workspace,
  stdio: ['ignore', 'pipe', 'inherit'],
  maxBuffer: 256 * 1024 * 1024,
  encoding: 'utf8',
})
if (built.error) {
  console.error(`sessionlog: could not run ${cargo} (${built.error.message}); install the Rust toolchain to build the addon`)
  process.exit(1)
}
if (built.status !== 0) {
  console.error(`sessionlog: cargo build failed (exit ${built.status})`)
  process.exit(built.status || 1)
}

// cargo names the library it built; take it from there, wherever the target
// directory is.
let library = null
for (const line of built.stdout.split('\n')) {
  if (!line.startsWith('{')) continue
  const message = JSON.parse(line)
  if (message.reason === 'compiler-artifact' && message.target.name === 'sessionlog_node') {
    library = message.filenames.find((file) => /\.(so|dylib|dll)$/.test(file)) || library
  }
}
if (!library) {
  console.error('sessionlog: cargo built no sessionlog_node library')
  process.exit(1)
}

// Copy, then rename over the old addon: a process that has the old one
// loaded keeps its mapping intact.
const target = path.join(here, 'sessionlog.node')
const temporary = `${target}.${process.pid}.tmp`
fs.copyFileSync(library, temporary)
fs.renameSync(temporary, target)
