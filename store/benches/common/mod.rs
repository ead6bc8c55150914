//! What more than one bench measures against.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, Instant};

use sessionlog_schema::{split_crc, SessionId};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Runs each of `runs` closures `rounds` times, interleaved (so a noisy
/// machine moves every side alike), and returns the best time of each.
pub fn best_of<const N: usize>(
    rounds: usize,
    mut runs: [&mut dyn FnMut() -> BenchResult<()>; N],
) -> BenchResult<[Duration; N]> {
    let mut best = [Duration::MAX; N];
    for _ in 0..rounds {
        for (index, run) in runs.iter_mut().enumerate() {
            let start = Instant::now();
            run()?;
            best[index] = best[index].min(start.elapsed());
        }
    }
    Ok(best)
}

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
