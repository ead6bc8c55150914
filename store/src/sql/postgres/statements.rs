//! Every SQL statement the PostgreSQL backend sends, each with what it is
//! for. Connections run with `search_path` set to the store's schema (and
//! `pg_catalog`), so the statements name tables without a schema.

/// The schema steps: `SCHEMA_STEPS[n]` brings a schema at version `n` to
/// version `n + 1`. Version 0 is an empty (or missing) schema. A later
/// version appends a step here, and a fixture of the version before it.
pub(super) const SCHEMA_STEPS: &[&str] = &[
    // Version 1: the version row, one row per session (its header, its
    // last seq), one row per event.
    "CREATE TABLE schema_version (
        version integer NOT NULL
     );
     INSERT INTO schema_version (version) VALUES (0);
     CREATE TABLE sessions (
        id               text PRIMARY KEY,
        created_at       bigint NOT NULL,
        cwd              text NOT NULL,
        parent_session   text,
        seed_length      bigint NOT NULL,
        delegation_depth bigint NOT NULL,
        sandbox_mode     text,
        approval_policy  text,
        header_body      text NOT NULL,
        header_crc       bigint NOT NULL,
        last_seq         bigint NOT NULL
     );
     CREATE TABLE events (
        session_id text NOT NULL REFERENCES sessions (id),
        seq        bigint NOT NULL,
        ts         bigint NOT NULL,
        type       text NOT NULL,
        batch      bigint,
        body       text NOT NULL,
        crc        bigint NOT NULL,
        PRIMARY KEY (session_id, seq)
     );",
    // Version 2: session rows spread over their pages. Every append
    // updates its session's row; with rows packed (ten to a hundred to a
    // page) concurrent appenders to different sessions queue on the same
    // page's lock and fill it with dead versions. At 10% fill each row's
    // page has room for its own new versions (HOT updates, pruned in
    // place). New pages only: an upgraded store's existing rows stay put.
    "ALTER TABLE sessions SET (fillfactor = 10);",
    // Version 3, two additions:
    // - Forks by reference: a child's seeded events 1..=seed_length are the
    //   first rows of the session `seed_source` names, not rows of its own
    //   (NULL: a session that holds all its rows, as every session written
    //   before this version). Rows are never changed or removed, so the
    //   reference always resolves to the same bytes.
    // - State snapshots (docs/FORMAT.md, "State snapshots"): per session,
    //   the writer's fold through `seq`, trusted only while the event row at
    //   `seq` still has CRC `anchor_crc`. A cache: a reader that finds none,
    //   or one that does not match, folds every row.
    "ALTER TABLE sessions ADD COLUMN seed_source text REFERENCES sessions (id);
     CREATE TABLE snapshots (
        session_id text PRIMARY KEY REFERENCES sessions (id),
        seq        bigint NOT NULL,
        anchor_crc bigint NOT NULL,
        format     bigint NOT NULL,
        state      bytea NOT NULL
     );",
    // Version 4: no foreign key from `events` to `sessions`. It checked
    // every inserted row with a query of its own, which locked the
    // session's row (a WAL record per event): 15% of the rate of 64
    // appenders committed in groups. What it guarded holds without it:
    // sessionlog inserts events only in the statement that moves their
    // session row's `last_seq` (or in the transaction that inserts the
    // row), and events without a session row, written by anyone else,
    // are damage that every listing of the store names. What it also
    // refused, removing the row of a session that has events (its header
    // is the only copy), a trigger refuses; it runs on a delete only, so
    // appends do not pay for it. The events are looked up in the schema
    // of the table the trigger fires on, whatever the deleting
    // connection's `search_path`.
    "ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;
     CREATE OR REPLACE FUNCTION keep_sessions_with_events() RETURNS trigger LANGUAGE plpgsql AS $body$
     DECLARE
        held boolean;
     BEGIN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.events WHERE session_id = $1)',
                       TG_TABLE_SCHEMA)
           INTO held USING OLD.id;
        IF held THEN
           RAISE EXCEPTION 'session % has events: its row would be their only header', OLD.id
              USING ERRCODE = 'foreign_key_violation',
                    HINT = 'sessionlog never removes a session; its events stay with their header';
        END IF;
        RETURN OLD;
     END
     $body$;
     CREATE TRIGGER keep_sessions_with_events BEFORE DELETE ON sessions
        FOR EACH ROW EXECUTE FUNCTION keep_sessions_with_events();",
];

/// Whether the schema has the snapshots table (a read-only reader of a
/// store older than version 3 does not).
pub(super) const HAS_SNAPSHOTS_TABLE: &str = "SELECT to_regclass('snapshots') IS NOT NULL";

/// A session's state snapshot of format $2 (whether its anchor still
/// holds is checked on the anchor event's body: `sql::fold_session`).
pub(super) const READ_SNAPSHOT: &str = "SELECT seq, anchor_crc, state FROM snapshots
      WHERE session_id = $1 AND format = $2";

/// Keeps a session's state snapshot, replacing the one before.
pub(super) const WRITE_SNAPSHOT: &str =
    "INSERT INTO snapshots (session_id, seq, anchor_crc, format, state)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, anchor_crc = excluded.anchor_crc,
       format = excluded.format, state = excluded.state
     RETURNING seq";

/// Creates the store's schema when missing (`$schema` is replaced by the
/// quoted, validated schema name).
pub(super) const CREATE_SCHEMA: &str = "CREATE SCHEMA IF NOT EXISTS $schema";

/// Serialises schema creation and upgrades between processes: a
/// transaction-level advisory lock on a key derived from the schema name.
pub(super) const LOCK_SCHEMA_UPGRADE: &str = "SELECT pg_advisory_xact_lock($1)";

/// Which of a store's tables the schema holds, in one round trip: the
/// version table (through `search_path`: only our schema and
/// `pg_catalog`), whether its `version` is an integer column as a store's
/// is, the session and event tables it comes with, and whether those of
/// them that are there have the columns every version of a store's has
/// (another application's `sessions` or `events` has not).
pub(super) const STORE_TABLES: &str = "SELECT to_regclass('schema_version') IS NOT NULL,
            EXISTS (SELECT 1 FROM pg_attribute
                     WHERE attrelid = to_regclass('schema_version') AND attname = 'version'
                       AND atttypid = 'integer'::regtype AND NOT attisdropped),
            to_regclass('sessions') IS NOT NULL, to_regclass('events') IS NOT NULL,
            NOT EXISTS (SELECT 1 FROM (VALUES ('sessions', 'header_body'), ('sessions', 'header_crc'),
                                              ('events', 'seq'), ('events', 'body'), ('events', 'crc'))
                                      AS wanted (name, col)
                         WHERE to_regclass(wanted.name) IS NOT NULL
                           AND NOT EXISTS (SELECT 1 FROM pg_attribute
                                            WHERE attrelid = to_regclass(wanted.name)
                                              AND attname = wanted.col AND NOT attisdropped))";

/// Whether the schema `$1` exists, whether the connection's role may use
/// it (a schema it may not use is left out of its `search_path`, its
/// tables unseen), the role and the database.
pub(super) const SCHEMA_ACCESS: &str = "SELECT n.oid IS NOT NULL,
            COALESCE(has_schema_privilege(n.oid, 'USAGE'), false),
            current_user::text, current_database()::text
       FROM (VALUES (1)) AS one (x) LEFT JOIN pg_namespace n ON n.nspname = $1";

/// The recorded schema version, with how many rows hold one (a store's
/// `schema_version` holds exactly one).
pub(super) const READ_VERSION: &str = "SELECT count(*), min(version) FROM schema_version";

/// Records the schema version after the upgrade steps.
pub(super) const WRITE_VERSION: &str = "UPDATE schema_version SET version = $1";

/// The current `synchronous_commit` of a connection (`on`, `remote_write`,
/// `remote_apply`, `local` or `off`).
pub(super) const SHOW_SYNCHRONOUS_COMMIT: &str = "SHOW synchronous_commit";

/// Makes commits wait for the WAL flush (`Durability::Fsync`) on a
/// connection whose setting was weaker.
pub(super) const SYNCHRONOUS_COMMIT_ON: &str = "SET synchronous_commit TO on";

/// Takes `synchronous_commit` back to what the connection started with
/// (the server's, the database's or the role's setting, or the URL's
/// `options`), undoing [`SYNCHRONOUS_COMMIT_OFF`].
pub(super) const SYNCHRONOUS_COMMIT_RESET: &str = "RESET synchronous_commit";

/// Lets a `Durability::Buffered` writer's commits return before the flush.
pub(super) const SYNCHRONOUS_COMMIT_OFF: &str = "SET synchronous_commit TO off";

/// Lets one `Durability::Buffered` creation's commit return before the
/// flush (its transaction only).
pub(super) const SYNCHRONOUS_COMMIT_OFF_HERE: &str = "SET LOCAL synchronous_commit TO off";

/// Whether a session exists.
pub(super) const SESSION_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)";

/// Every session id.
pub(super) const SESSION_IDS: &str = "SELECT id FROM sessions";

/// A session's header row, the last seq it records and, for a fork by
/// reference, the session whose rows hold its seeded events.
pub(super) const READ_HEADER: &str =
    "SELECT header_body, header_crc, last_seq, seed_source, created_at, cwd, parent_session,
       seed_length, delegation_depth, sandbox_mode, approval_policy FROM sessions WHERE id = $1";

/// [`READ_HEADER`] in a schema from before version 3 (opened by a reader,
/// which never upgrades it): no session there is a fork by reference.
pub(super) const READ_HEADER_BEFORE_V3: &str =
    "SELECT header_body, header_crc, last_seq, NULL::text, created_at, cwd, parent_session,
       seed_length, delegation_depth, sandbox_mode, approval_policy FROM sessions WHERE id = $1";

/// A page of a session's events, from seq `$2` through seq `$3`, in order.
pub(super) const READ_EVENTS: &str = "SELECT seq, ts, type, batch, body, crc FROM events
     WHERE session_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4";

/// Inserts a new session's header row; no row when the id exists. `$12`
/// is the session whose rows hold a fork by reference's seeded events
/// (NULL for a session that holds all its rows).
pub(super) const INSERT_SESSION: &str = "INSERT INTO sessions (id, created_at, cwd, parent_session,
        seed_length, delegation_depth, sandbox_mode, approval_policy, header_body, header_crc,
        last_seq, seed_source)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (id) DO NOTHING";

/// Whether any event row carries session id `$1` (a new session's id must
/// have none).
pub(super) const HAS_EVENTS: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE session_id = $1)";

/// Inserts a new session's first events (parallel arrays of seq, ts,
/// type, batch, body, crc), in the transaction of its header row.
pub(super) const INSERT_EVENTS: &str =
    "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
     SELECT $1, seq, ts, type, batch, body, crc
     FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::bigint[])
       AS new (seq, ts, type, batch, body, crc)";

/// An append, in one statement and so one transaction: moves the
/// session's last seq from `$2` to `$3` and inserts the events (arrays as
/// in [`INSERT_EVENTS`]) only if it moved. No row is inserted when another
/// writer appended since (the last seq is not `$2`): the caller reports a
/// `Conflict`. The `(session_id, seq)` primary key fences what slips past.
/// Its row count is the number of events inserted.
pub(super) const APPEND: &str = "WITH moved AS (
        UPDATE sessions SET last_seq = $3 WHERE id = $1 AND last_seq = $2 RETURNING id
     )
     INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
     SELECT moved.id, new.seq, new.ts, new.type, new.batch, new.body, new.crc
     FROM moved, unnest($4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::text[],
                        $9::bigint[]) AS new (seq, ts, type, batch, body, crc)";

/// [`APPEND`] of one event, its columns given as values rather than
/// arrays: the append a runtime makes most, without six arrays for the
/// server to decode and unnest.
pub(super) const APPEND_ONE: &str = "WITH moved AS (
        UPDATE sessions SET last_seq = $3 WHERE id = $1 AND last_seq = $2 RETURNING id
     )
     INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
     SELECT moved.id, $4::bigint, $5::bigint, $6::text, $7::bigint, $8::text, $9::bigint
     FROM moved";

/// Appends of several sessions in one statement, so one transaction and
/// one WAL flush (the group commit of `group`): `$1..$3` are each
/// session's id, the last seq its writer expects and its new last seq (no
/// id twice); `$4..$10` the events of all of them, each with its session
/// id, as in [`APPEND`]; `$11` the key of the session's lock its writer
/// took (null for an append that shows none). A session's events are
/// inserted only if its last seq moved and its lock is still held: a
/// writer whose connection the server ended lost the lock with it, and is
/// refused here, where it would otherwise not find out until an append of
/// its own. (Whether someone holds it is whether a shared lock of the key
/// cannot be had; had, it is released at the commit. A lock manager's
/// call a session: reading the server's whole lock table, `pg_locks`, for
/// the holder's backend cost the group a fifth of its rate.) The
/// statement answers the ids of the sessions moved. (The `INSERT` runs to
/// completion although nothing reads its rows: a data-modifying `WITH`
/// always does.)
pub(super) const APPEND_GROUP: &str = "WITH moved AS (
        UPDATE sessions SET last_seq = claim.new_last
        FROM unnest($1::text[], $2::bigint[], $3::bigint[], $11::bigint[])
             AS claim (id, last_seq, new_last, lock_key)
        WHERE sessions.id = claim.id AND sessions.last_seq = claim.last_seq
          AND (claim.lock_key IS NULL OR NOT pg_try_advisory_xact_lock_shared(claim.lock_key))
        RETURNING sessions.id
     ), inserted AS (
        INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
        SELECT moved.id, new.seq, new.ts, new.type, new.batch, new.body, new.crc
        FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::bigint[],
                    $9::text[], $10::bigint[]) AS new (session_id, seq, ts, type, batch, body, crc)
        JOIN moved ON moved.id = new.session_id
     )
     SELECT id FROM moved";

/// How long the group connection's statements wait for a row lock before
/// giving up. An append's row locks are only ever held for an instant by
/// another append; a session row held longer (an administrator's
/// `SELECT … FOR UPDATE`) must not stall the other appends of a group, so
/// the group gives up, and each of its writers runs its append alone.
pub(super) const GROUP_LOCK_TIMEOUT: &str = "SET lock_timeout TO '20ms'";

/// The body of one event row: whether an append whose group did not
/// answer was committed all the same.
pub(super) const READ_EVENT_BODY: &str =
    "SELECT body FROM events WHERE session_id = $1 AND seq = $2";

/// The last seq a session's row records and the lowest and highest seqs
/// of its rows, read in one statement: rows past the recorded last seq
/// are damage, and so are rows among a fork by reference's seeded events.
pub(super) const READ_ROW_BOUNDS: &str = "SELECT (SELECT last_seq FROM sessions WHERE id = $1),
        (SELECT min(seq) FROM events WHERE session_id = $1),
        (SELECT max(seq) FROM events WHERE session_id = $1)";

/// Every session id that owns events (to find events without a session
/// row).
pub(super) const EVENT_OWNERS: &str = "SELECT DISTINCT session_id FROM events";

/// Makes every transaction of a connection read-only, so a store opened
/// for reading cannot write even by mistake.
pub(super) const READ_ONLY_SESSION: &str = "SET default_transaction_read_only TO on";

/// The last seq a session's row records, its row locked against removal
/// until the transaction ends: the parent of a fork by reference, checked
/// in the fork's transaction.
pub(super) const READ_SEED_SOURCE: &str =
    "SELECT last_seq FROM sessions WHERE id = $1 FOR KEY SHARE";

/// The last seq a session's row records (after a refused append).
pub(super) const READ_LAST_SEQ: &str = "SELECT last_seq FROM sessions WHERE id = $1";

/// Takes the writer's lock on a session for the life of its connection
/// (a session-level advisory lock; false when another connection holds it).
pub(super) const TRY_LOCK_SESSION: &str = "SELECT pg_try_advisory_lock($1)";

/// Gives the writer's lock back as the writer closes, so that the next
/// writer can take it at once: the server would release it only once it
/// saw the connection end, some time after the client has let it go.
pub(super) const UNLOCK_SESSION: &str = "SELECT pg_advisory_unlock($1)";

/// Wakes the followers of sessions, after their appends committed: one
/// payload `{"session":…,"seq":…}` per session, on the channel named after
/// the schema, in one statement and a transaction of its own. Notifying
/// gives that transaction an id, so its commit writes a WAL record: the
/// notifier's connection commits with `synchronous_commit` off, since a
/// notification lost in a crash only leaves a follower to its poll.
pub(super) const NOTIFY: &str = "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload";

/// Subscribes a follower's connection to the schema's channel (`$channel`
/// is replaced by the quoted channel name).
pub(super) const LISTEN: &str = "LISTEN $channel";

/// Begins a read of a whole session: one consistent snapshot of its header
/// row and events.
pub(super) const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// Begins a write transaction (creation, migration, upgrade).
pub(super) const BEGIN: &str = "BEGIN";

/// Commits a write transaction.
pub(super) const COMMIT: &str = "COMMIT";

/// Brings the planner's statistics of the store's tables up to date,
/// waiting at most a few seconds for a lock (a VACUUM or another ANALYZE
/// holds the one it needs while it runs).
pub(super) const ANALYZE: &str = "BEGIN; SET LOCAL lock_timeout = '5s'; \
     ANALYZE sessions, events, snapshots; COMMIT";

/// Whether the connection's role owns (or is a member of the owner of)
/// every table `ANALYZE` runs on, in the store's schema.
pub(super) const OWNS_THE_TABLES: &str =
    "SELECT coalesce(bool_and(pg_has_role(tableowner, 'MEMBER')), false) \
     FROM pg_tables WHERE schemaname = current_schema() \
     AND tablename IN ('sessions', 'events', 'snapshots')";

/// Plans each execution of a prepared statement for its own parameters
/// and the tables as they are, for the rest of the transaction.
pub(super) const PLAN_EACH_STATEMENT: &str = "SET LOCAL plan_cache_mode = force_custom_plan";

/// Ends a read, or abandons a write.
pub(super) const ROLLBACK: &str = "ROLLBACK";
