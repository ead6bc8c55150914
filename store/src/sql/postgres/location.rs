//! Where a PostgreSQL store is: the STORE argument (`postgres://…` or
//! `postgresql://…`) turned into a connection configuration, the store's
//! schema, and the name errors use (the URL without its password).
//!
//! The URL follows libpq: `postgresql://user:password@host:port/dbname?param=value`,
//! with a unix socket folder as a percent-encoded host or `?host=/path`.
//! What the URL leaves out comes from the `PG*` variables libpq reads
//! (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
//! `PGCONNECT_TIMEOUT`, `PGAPPNAME`), then from libpq's defaults (the
//! local socket, port 5432, the OS user). One parameter is sessionlog's
//! own and never reaches the server: `schema=NAME`, the schema the tables
//! live in (`sessionlog` unless given).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use postgres::config::Host;
use postgres::Config;

use crate::store::redact_url as redact;
use crate::StoreError;

/// The schema a store uses when its URL names none.
pub const DEFAULT_SCHEMA: &str = "sessionlog";

/// How long a connection attempt waits unless the URL or
/// `PGCONNECT_TIMEOUT` says otherwise.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed PostgreSQL STORE argument.
#[derive(Clone)]
pub(crate) struct Location {
    pub(crate) config: Config,
    /// The schema name: lowercase letters, digits and `_`, at most 63 bytes.
    pub(crate) schema: String,
    /// The URL as errors show it: no password, ever.
    pub(crate) display: PathBuf,
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Location")
            .field("store", &self.display)
            .finish()
    }
}

impl Location {
    /// How messages name the store `text` (a PostgreSQL URL): as parsed,
    /// without a password; redacted as given when it does not parse.
    pub(crate) fn display_of(text: &str) -> String {
        match Location::parse(Path::new(text)) {
            Ok(location) => location.display.display().to_string(),
            Err(_) => redact(text),
        }
    }

    /// Parses a STORE argument.
    pub(crate) fn parse(path: &Path) -> Result<Location, StoreError> {
        let text = path.to_str().unwrap_or_default();
        let invalid = |reason: String| StoreError::InvalidStore {
            store: PathBuf::from(redact(text)),
            reason,
        };
        // The client reads user information up to the first `@`, even
        // one after a `?`: `?user=me@corp` would make the rest of the URL
        // a host name (a password parameter included, shown in messages),
        // and `alice:pa?ss@db` is a password with a `?` in it.
        if let Some((base, query)) = text.split_once('?') {
            if query.contains('@') && !base.contains('@') {
                return Err(invalid(
                    "its first @ comes after a ?, and the client reads all before that @ as \
                     a user name and password: write a ? in a password as %3F, an @ in the \
                     query as %40 (user=me%40corp)"
                        .to_owned(),
                ));
            }
        }
        // A second `@` that no query parameter explains: an `@` left
        // unescaped in the password, which the client would end it at,
        // taking the rest of it for the host or the path (and showing it
        // in messages).
        if let Some((_, after)) = text
            .split_once("://")
            .unwrap_or(("", text))
            .1
            .split_once('@')
        {
            if crate::store::stray_at(after) {
                return Err(invalid(
                    "its user name and password hold an @: write it %40 (p%40ss)".to_owned(),
                ));
            }
        }
        let (url, schema) = take_schema_parameter(text);
        let schema = schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
        if !valid_schema_name(&schema) {
            return Err(invalid(format!(
                "schema {schema:?} is not a valid name (lowercase letters, digits and _, \
                 starting with a letter or _, at most 63 bytes)"
            )));
        }
        if is_system_schema(&schema) {
            return Err(invalid(format!(
                "schema {schema:?} is the server's own (pg_*, information_schema): a store \
                 lives in a schema of its own"
            )));
        }
        // A URL that asks for TLS is refused as such, rather than
        // connected to without it or refused by the client in its words.
        let tls = url
            .split_once('?')
            .into_iter()
            .flat_map(|(_, query)| query.split('&'))
            .filter_map(|pair| pair.strip_prefix("sslmode="))
            .find(|mode| matches!(*mode, "require" | "verify-ca" | "verify-full"));
        if let Some(mode) = tls {
            return Err(invalid(format!(
                "sslmode={mode} asks for TLS, which sessionlog does not have: it connects \
                 without TLS (sslmode disable or prefer); reach a remote server through a \
                 TLS tunnel, or a local one by its socket"
            )));
        }
        let mut config = Config::from_str(&url).map_err(|error| {
            // The client's words name the parameter in the error's cause:
            // "invalid connection string: unknown option `bogus`".
            let mut reason = format!("not a PostgreSQL URL: {error}");
            let mut cause = std::error::Error::source(&error);
            while let Some(inner) = cause {
                reason.push_str(&format!(": {inner}"));
                cause = inner.source();
            }
            invalid(reason)
        })?;
        apply_environment(&mut config);
        let search_path = format!("-c search_path={schema}");
        let options = match config.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {search_path}"),
            _ => search_path,
        };
        config.options(&options);
        let display = PathBuf::from(display_url(&config, &schema));
        Ok(Location {
            config,
            schema,
            display,
        })
    }

    /// The schema, quoted for SQL.
    pub(crate) fn quoted_schema(&self) -> String {
        format!("\"{}\"", self.schema)
    }
}

/// Splits sessionlog's own `schema=` parameter off a URL.
fn take_schema_parameter(text: &str) -> (String, Option<String>) {
    let Some((base, query)) = text.split_once('?') else {
        return (text.to_owned(), None);
    };
    let mut schema = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(value) => {
                schema = Some(value.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, schema)
}

fn valid_schema_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    first_ok
        && name.len() <= 63
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `name` is a schema the server keeps for itself: `pg_*` names
/// are reserved to it, and `information_schema` is the SQL standard's
/// catalog views.
fn is_system_schema(name: &str) -> bool {
    name.starts_with("pg_") || name == "information_schema"
}

/// Fills what the URL left out from the `PG*` variables and libpq's
/// defaults.
fn apply_environment(config: &mut Config) {
    let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    if config.get_hosts().is_empty() {
        match variable("PGHOST") {
            Some(hosts) => hosts.split(',').for_each(|host| {
                config.host(host);
            }),
            None => {
                config.host_path("/var/run/postgresql");
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = variable("PGPORT").and_then(|port| port.parse().ok()) {
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        // As libpq: the user this process runs as, by the system's name for
        // it (`$USER` only when that cannot be read).
        let user = variable("PGUSER")
            .or_else(system_user_name)
            .or_else(|| variable("USER"))
            .unwrap_or_else(|| "postgres".to_owned());
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        if let Some(dbname) = variable("PGDATABASE") {
            config.dbname(&dbname);
        }
    }
    // An empty password in the URL is none, as libpq takes it: the
    // variable or the password file gives it.
    if config.get_password().is_none_or(<[u8]>::is_empty) {
        let password = variable("PGPASSWORD").or_else(|| {
            let file = variable("PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| variable("HOME").map(|home| PathBuf::from(home).join(".pgpass")))?;
            password_file_entry(&file, config)
        });
        if let Some(password) = password {
            config.password(password);
        }
    }
    if config.get_options().is_none() {
        if let Some(options) = variable("PGOPTIONS") {
            config.options(&options);
        }
    }
    if config.get_connect_timeout().is_none() {
        let timeout = variable("PGCONNECT_TIMEOUT")
            .and_then(|seconds| seconds.parse().ok())
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs);
        config.connect_timeout(timeout);
    }
    if config.get_application_name().is_none() {
        let name = variable("PGAPPNAME").unwrap_or_else(|| "sessionlog".to_owned());
        config.application_name(&name);
    }
}

/// The password the password file at `file` (libpq's `~/.pgpass`, or
/// `PGPASSFILE`) gives the connection of `config`: the first line
/// `host:port:database:user:password` whose first four fields match
/// (`*` matches anything; `\:` and `\\` are a colon and a backslash).
/// As libpq does, a file that others can read or write is not used (a
/// warning says so), nor is one that is missing.
fn password_file_entry(file: &Path, config: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(file).ok()?;
    if !metadata.is_file() {
        return None;
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        // Said once a process for each file, naming it (a URL is parsed
        // again wherever a message names its store).
        static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
        let mut warned = WARNED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !warned.iter().any(|seen| seen == file) {
            warned.push(file.to_owned());
            tracing::warn!(
                "{}: the password file has group or world access; it is not used (chmod 0600 it)",
                file.display()
            );
        }
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        // libpq names a connection through the default socket folder
        // `localhost`, as the file's lines do.
        Some(Host::Unix(path))
            if path == Path::new("/var/run/postgresql") || path == Path::new("/tmp") =>
        {
            "localhost".to_owned()
        }
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    password_in(&text, [&host, &port, database, user])
}

/// The password of the first line of a password file's `text` whose
/// first four fields match `wanted` (host, port, database, user).
fn password_in(text: &str, wanted: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .find_map(|line| {
            let fields = password_file_fields(line);
            let [host, port, database, user, password] = fields.as_slice() else {
                return None;
            };
            let matches = [host, port, database, user]
                .iter()
                .zip(wanted)
                .all(|(field, wanted)| field.as_str() == "*" || field.as_str() == wanted);
            matches.then(|| password.clone())
        })
}

/// A password file line's fields: split at `:`, `\` escaping the next
/// character. As libpq reads it, the fifth field (the password) ends at
/// the next `:` not escaped, and what follows is not read.
fn password_file_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
            ':' => break,
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// The name the system gives the user this process runs as (its effective
/// uid, read as the owner of `/proc/self`, looked up in `/etc/passwd`).
fn system_user_name() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let users = std::fs::read_to_string("/etc/passwd").ok()?;
    users.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let owns = fields.nth(1)?.parse::<u32>().ok()? == uid;
        (owns && !name.is_empty()).then(|| name.to_owned())
    })
}

/// `postgres://user@host:port/dbname?schema=…`, from the configuration:
/// what errors and messages call the store.
fn display_url(config: &Config, schema: &str) -> String {
    let user = config.get_user().unwrap_or_default();
    let host = match config.get_hosts().first() {
        // An IPv6 address is written in brackets, as a URL takes it.
        Some(Host::Tcp(name)) if name.contains(':') => format!("[{name}]"),
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string().replace('/', "%2F"),
        None => String::new(),
    };
    let port = config
        .get_ports()
        .first()
        .map_or(String::new(), |port| format!(":{port}"));
    let dbname = config.get_dbname().unwrap_or(user);
    let mut text = format!("postgres://{user}@{host}{port}/{dbname}");
    if schema != DEFAULT_SCHEMA {
        text.push_str(&format!("?schema={schema}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_file_gives_the_first_line_that_matches() {
        let text = "# comment\n\
                    db.example:5432:app:alice:first\n\
                    *:5433:*:alice:wild\n\
                    localhost:5432:app:alice:p\\:w\\\\d\n\
                    *:*:*:*:any:colon\n";
        let wanted = |host, port, database, user| password_in(text, [host, port, database, user]);
        assert_eq!(
            wanted("db.example", "5432", "app", "alice").as_deref(),
            Some("first")
        );
        assert_eq!(
            wanted("elsewhere", "5433", "x", "alice").as_deref(),
            Some("wild")
        );
        assert_eq!(
            wanted("localhost", "5432", "app", "alice").as_deref(),
            Some("p:w\\d")
        );
        // The password ends at a colon not escaped, as libpq reads it.
        assert_eq!(wanted("h", "1", "d", "bob").as_deref(), Some("any"));
        assert_eq!(password_in("a:b:c\n", ["a", "b", "c", "d"]), None);
    }

    /// The default user is the system's name for the user the process runs
    /// as, as `id -un` gives it, whatever `$USER` says.
    #[test]
    fn the_default_user_is_the_systems_name_for_this_process() {
        let output = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap_or_else(|error| panic!("id -un: {error}"));
        let expected = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        assert_eq!(system_user_name().as_deref(), Some(expected.as_str()));
    }

    #[test]
    fn a_password_file_others_can_read_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let file = folder.path().join("pgpass");
        std::fs::write(&file, "*:*:*:*:secret\n").unwrap_or_else(|error| panic!("{error}"));
        let mut config = Config::new();
        config.host("h").user("u").dbname("d");
        for (mode, expected) in [(0o600, Some("secret")), (0o640, None), (0o604, None)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
                .unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(
                password_file_entry(&file, &config).as_deref(),
                expected,
                "{mode:o}"
            );
        }
    }

    /// The message of `url`'s refusal.
    fn refusal(url: &str) -> String {
        match Location::parse(Path::new(url)) {
            Ok(location) => panic!("{url} was taken: {:?}", location.display),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn an_at_in_the_query_is_refused_without_showing_a_password() {
        let url = "postgres://127.0.0.1:1/logs?user=me@corp&password=s3cretPW";
        let shown = refusal(url);
        assert!(
            shown.contains("%40") && !shown.contains("s3cretPW"),
            "{shown}"
        );
    }

    /// A `?` in a password, before its `@`: the client takes it for the
    /// password, and the refusal shows none of it.
    #[test]
    fn a_question_mark_in_a_password_is_refused_without_showing_it() {
        let url = "postgres://alice:pa?ss-s3cretPW@127.0.0.1:1/logs";
        let shown = refusal(url);
        assert!(
            shown.contains("%3F") && !shown.contains("s3cretPW") && !shown.contains("pa?ss"),
            "{shown}"
        );
        assert_eq!(Location::display_of(url), "postgres://alice…");
    }

    /// An `@` left unescaped in a password: refused, and no part of the
    /// password shown.
    #[test]
    fn an_at_in_a_password_is_refused_without_showing_it() {
        let url = "postgres://alice:p@ss-s3cretPW@127.0.0.1:1/logs";
        let shown = refusal(url);
        assert!(
            shown.contains("%40") && !shown.contains("s3cretPW"),
            "{shown}"
        );
        assert_eq!(Location::display_of(url), "postgres://alice…");
        for url in [
            "postgres://alice:p@ss/s3cretPW@127.0.0.1:1/logs",
            "postgres://alice:p@ss?s3cretPW@127.0.0.1:1/logs",
        ] {
            let shown = refusal(url);
            assert!(
                shown.contains("%40") && !shown.contains("s3cretPW") && !shown.contains("p@ss"),
                "{shown}"
            );
        }
        // An `@` in a parameter's value is the value's.
        let kept = Location::parse(Path::new(
            "postgres://alice:pw@127.0.0.1:1/logs?application_name=a@b",
        ));
        assert!(kept.is_ok(), "{kept:?}");
    }

    #[test]
    fn an_ipv6_host_is_shown_in_brackets() {
        let location = Location::parse(Path::new("postgres://alice:pw@[::1]:5433/app"));
        let shown = location.map(|location| location.display);
        assert!(
            matches!(&shown, Ok(display) if display == Path::new("postgres://alice@[::1]:5433/app")),
            "{shown:?}"
        );
    }

    #[test]
    fn the_servers_own_schemas_are_refused() {
        for schema in ["information_schema", "pg_catalog", "pg_temp", "pg_toast"] {
            let url = format!("postgres://alice@127.0.0.1:5433/app?schema={schema}");
            let refused = Location::parse(Path::new(&url)).map(|location| location.schema);
            assert!(
                matches!(&refused, Err(StoreError::InvalidStore { reason, .. }) if reason.contains("the server's own")),
                "{schema}: {refused:?}"
            );
        }
        let url = "postgres://alice@127.0.0.1:5433/app?schema=pgx_information_schema";
        assert!(Location::parse(Path::new(url)).is_ok());
    }

    #[test]
    fn the_schema_parameter_is_ours_and_the_password_never_shows() {
        let location = Location::parse(Path::new(
            "postgresql://alice:s3cret@127.0.0.1:5433/app?schema=tenant_7&connect_timeout=3",
        ))
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(location.schema, "tenant_7");
        assert_eq!(
            location.display,
            Path::new("postgres://alice@127.0.0.1:5433/app?schema=tenant_7")
        );
        assert_eq!(
            location.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert_eq!(location.config.get_password(), Some(&b"s3cret"[..]));
    }

    #[test]
    fn a_bad_url_or_schema_is_refused_without_its_password() {
        for (url, expected) in [
            ("postgres://bob:hunter2@h/db?schema=Bad-Name", "schema"),
            (
                "postgres://bob:hunter2@h:notaport/db",
                "not a PostgreSQL URL",
            ),
            (
                "postgres://bob@h/db?password=hunter2&bogus=1",
                "not a PostgreSQL URL: invalid connection string: unknown option `bogus`",
            ),
            (
                "postgres://bob:hunter2@h/db?connect_timeout=abc",
                "invalid value for option `connect_timeout`",
            ),
            (
                "postgres://bob:hunter2@h/db?sslmode=verify-full",
                "sslmode=verify-full asks for TLS, which sessionlog does not have",
            ),
            (
                "postgres://bob:hunter2@h/db?schema=s&sslmode=require",
                "sslmode=require asks for TLS",
            ),
        ] {
            let Err(error) = Location::parse(Path::new(url)) else {
                panic!("{url} was accepted");
            };
            let message = error.to_string();
            assert!(message.contains(expected), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn schema_names_are_checked() {
        for (name, valid) in [
            ("sessionlog", true),
            ("_x9", true),
            ("9x", false),
            ("a\"b", false),
            ("", false),
            (&"a".repeat(64), false),
        ] {
            assert_eq!(valid_schema_name(name), valid, "{name}");
        }
    }
}
