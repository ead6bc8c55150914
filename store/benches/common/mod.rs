//! What more than one bench measures against.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use sessionlog_schema::{split_crc, SessionId};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The naive limit: read the file, check each line's CRC, parse each line
/// into a `serde_json::Value`.
pub fn naive_read(path: &Path, id: &SessionId) -> BenchResult<u64> {
    let mut reader = BufReader::with_capacity(256 * 1024, File::open(path)?);
    let mut line = Vec::new();
    let mut lines = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let Some((body, stored)) = split_crc(&line) else {
            return Err("naive read: no CRC suffix".into());
        };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(id.as_str().as_bytes());
        hasher.update(body);
        if hasher.finalize() != stored && lines > 0 {
            return Err("naive read: CRC mismatch".into());
        }
        let value: serde_json::Value = serde_json::from_slice(&line)?;
        std::hint::black_box(&value);
        lines += 1;
    }
    Ok(lines)
}
