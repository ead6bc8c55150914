// Types of the `sessionlog` package (index.js).

/** What a program branches on: `SessionlogError.code`. */
export type SessionlogErrorCode =
  // the store
  | 'LOCKED' // another writer holds the session
  | 'CONFLICT' // expectSeq is not the next seq; nothing was written
  | 'RULE' // an event (or a header value) breaks a rule of the format; nothing was written
  | 'SEAL' // a seal does not hold: the log was changed after it was sealed (seq names the seal)
  | 'CORRUPT' // a log is corrupt (line, offset), or a database session's rows (seq)
  | 'POISONED' // an earlier write or sync failed; close() the writer, then open a new one
  | 'NOT_FOUND' // no such session
  | 'EXISTS' // a session with this id exists already
  | 'INVALID_ID' // not a valid session id
  | 'IO' // a file-system or database failure (a missing store included)
  | 'CONNECTION_LOST' // the PostgreSQL server ended the connection or is out of reach: the next call connects again
  | 'INVALID_EVENT' // an event that cannot be written (not {type, data}, data not JSON, over the size limit)
  | 'INVALID_ARGUMENT' // an option the API cannot take (a bad seq, an unknown vocabulary value)
  | 'CLOSED' // the writer was closed
  | 'TOO_LARGE' // a result longer than one JavaScript string holds (about 512 MiB): a snapshot (read it with follow()), a review request
  | 'PANIC' // a bug in sessionlog, reported instead of crashing the process
  // the reviewer's request (fail-closed, in the order they are checked)
  | 'INVALID_LOG'
  | 'INVALID_ACTION'
  | 'MISSING_SCHEMA'
  | 'NO_REQUEST_HEADER'
  | 'NO_OPEN_STEP'
  | 'STEP_MISMATCH'
  | 'DUPLICATE_CALL_ID'
  | 'UNKNOWN_PARENT_CALL'
  | 'UNKNOWN_TOOL'
  | 'AMBIGUOUS_TOOL'
  | 'REQUEST_TOO_LARGE'
  // the reviewer's reply
  | 'AUTO_REVIEW_FAILED'

/** Every failure of this package. */
export class SessionlogError extends Error {
  constructor(
    code: SessionlogErrorCode,
    message: string,
    details?: { seq?: number; path?: string; line?: number; offset?: number; expected?: number; actual?: number },
  )
  readonly name: 'SessionlogError'
  readonly code: SessionlogErrorCode
  /** The seq involved: the event that broke a rule (0: the header), the log's next seq on a conflict. */
  readonly seq?: number
  /** The log file (or `database#id`) involved. */
  readonly path?: string
  /** Where corruption starts: 1-based line and byte offset. */
  readonly line?: number
  readonly offset?: number
  /** On a conflict: the seq the caller expected and the log's next seq. */
  readonly expected?: number
  readonly actual?: number
}

export type SandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access'
export type ApprovalPolicy = 'ask' | 'never'
export type Durability = 'fsync' | 'buffered'
/** A permission preset; `custom`: the values in force match none. */
export type Preset = 'read-only' | 'workspace-write' | 'full-access' | 'auto' | 'custom'

/** A session's immutable first record. */
export interface SessionHeader {
  kind: 'header'
  formatVersion: number
  id: string
  createdAt: number
  cwd: string
  parentSession: string | null
  seedLength: number
  delegationDepth: number
  sandboxMode: SandboxMode | null
  approvalPolicy: ApprovalPolicy | null
}

/** An event to append. `data` is any JSON value (an object for every known type); a member besides these three is INVALID_EVENT. */
export interface NewEvent {
  type: string
  data: unknown
  /** Unix milliseconds; now when absent. */
  ts?: number
}

/** A stored event. */
export interface StoredEvent {
  seq: number
  ts: number
  /** On the first record of a multi-event batch: how many records it has. */
  batch?: number
  type: string
  data: any
}

export interface TornTail {
  line: number
  offset: number
  bytes: number
  droppedRecords: number
  reason: string
}

export interface Snapshot {
  header: SessionHeader
  events: StoredEvent[]
  /** The damage after the good prefix that a crash left, if any (never acknowledged data). */
  tornTail: TornTail | null
}

export interface Setting<T> {
  override: T | null
  effective: T
}

/** What `sessionlog project` prints. */
export interface Projection {
  session: string
  seq: number
  parentSession: string | null
  seedLength: number
  delegationDepth: number
  approvalPolicy: Setting<ApprovalPolicy>
  sandboxMode: Setting<SandboxMode>
  preset: Preset
  requiresIntegration: string[]
  openTurn: string | null
  openStep: string | null
  pendingApprovals: string[]
  notice: string | null
}

/** A session of a listing whose header could not be read. */
export interface UnreadableSession {
  id: string
  error: SessionlogError
}

export interface Defaults {
  /** The configured approval policy (`ask` when absent). */
  defaultApproval?: ApprovalPolicy
  /** The configured sandbox mode (`workspace-write` when absent). */
  defaultSandbox?: SandboxMode
}

/** A tool call waiting for the Auto reviewer. */
export interface PendingAction {
  callId: string
  stepId: string
  name: string
  arguments: unknown
  /** Set for a call made from inside a program tool. */
  parentCallId?: string
  /** A program's inner call brings its own frozen schema. */
  schema?: { description: string; parameters: unknown }
}

/** The reviewer's request: `{model, partitions}`. */
export interface ReviewRequest {
  model: { provider: string; model: string }
  partitions: {
    REVIEW_POLICY: string
    ENVIRONMENT: { cwd: string }
    PROJECT_INSTRUCTIONS: Array<{ source: string | null; text: string; role: 'constraint' }>
    FILTERED_HISTORY: Array<Record<string, unknown>>
    PENDING_ACTION: { callId: string; name: string; description: string; parameters: unknown; arguments: unknown }
  }
}

export interface ReviewDecision {
  risk: 'low' | 'medium' | 'high'
  decision: 'allow' | 'deny'
  reason?: string
}

export interface ReviewReply {
  blocks: Array<{ type: 'reasoning' | 'text'; text: string }>
  stop: string
}

export class Store {
  private constructor()
  /**
   * Opens a store: a folder of JSONL logs, a `.db`/`.sqlite` database, or a
   * `postgres://` URL (`?schema=NAME` for a schema other than `sessionlog`).
   * A missing store is an `IO` error unless `create` is set. A relative
   * path is made absolute here, so a later `process.chdir` does not move it.
   */
  static open(location: string, options?: { create?: boolean } | null): Promise<Store>
  /** The folder or database file, as an absolute path (or the URL). */
  readonly location: string
  /** Creates a root session (durably unless `durability: "buffered"`); resolves with its header. */
  createSession(
    session: { id: string; cwd?: string; createdAt?: number; sandboxMode?: SandboxMode; approvalPolicy?: ApprovalPolicy },
    options?: { durability?: Durability } | null,
  ): Promise<SessionHeader>
  /**
   * Opens the one writer of a session; `LOCKED` while another writer holds
   * it. `sealKey` (the text of a key file `sessionlog keygen` wrote) seals
   * every turn: a signed seal after each `turn/end`, in the same write and
   * sync. `keepSnapshot` (true when absent) keeps every event in memory for
   * `reviewRequest`; `false` suits a plain appender: it opens a long session
   * from its state snapshot, reading only the events after it, holds less,
   * and its `reviewRequest` is `INVALID_ARGUMENT`.
   */
  openWriter(id: string, options?: { durability?: Durability; keepSnapshot?: boolean; sealKey?: string } | null): Promise<Writer>
  /** The head of a session (an anchor for `sessionlog verify --anchor`): its last seq and the chain value there. */
  head(id: string): Promise<Head>
  /** Creates `child` from `parent`'s good prefix; resolves with the child's header. Nothing is written to the parent. */
  fork(parent: string, child: string, options?: ({ prompt?: string } & Defaults) | null): Promise<SessionHeader>
  /** The good prefix of a session. */
  snapshot(id: string): Promise<Snapshot>
  /** The projections as of seq `at` (the last when absent). */
  project(id: string, options?: ({ at?: number } & Defaults) | null): Promise<Projection>
  /**
   * Every session's header. In a folder, an entry that is no log (a
   * symbolic link, a folder, a name that is no session id) is passed over,
   * as `sessionlog list` passes it over with a warning.
   */
  list(): Promise<Array<SessionHeader | UnreadableSession>>
  /** The events from `fromSeq` on, then each new one as it is appended, until `signal` aborts. */
  follow(id: string, options?: { fromSeq?: number; signal?: AbortSignal } | null): AsyncIterableIterator<StoredEvent>
}

export class Writer {
  private constructor()
  /** The session's id. */
  readonly id: string
  /**
   * Appends one event, checked against every rule first (`RULE`, nothing
   * written) and durable before it resolves (unless the writer is
   * buffered). Concurrent appends are applied in call order, share syncs
   * and resolve in seq order.
   */
  append(event: NewEvent, options?: { expectSeq?: number } | null): Promise<number>
  /** Appends events as one atomic batch; resolves with their seqs. */
  appendBatch(events: NewEvent[], options?: { expectSeq?: number } | null): Promise<number[]>
  /** The Auto reviewer's request for a pending action, built from the writer's snapshot (fails closed with a review code). */
  reviewRequest(pending: PendingAction | string, options?: { maxBytes?: number } | null): Promise<ReviewRequest>
  /** The same request as the exact compact JSON text the store built. */
  reviewRequestText(pending: PendingAction | string, options?: { maxBytes?: number } | null): Promise<string>
  /** Appends a seal of every record before it, signed by `key` (the text of a key file) when given; resolves with its seq. */
  seal(options?: { key?: string } | null): Promise<number>
  /**
   * The preset writer: switches the session's permission preset by
   * appending, as one atomic batch after what was queued before, the
   * `sandbox/mode` and `approval/policy` events the preset needs (only those
   * that differ from what is in force) and the `permission/preset` event.
   * `auto` runs under the approval policy `approval` names (required); the
   * other presets bring their own. A `permission/preset` event appended by
   * hand changes no effective value.
   */
  switchPreset(
    preset: Exclude<Preset, 'custom'>,
    options?: ({ approval?: ApprovalPolicy; expectSeq?: number } & Defaults) | null,
  ): Promise<PresetSwitched>
  /** Applies what was queued before, then releases the writer and its lock; a second call gives the first one's promise. */
  close(): Promise<void>
}

/** What `switchPreset` switched, as `sessionlog preset --json` prints it. */
export interface PresetSwitched {
  session: string
  preset: Exclude<Preset, 'custom'>
  /** The seqs of the events written, the `permission/preset` event last. */
  seqs: number[]
  /** The effective values after the switch. */
  sandboxMode: SandboxMode
  approvalPolicy: ApprovalPolicy
}

/** What `sessionlog head` prints for a session. */
export interface Head {
  session: string
  /** The last seq of the good prefix (0: the header alone). */
  seq: number
  /** The chain value there: `sha256:` + 64 lowercase hex digits. */
  chain: string
}

/** Reads a reviewer's reply strictly; throws `AUTO_REVIEW_FAILED` naming what is wrong. */
export function parseReviewResult(reply: ReviewReply | string): ReviewDecision

/** The Chat Completions body (JSON text) asking the reviewer about a request's exact text (`reviewRequestText`); `model` replaces the request's own. */
export function chatCompletionsBody(requestText: string, model?: string): string

/** Reads a Chat Completions answer body into the reply `{blocks, stop}` for `parseReviewResult`; throws `AUTO_REVIEW_FAILED` naming what is wrong. */
export function chatCompletionsReply(responseText: string): ReviewReply

/** The request size limit when none is given: 1 MiB. */
export const DEFAULT_MAX_REQUEST_BYTES: number
