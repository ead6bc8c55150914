// sessionlog for Node.js: the store, its validated writer, follow and the
// Auto-review request, over the native addon `sessionlog.node` built from
// this workspace (`npm install` builds it).
//
// This file gives the addon its documented API (index.d.ts): plain
// JavaScript values in and out, every failure a SessionlogError with a
// stable code, appends applied in the order they were called and resolved
// in seq order, follow as an async iterator that an AbortSignal ends. Values
// cross into the addon as one JSON string each (JSON.stringify) and come
// back as one JSON text (JSON.parse), built from the records as stored.
'use strict'

const native = require('./sessionlog.node')

/** The request size limit when none is given: 1 MiB. */
const DEFAULT_MAX_REQUEST_BYTES = 1 << 20

/** Every failure of this package. */
class SessionlogError extends Error {
  constructor(code, message, details = {}) {
    super(message)
    this.name = 'SessionlogError'
    this.code = code
    for (const key of ['seq', 'path', 'line', 'offset', 'expected', 'actual']) {
      if (details[key] !== undefined) this[key] = details[key]
    }
  }
}

/** A failure as the addon sends it (the JSON text of its message), or null. */
function decodeFailure(text) {
  if (typeof text !== 'string' || !text.startsWith('{"sessionlog":true')) return null
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

function errorOf(failure) {
  return new SessionlogError(failure.code, failure.message, failure)
}

/** Any error thrown by the addon, as a SessionlogError. */
function fromNative(error) {
  if (error instanceof SessionlogError) return error
  const failure = decodeFailure(error && error.message)
  if (failure) return errorOf(failure)
  // napi's own refusals (an argument of the wrong type) are ours to
  // prevent; should one get through, it is still a SessionlogError.
  return new SessionlogError('INVALID_ARGUMENT', String(error && error.message ? error.message : error))
}

/** Awaits a promise of the addon, rethrowing its failure as a SessionlogError. */
async function call(promise) {
  try {
    return await promise
  } catch (error) {
    throw fromNative(error)
  }
}

/** Calls the addon, a synchronous refusal included, as a promise. */
function settle(start) {
  try {
    return call(start())
  } catch (error) {
    return Promise.reject(fromNative(error))
  }
}

function invalidArgument(message) {
  return new SessionlogError('INVALID_ARGUMENT', message)
}

function checkId(id, what = 'session id') {
  if (typeof id !== 'string') {
    throw new SessionlogError('INVALID_ID', `${what} must be a string, not ${describe(id)}`)
  }
  return id
}

/** An optional non-negative integer option (a seq, a time, a size). */
function checkInteger(value, name, minimum = 0) {
  if (value === undefined || value === null) return undefined
  if (!Number.isSafeInteger(value) || value < minimum) {
    throw invalidArgument(`${name} must be an integer of at least ${minimum}, not ${describe(value)}`)
  }
  return value
}

function checkOptionalString(value, name) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') throw invalidArgument(`${name} must be a string, not ${describe(value)}`)
  // Passed to Rust, a lone surrogate would become U+FFFD: a stored text
  // that is not the one given.
  if (!value.isWellFormed()) {
    throw invalidArgument(`${name} ${JSON.stringify(value)} holds a lone surrogate (not Unicode text)`)
  }
  return value
}

/**
 * Refuses a text with a lone surrogate: passed to Rust it would become
 * U+FFFD, a text that is not the one given (a pending action the reviewer
 * would read otherwise than the tool).
 */
function wellFormed(text, what, code = 'INVALID_ARGUMENT') {
  if (!text.isWellFormed()) {
    throw new SessionlogError(code, `${what} holds a lone surrogate (not Unicode text)`)
  }
}

/** An optional boolean option: `fallback` when absent, never a coerced value. */
function checkBoolean(value, name, fallback) {
  if (value === undefined || value === null) return fallback
  if (typeof value !== 'boolean') throw invalidArgument(`${name} must be true or false, not ${describe(value)}`)
  return value
}

function isBuffered(durability) {
  if (durability === undefined || durability === null || durability === 'fsync') return false
  if (durability === 'buffered') return true
  throw invalidArgument(`durability must be "fsync" or "buffered", not ${describe(durability)}`)
}

function describe(value) {
  if (typeof value === 'string') return JSON.stringify(value)
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`
}

/**
 * The options object of a call (`{}` for undefined or null), which may name
 * only the members `allowed`: a misspelt option (`sealkey`, `durabilty`)
 * dropped would run the call otherwise than asked, unsaid.
 */
function optionsOf(options, allowed) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw invalidArgument(`options must be an object, not ${describe(options)}`)
  }
  return onlyMembers(options, allowed, 'options')
}

/** `object`, refused when it has an own member that `allowed` does not name. */
function onlyMembers(object, allowed, what) {
  for (const key in object) {
    if (Object.hasOwn(object, key) && !allowed.includes(key)) {
      const known = allowed.length === 0 ? 'none' : allowed.join(', ')
      throw invalidArgument(`${what}: unknown member ${JSON.stringify(key)} (the members it takes: ${known})`)
    }
  }
  return object
}

const DEFAULTS = ['defaultApproval', 'defaultSandbox']

function defaultsOf(options) {
  return {
    defaultApproval: checkOptionalString(options.defaultApproval, 'defaultApproval'),
    defaultSandbox: checkOptionalString(options.defaultSandbox, 'defaultSandbox'),
  }
}

/**
 * An event `{type, data, ts?}` as the addon takes it: the JSON text
 * `[type, ts|null, data]`, `data` written once by JSON.stringify.
 */
function encodeEvent(event, index) {
  try {
    return encodeEventChecked(event, index)
  } catch (error) {
    if (error instanceof SessionlogError) throw error
    // A getter or a proxy that throws as the event is read: every failure
    // of this package is a SessionlogError.
    throw new SessionlogError('INVALID_EVENT', `event ${index} cannot be read: ${error && error.message}`)
  }
}

function encodeEventChecked(event, index) {
  // The messages are built only on failure: this runs once per append.
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    throw new SessionlogError('INVALID_EVENT', `event ${index} must be an object {type, data, ts?}, not ${describe(event)}`)
  }
  const type = event.type
  if (typeof type !== 'string') {
    throw new SessionlogError('INVALID_EVENT', `event ${index}: type must be a string, not ${describe(type)}`)
  }
  if (!type.isWellFormed()) {
    throw new SessionlogError('INVALID_EVENT', `event ${index}: type ${JSON.stringify(type)} holds a lone surrogate (not Unicode text)`)
  }
  let data
  try {
    data = JSON.stringify(event.data)
  } catch (error) {
    throw new SessionlogError('INVALID_EVENT', `event ${index} (${type}): data cannot be written as JSON: ${error.message}`)
  }
  if (data === undefined) {
    throw new SessionlogError('INVALID_EVENT', `event ${index} (${type}): data must be a JSON value, not ${describe(event.data)}`)
  }
  const ts = event.ts
  if (ts !== undefined && ts !== null && !(Number.isSafeInteger(ts) && ts >= 0)) {
    throw new SessionlogError('INVALID_EVENT', `event ${index} (${type}): ts must be an integer of at least 0, not ${describe(ts)}`)
  }
  // A member the store would not write is refused, as the command line
  // refuses it: dropped, an `expectSeq` put in the event instead of the
  // options would append without the check it asks for.
  for (const key in event) {
    if (key !== 'type' && key !== 'data' && key !== 'ts' && Object.hasOwn(event, key)) {
      const hint = key === 'expectSeq' ? ' (expectSeq is an option: append(event, { expectSeq }))' : ''
      throw new SessionlogError('INVALID_EVENT', `event ${index} (${type}): unknown member ${JSON.stringify(key)}, an event is {type, data, ts?}${hint}`)
    }
  }
  return `[${JSON.stringify(type)},${ts === undefined || ts === null ? 'null' : ts},${data}]`
}

/**
 * A JSON value given as an object, or as its JSON text passed through; a
 * value JSON cannot write (a BigInt, a cycle) is refused with `code`.
 */
function jsonText(value, what, code = 'INVALID_ARGUMENT') {
  if (typeof value === 'string') {
    wellFormed(value, what, code)
    return value
  }
  let text
  try {
    text = JSON.stringify(value)
  } catch (error) {
    throw new SessionlogError(code, `${what} cannot be written as JSON: ${error && error.message}`)
  }
  if (text === undefined) throw new SessionlogError(code, `${what} must be a JSON value, not ${describe(value)}`)
  return text
}

const constructing = Symbol('sessionlog.constructing')

/** A store of sessions: a folder of JSONL logs, a .db/.sqlite database or a postgres:// URL. */
class Store {
  #native

  constructor(token, handle) {
    if (token !== constructing) throw new TypeError('use Store.open(location) to open a store')
    this.#native = handle
  }

  /**
   * Opens the store at `location`. A missing store is an IO error unless
   * `create` is set, so that a mistyped path never becomes an empty store.
   */
  static async open(location, options) {
    if (typeof location !== 'string') throw invalidArgument(`location must be a string, not ${describe(location)}`)
    if (location.trim() === '') {
      throw invalidArgument('location is empty: name a folder of logs, a .db file or a postgres:// URL')
    }
    // Rust would take a lone surrogate as U+FFFD: another path.
    wellFormed(location, 'location')
    const create = checkBoolean(optionsOf(options, ['create']).create, 'create', false)
    // The addon makes a path absolute (a later process.chdir moves nothing).
    const handle = await call(native.openStore(location, create))
    return new Store(constructing, handle)
  }

  /** The folder or database file. */
  get location() {
    return this.#native.location
  }

  /** Creates a root session; resolves with its header. */
  async createSession(session, options) {
    options = optionsOf(options, ['durability'])
    if (session === null || typeof session !== 'object' || Array.isArray(session)) {
      throw invalidArgument('createSession takes {id, cwd, ...}')
    }
    onlyMembers(session, ['id', 'cwd', 'createdAt', 'sandboxMode', 'approvalPolicy'], 'the session')
    const input = {
      id: checkId(session.id),
      cwd: session.cwd === undefined ? process.cwd() : session.cwd,
      createdAt: checkInteger(session.createdAt, 'createdAt'),
      sandboxMode: checkOptionalString(session.sandboxMode, 'sandboxMode'),
      approvalPolicy: checkOptionalString(session.approvalPolicy, 'approvalPolicy'),
    }
    if (typeof input.cwd !== 'string') throw invalidArgument(`cwd must be a string, not ${describe(input.cwd)}`)
    checkOptionalString(input.cwd, 'cwd')
    return JSON.parse(await call(this.#native.createSession(input, isBuffered(options.durability))))
  }

  /**
   * Opens the one writer of a session: LOCKED while another writer, in this
   * process or another, holds it. With `sealKey` (the text of a key file
   * `sessionlog keygen` wrote), every `turn/end` is followed by a seal
   * signed by it, written and synced with it.
   */
  async openWriter(id, options) {
    options = optionsOf(options, ['durability', 'keepSnapshot', 'sealKey'])
    const buffered = isBuffered(options.durability)
    const keepSnapshot = checkBoolean(options.keepSnapshot, 'keepSnapshot', true)
    const sealKey = checkOptionalString(options.sealKey, 'sealKey') ?? null
    const work = new WorkInFlight()
    try {
      const handle = await call(this.#native.openWriter(checkId(id), buffered, keepSnapshot, sealKey, work.completion()))
      return new Writer(constructing, handle, work, keepSnapshot)
    } catch (error) {
      work.end()
      throw error
    }
  }

  /**
   * The head of a session, as `sessionlog head` prints it: `{session, seq,
   * chain}` for the last record of its good prefix. Kept elsewhere, it is
   * an anchor for `sessionlog verify --anchor`.
   */
  async head(id) {
    return JSON.parse(await call(this.#native.head(checkId(id))))
  }

  /** Creates `child` from `parent`'s good prefix; resolves with the child's header. */
  async fork(parent, child, options) {
    options = optionsOf(options, ['prompt', ...DEFAULTS])
    const prompt = checkOptionalString(options.prompt, 'prompt')
    const text = await call(
      this.#native.fork(checkId(parent, 'parent id'), checkId(child, 'child id'), prompt, defaultsOf(options)),
    )
    return JSON.parse(text)
  }

  /** The good prefix of a session: `{header, events, tornTail}`. */
  async snapshot(id) {
    return JSON.parse(await call(this.#native.snapshot(checkId(id))))
  }

  /** The projections as of seq `at` (the last when absent), as `sessionlog project` prints them. */
  async project(id, options) {
    options = optionsOf(options, ['at', ...DEFAULTS])
    const at = checkInteger(options.at, 'at')
    return JSON.parse(await call(this.#native.project(checkId(id), at, defaultsOf(options))))
  }

  /** Every session's header (`{id, error}` for one whose header cannot be read). */
  async list() {
    const entries = JSON.parse(await call(this.#native.list()))
    return entries.map((entry) => (entry.error ? { id: entry.id, error: errorOf(entry.error) } : entry))
  }

  /**
   * The events of a session from `fromSeq` on: those stored, then each new
   * one as it is appended, until `signal` aborts (or the loop breaks).
   */
  async *follow(id, options) {
    options = optionsOf(options, ['fromSeq', 'signal'])
    const fromSeq = checkInteger(options.fromSeq, 'fromSeq') ?? 1
    const { signal } = options
    // Checked before the native follower starts polling.
    if (signal !== undefined && signal !== null && !(signal instanceof AbortSignal)) {
      throw invalidArgument(`signal must be an AbortSignal, not ${describe(signal)}`)
    }
    let following
    try {
      following = this.#native.follow(checkId(id), fromSeq)
    } catch (error) {
      throw fromNative(error)
    }
    const stop = () => following.stop()
    if (signal) {
      if (signal.aborted) return following.stop()
      signal.addEventListener('abort', stop, { once: true })
    }
    try {
      for (;;) {
        const text = await call(following.next())
        if (text === null) return
        for (const event of JSON.parse(text)) {
          if (signal && signal.aborted) return
          yield event
        }
      }
    } finally {
      if (signal) signal.removeEventListener('abort', stop)
      following.stop()
    }
  }
}

/** Holds nothing: the callback of the timer that keeps the event loop alive. */
function idle() {}

/** Stops the keep-alive timer of a writer that was collected without `close`. */
const collected = new FinalizationRegistry((timer) => clearInterval(timer))

/**
 * The work sent to a writer's thread and not yet answered, oldest first.
 * The thread answers each piece in the order it was sent, by one call of
 * `completion()` (the addon calls it on the event loop), so the answer
 * always belongs to the oldest. While work is in flight a timer keeps the
 * event loop alive, as any pending I/O does; an idle writer does not.
 * Nothing here refers to the Writer, so that one dropped without `close`
 * is collected (and its lock released).
 */
class WorkInFlight {
  #entries = []
  #alive = setInterval(idle, 0x7fffffff)

  constructor() {
    this.#alive.unref()
  }

  /** The function the writer's thread reports to: `(error)` or `(null, text)`. */
  completion() {
    return (error, text) => {
      const entry = this.#entries.shift()
      if (this.#entries.length === 0) this.#alive.unref()
      if (entry === undefined) return
      if (error) entry.reject(fromNative(error))
      else entry.resolve(text)
    }
  }

  /**
   * Sends a piece of work (`send` calls the addon); resolves with the
   * thread's answer, the JSON text of its outcome.
   */
  send(send) {
    return new Promise((resolve, reject) => {
      try {
        send()
      } catch (error) {
        reject(fromNative(error))
        return
      }
      if (this.#entries.push({ resolve, reject }) === 1) this.#alive.ref()
    })
  }

  /** Ends the keep-alive timer: the writer is closed. */
  end() {
    clearInterval(this.#alive)
  }

  /** Ends the keep-alive timer when `writer` is collected without `close`. */
  endWith(writer) {
    collected.register(writer, this.#alive)
  }
}

/**
 * The most appends one group hands over while an earlier group is still
 * being written: a bulk import issued in one synchronous loop gets its
 * encoding overlapped with the store's work, a group at a time, instead of
 * waiting for the loop to end. Appends that queue while a group is running
 * share its successor's sync in any case.
 */
const EAGER_GROUP = 1024

/**
 * The most text one group hands over (64 MiB, and one append more): far
 * below the longest string JavaScript holds (about 512 MiB), whatever the
 * size of the appends queued.
 */
const GROUP_BYTES = 64 * 1024 * 1024

/**
 * The one writer of a session. Appends are applied in the order they were
 * called; those that arrive while a sync is running share the next one.
 */
class Writer {
  #native
  #work
  #queue = []
  /** Groups and calls handed to the native writer and not yet settled. */
  #inflight = 0
  /** Calls (not appends) in `#queue`. */
  #callsQueued = 0
  #closed = false
  /** The promise of the first `close`, which every later one gives too. */
  #closing = null
  /** Whether the writer keeps the snapshot review requests need. */
  #keepsSnapshot

  constructor(token, handle, work, keepsSnapshot) {
    if (token !== constructing) throw new TypeError('use store.openWriter(id) to open a writer')
    this.#native = handle
    this.#work = work
    this.#keepsSnapshot = keepsSnapshot
    work.endWith(this)
  }

  /** The session's id. */
  get id() {
    return this.#native.id
  }

  /** Appends one event durably; resolves with its seq. */
  append(event, options) {
    return this.#enqueueAppend([event], options, true)
  }

  /** Appends events as one atomic batch; resolves with their seqs. */
  appendBatch(events, options) {
    if (!Array.isArray(events)) {
      return Promise.reject(new SessionlogError('INVALID_EVENT', `appendBatch takes an array of events, not ${describe(events)}`))
    }
    return this.#enqueueAppend(events, options, false)
  }

  /** The Auto reviewer's request for a pending action, as an object. */
  async reviewRequest(pending, options) {
    return JSON.parse(await this.reviewRequestText(pending, options))
  }

  /**
   * The Auto reviewer's request as the exact compact JSON text the store
   * built (what `sessionlog review-request` prints), for sending as it is.
   */
  reviewRequestText(pending, options) {
    let text
    let maxBytes
    try {
      options = optionsOf(options, ['maxBytes'])
      if (!this.#keepsSnapshot) {
        throw new SessionlogError(
          'INVALID_ARGUMENT',
          `the writer of session ${this.id} was opened with keepSnapshot: false and holds no snapshot; open it without that option to build review requests`,
        )
      }
      // As the same action given as an object is refused (by the strict
      // reading of its values), never read as another action.
      if (typeof pending === 'string') wellFormed(pending, 'the pending action', 'INVALID_ACTION')
      text = jsonText(pending, 'the pending action', 'INVALID_ACTION')
      maxBytes = checkInteger(options.maxBytes, 'maxBytes', 1) ?? DEFAULT_MAX_REQUEST_BYTES
    } catch (error) {
      return Promise.reject(error)
    }
    return this.#enqueueCall(() => this.#work.send(() => this.#native.reviewRequest(text, maxBytes)))
  }

  /**
   * Appends a seal of every record before it, after what was queued
   * before, signed by `key` (the text of a key file) when given; resolves
   * with its seq.
   */
  seal(options) {
    let key
    try {
      options = optionsOf(options, ['key'])
      this.#checkOpen()
      key = checkOptionalString(options.key, 'key') ?? null
    } catch (error) {
      return Promise.reject(error)
    }
    return this.#enqueueCall(async () => Number(await this.#work.send(() => this.#native.seal(key))))
  }

  /**
   * Switches the session's permission preset (the preset writer): appends,
   * as one atomic batch, the `sandbox/mode` and `approval/policy` events the
   * preset needs and the `permission/preset` event, after what was queued
   * before. `auto` runs under the approval policy `approval` names; the
   * other presets bring their own. Resolves with `{session, preset, seqs,
   * sandboxMode, approvalPolicy}`, the effective values after the switch.
   */
  switchPreset(preset, options) {
    let input
    try {
      options = optionsOf(options, ['approval', 'expectSeq', ...DEFAULTS])
      this.#checkOpen()
      if (typeof preset !== 'string') throw invalidArgument(`preset must be a string, not ${describe(preset)}`)
      input = {
        preset,
        approval: checkOptionalString(options.approval, 'approval') ?? null,
        expectSeq: checkInteger(options.expectSeq, 'expectSeq', 1) ?? null,
        defaults: defaultsOf(options),
      }
    } catch (error) {
      return Promise.reject(error)
    }
    return this.#enqueueCall(async () =>
      JSON.parse(
        await this.#work.send(() =>
          this.#native.switchPreset(input.preset, input.approval, input.defaults, input.expectSeq),
        ),
      ),
    )
  }

  /** Applies what was queued before, then releases the writer and its lock. */
  close() {
    if (this.#closing) return this.#closing
    this.#closed = true
    this.#closing = this.#enqueueCall(async () => {
      try {
        await this.#work.send(() => this.#native.close())
      } finally {
        this.#work.end()
      }
    })
    return this.#closing
  }

  #enqueueAppend(events, options, single) {
    let batch
    try {
      this.#checkOpen()
      const expectSeq = checkInteger(optionsOf(options, ['expectSeq']).expectSeq, 'expectSeq', 1)
      let encoded = ''
      // By index, holes included: `map` would pass a hole over.
      for (let index = 0; index < events.length; index += 1) {
        encoded += (index > 0 ? ',' : '') + encodeEvent(events[index], index)
      }
      batch = `[${expectSeq === undefined ? 'null' : expectSeq},[${encoded}]]`
    } catch (error) {
      return Promise.reject(error)
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ batch, count: events.length, single, resolve, reject })
      if (this.#inflight > 0 && this.#callsQueued === 0 && this.#queue.length >= EAGER_GROUP) {
        // The native writer runs what it is handed in the order handed, so
        // this group waits for the running one there, not here.
        this.#sendGroup(this.#queue.length)
      } else {
        this.#pump()
      }
    })
  }

  #enqueueCall(run) {
    return new Promise((resolve, reject) => {
      this.#queue.push({ run, resolve, reject })
      this.#callsQueued += 1
      this.#pump()
    })
  }

  #checkOpen() {
    if (this.#closed) throw new SessionlogError('CLOSED', `the writer of session ${this.id} is closed`)
  }

  /** Starts the next group (every append queued now) or call, if nothing is running. */
  #pump() {
    if (this.#inflight > 0 || this.#queue.length === 0) return
    if (this.#queue[0].run) {
      const entry = this.#queue.shift()
      this.#callsQueued -= 1
      this.#inflight += 1
      settle(entry.run)
        .then(entry.resolve, entry.reject)
        .then(() => this.#settled())
      return
    }
    let count = 0
    while (count < this.#queue.length && !this.#queue[count].run) count += 1
    this.#sendGroup(count)
  }

  /**
   * Hands queued appends (no call among them) over as one group: the first
   * `count`, or fewer when their text passes GROUP_BYTES (the rest go with
   * the next group).
   */
  #sendGroup(count) {
    let size = 0
    let taken = 0
    while (taken < count && (taken === 0 || size + this.#queue[taken].batch.length <= GROUP_BYTES)) {
      size += this.#queue[taken].batch.length + 1
      taken += 1
    }
    const group = this.#queue.splice(0, taken)
    let text
    try {
      text = '[' + group.map((entry) => entry.batch).join(',') + ']'
    } catch (error) {
      // Past what one JavaScript string holds: refused, each append alone
      // would have been taken.
      const failure = new SessionlogError('INVALID_EVENT', `a group of appends could not be handed over: ${error.message}`)
      group.forEach((entry) => entry.reject(failure))
      this.#pump()
      return
    }
    this.#inflight += 1
    this.#work
      .send(() => this.#native.appendGroup(text))
      .then(
        (outcomes) => {
          // In call order, which is seq order: the seq of a batch's first
          // event (null for an empty batch), or its failure.
          const parsed = JSON.parse(outcomes)
          for (let index = 0; index < group.length; index += 1) {
            const outcome = parsed[index]
            const entry = group[index]
            if (outcome !== null && typeof outcome === 'object') entry.reject(errorOf(outcome))
            else if (entry.single) entry.resolve(outcome)
            else entry.resolve(Array.from({ length: entry.count }, (_, offset) => outcome + offset))
          }
        },
        (error) => group.forEach((entry) => entry.reject(error)),
      )
      .then(() => this.#settled())
  }

  #settled() {
    this.#inflight -= 1
    this.#pump()
  }
}

/**
 * Reads a reviewer's reply `{blocks, stop}` strictly (an object, or its JSON
 * text passed through as it is); returns `{risk, decision, reason?}` or
 * throws a SessionlogError with code AUTO_REVIEW_FAILED.
 */
function parseReviewResult(reply) {
  const text = jsonText(reply, 'the reply', 'AUTO_REVIEW_FAILED')
  try {
    return JSON.parse(native.parseReviewResultJson(text))
  } catch (error) {
    throw fromNative(error)
  }
}

/**
 * The Chat Completions body (a JSON string) that asks the reviewer about a
 * request, byte for byte as `sessionlog review` sends it: pass the exact
 * text from `writer.reviewRequestText`. `model` replaces the request's own.
 */
function chatCompletionsBody(requestText, model) {
  if (typeof requestText !== 'string') {
    throw new SessionlogError('INVALID_ARGUMENT', `the request must be its JSON text, not ${describe(requestText)}`)
  }
  wellFormed(requestText, 'the request')
  const chosen = checkOptionalString(model, 'model')
  try {
    return native.chatCompletionsBodyJson(requestText, chosen ?? null)
  } catch (error) {
    throw fromNative(error)
  }
}

/**
 * Reads a Chat Completions answer body (text) into the reviewer's reply
 * `{blocks, stop}`, ready for `parseReviewResult`; throws AUTO_REVIEW_FAILED
 * naming what is wrong with the answer.
 */
function chatCompletionsReply(responseText) {
  if (typeof responseText !== 'string') {
    throw new SessionlogError('AUTO_REVIEW_FAILED', `the answer must be its body text, not ${describe(responseText)}`)
  }
  wellFormed(responseText, 'the answer', 'AUTO_REVIEW_FAILED')
  try {
    return JSON.parse(native.chatCompletionsReplyJson(responseText))
  } catch (error) {
    throw fromNative(error)
  }
}

module.exports = {
  Store,
  Writer,
  SessionlogError,
  parseReviewResult,
  chatCompletionsBody,
  chatCompletionsReply,
  DEFAULT_MAX_REQUEST_BYTES,
}
