//! `SharedTextReader`: a buffered source whose buffer is text that the
//! records read from it share, so that a long read makes no copy of each
//! body ([`BodyRoom::Shared`](sessionlog_schema::BodyRoom)).
//!
//! Each fill reads a block of the file, cuts it after its last `\n` (the
//! bytes after wait for the next block) and checks the block's UTF-8 once,
//! whole. A block that holds no `\n` (a part of a line longer than a
//! block) or is not UTF-8 is given as bytes, and the records of its lines
//! are copied as a `BufReader`'s are. Blocks no record holds any longer are
//! filled again, not freed: the reader keeps the few it gave out last.

use std::collections::VecDeque;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::sync::Arc;

use crate::reader::{Lend, Rewind};

/// How many blocks given out a reader keeps, to fill again once no record
/// holds them: more than a long fold's batches in flight span.
const KEPT_BLOCKS: usize = 32;

/// A buffered reader of `R` whose blocks of text records may share.
#[derive(Debug)]
pub(crate) struct SharedTextReader<R> {
    inner: R,
    /// The bytes a fill reads at most.
    capacity: usize,
    block: Block,
    /// How much of the block was consumed.
    at: usize,
    /// The bytes read after the block's last `\n`: the start of the next.
    rest: Vec<u8>,
    /// The blocks given out last, the oldest first.
    kept: VecDeque<Arc<String>>,
}

/// The bytes a [`SharedTextReader`] holds buffered.
#[derive(Debug)]
enum Block {
    /// UTF-8 lines, each up to its `\n`, that records may share.
    Text(Arc<String>),
    /// Bytes only: a part of a long line, or not UTF-8.
    Bytes(Vec<u8>),
}

impl Block {
    fn bytes(&self) -> &[u8] {
        match self {
            Block::Text(text) => text.as_bytes(),
            Block::Bytes(bytes) => bytes,
        }
    }
}

impl<R: Read> SharedTextReader<R> {
    /// Reads `inner` in blocks of `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize, inner: R) -> Self {
        SharedTextReader {
            inner,
            capacity: capacity.max(1),
            block: Block::Bytes(Vec::new()),
            at: 0,
            rest: Vec::new(),
            kept: VecDeque::new(),
        }
    }

    /// Puts the block aside, empty: a block of text joins those kept, to be
    /// filled again once no record holds it; bytes keep their room. Nothing
    /// of it can be read or moved back into after.
    fn set_aside(&mut self) {
        match std::mem::replace(&mut self.block, Block::Bytes(Vec::new())) {
            Block::Text(text) => {
                if self.kept.len() == KEPT_BLOCKS {
                    self.kept.pop_front();
                }
                self.kept.push_back(text);
            }
            Block::Bytes(mut bytes) => {
                bytes.clear();
                self.block = Block::Bytes(bytes);
            }
        }
        self.at = 0;
    }

    /// Room for the next block: the room of bytes set aside, a block no
    /// record holds any longer, else a new one. Its bytes are initialised,
    /// so a read can fill them.
    fn room(&mut self) -> Vec<u8> {
        self.set_aside();
        let mut room = match &mut self.block {
            Block::Bytes(bytes) if bytes.capacity() > 0 => std::mem::take(bytes),
            _ => {
                let free = self
                    .kept
                    .iter_mut()
                    .position(|block| Arc::get_mut(block).is_some());
                match free.and_then(|index| self.kept.remove(index)) {
                    Some(block) => Arc::try_unwrap(block)
                        .map(String::into_bytes)
                        .unwrap_or_default(),
                    None => Vec::new(),
                }
            }
        };
        let wanted = self.rest.len() + self.capacity;
        if room.len() < wanted {
            room.resize(wanted, 0);
        }
        room
    }

    /// Reads the next block: the bytes left after the last one's last
    /// `\n`, then what one read gives, cut after its last `\n`.
    fn fill(&mut self) -> std::io::Result<()> {
        let mut room = self.room();
        let rest = self.rest.len();
        room[..rest].copy_from_slice(&self.rest);
        // A block room kept from a longer one is read into no further than
        // the capacity: a block stays under twice the capacity.
        let read = loop {
            match self.inner.read(&mut room[rest..rest + self.capacity]) {
                Ok(read) => break read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.block = Block::Bytes(room);
                    self.set_aside();
                    return Err(error);
                }
            }
        };
        let filled = rest + read;
        // At the end of the file, what is left is the last (unfinished)
        // line; a block with no `\n` is a part of a line longer than a
        // block. Either is given whole.
        let end = match read {
            0 => filled,
            _ => memchr::memrchr(b'\n', &room[..filled]).map_or(filled, |last| last + 1),
        };
        self.rest.clear();
        self.rest.extend_from_slice(&room[end..filled]);
        room.truncate(end);
        self.block = match String::from_utf8(room) {
            Ok(text) if !text.is_empty() => Block::Text(Arc::new(text)),
            Ok(text) => Block::Bytes(text.into_bytes()),
            Err(error) => Block::Bytes(error.into_bytes()),
        };
        self.at = 0;
        Ok(())
    }
}

impl<R: Read> Read for SharedTextReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let read = available.len().min(buf.len());
        buf[..read].copy_from_slice(&available[..read]);
        self.consume(read);
        Ok(read)
    }
}

impl<R: Read> BufRead for SharedTextReader<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.at >= self.block.bytes().len() {
            self.fill()?;
        }
        Ok(&self.block.bytes()[self.at..])
    }

    fn consume(&mut self, amount: usize) {
        self.at = (self.at + amount).min(self.block.bytes().len());
    }
}

impl<R: Read> Lend for SharedTextReader<R> {
    fn buffered(&self) -> &[u8] {
        &self.block.bytes()[self.at..]
    }

    fn shared(&self) -> Option<(&Arc<String>, usize)> {
        match &self.block {
            Block::Text(text) => Some((text, self.at)),
            Block::Bytes(_) => None,
        }
    }
}

impl<R: Read + Seek> Rewind for SharedTextReader<R> {
    fn can_rewind(&self) -> bool {
        true
    }

    fn rewind_by(&mut self, bytes: u64) -> std::io::Result<()> {
        // Within the block, the block is kept.
        if let Some(at) = usize::try_from(bytes)
            .ok()
            .and_then(|back| self.at.checked_sub(back))
        {
            self.at = at;
            return Ok(());
        }
        let ahead = (self.block.bytes().len() - self.at + self.rest.len()) as u64;
        let back = bytes
            .checked_add(ahead)
            .and_then(|back| i64::try_from(back).ok())
            .ok_or_else(|| std::io::Error::other("a move back beyond any file"))?;
        self.inner.seek(SeekFrom::Current(-back))?;
        self.rest.clear();
        self.set_aside();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use proptest::prelude::*;

    use super::*;

    /// A source that reads at most `step` bytes at a time, and is
    /// interrupted before every other read.
    #[derive(Debug)]
    struct Trickle {
        bytes: Cursor<Vec<u8>>,
        step: usize,
        interrupt: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let step = buf.len().min(self.step);
            self.bytes.read(&mut buf[..step])
        }
    }

    impl Seek for Trickle {
        fn seek(&mut self, position: SeekFrom) -> std::io::Result<u64> {
            self.bytes.seek(position)
        }
    }

    /// Every line of `reader`, with whether it was shared and from where.
    fn lines_of(reader: &mut SharedTextReader<Trickle>) -> Vec<(Vec<u8>, bool)> {
        let mut lines = Vec::new();
        loop {
            let buffered = reader.fill_buf().expect("a read");
            if buffered.is_empty() {
                return lines;
            }
            let line = match memchr::memchr(b'\n', buffered) {
                Some(end) => &buffered[..=end],
                None => buffered,
            };
            let line = line.to_vec();
            let shared = match reader.shared() {
                Some((text, at)) => {
                    assert_eq!(&text.as_bytes()[at..at + line.len()], &line[..]);
                    true
                }
                None => false,
            };
            reader.consume(line.len());
            lines.push((line, shared));
        }
    }

    fn trickle(bytes: &[u8], step: usize) -> Trickle {
        Trickle {
            bytes: Cursor::new(bytes.to_vec()),
            step,
            interrupt: false,
        }
    }

    proptest! {
        /// The reader gives every byte once, in order, whatever the block
        /// size, the size of the source's reads and its interruptions; a
        /// line it lends from shared text is that text's, and is shared
        /// whenever it is UTF-8 and lies whole in a block.
        #[test]
        fn gives_every_byte_in_order(
            pieces in prop::collection::vec(
                prop_oneof![
                    "[a-z]{0,12}\n".prop_map(String::into_bytes),
                    "[a-zé€😀]{0,6}\n?".prop_map(String::into_bytes),
                    prop::collection::vec(any::<u8>(), 0..6),
                ],
                0..40,
            ),
            capacity in 1usize..40,
            step in 1usize..50,
        ) {
            let bytes: Vec<u8> = pieces.concat();
            let mut reader = SharedTextReader::with_capacity(capacity, trickle(&bytes, step));
            prop_assert_eq!(lines_of(&mut reader).concat_bytes(), bytes);
        }

        /// Moving back by any number of the bytes consumed, within the block
        /// or beyond it, and again before the next read, gives them again.
        #[test]
        fn moves_back_over_what_it_gave(
            text in "([a-z]{0,9}\n){1,30}",
            capacity in 1usize..40,
            step in 1usize..50,
            moves in prop::collection::vec((0usize..120, 0usize..120, any::<bool>()), 1..6),
        ) {
            let bytes = text.into_bytes();
            let mut reader = SharedTextReader::with_capacity(capacity, trickle(&bytes, step));
            // Where the reader is in `bytes`.
            let mut at = 0;
            for (forward, back, read_between) in moves {
                let forward = forward.min(bytes.len() - at);
                let mut taken = 0;
                while taken < forward {
                    let available = reader.fill_buf().expect("a read").len();
                    let amount = available.min(forward - taken);
                    reader.consume(amount);
                    taken += amount;
                }
                at += forward;
                let back = back.min(at);
                reader.rewind_by(back as u64).expect("a move back");
                at -= back;
                if read_between {
                    let first = reader.fill_buf().expect("a read").first().copied();
                    prop_assert_eq!(first, bytes.get(at).copied());
                }
            }
            let mut again = Vec::new();
            reader.read_to_end(&mut again).expect("a read");
            prop_assert_eq!(&again[..], &bytes[at..]);
        }
    }

    /// Two moves back with no read between, the first beyond the block:
    /// the second moves back in the file, not into the block set aside.
    #[test]
    fn a_second_move_back_after_one_beyond_the_block_reads_the_file() {
        let text = b"aaaa\nbbbb\ncccc\ndddd\n";
        let mut reader = SharedTextReader::with_capacity(10, trickle(text, 10));
        let mut consumed = 0;
        while consumed < 10 {
            let available = reader.fill_buf().expect("a read").len();
            reader.consume(available);
            consumed += available;
        }
        let available = reader.fill_buf().expect("a read").len();
        reader.consume(available);
        for back in [5, 6, 1] {
            reader.rewind_by(back).expect("a move back");
        }
        let mut again = Vec::new();
        reader.read_to_end(&mut again).expect("a read");
        assert_eq!(again, b"b\ncccc\ndddd\n");
    }

    /// A block is the capacity read and the unfinished line carried into
    /// it, less than a capacity (a line that does not fit is given whole,
    /// nothing carried), whatever the room it was filled into held before.
    #[test]
    fn a_block_is_under_twice_the_capacity() {
        let mut text = String::new();
        for len in (0..40).map(|n| n * 60) {
            text.push_str(&"x".repeat(len));
            text.push('\n');
        }
        let capacity = 256;
        let mut reader =
            SharedTextReader::with_capacity(capacity, trickle(text.as_bytes(), 1 << 20));
        let mut given = Vec::new();
        loop {
            let block = reader.block.bytes().len();
            assert!(block < 2 * capacity, "a block of {block} bytes");
            let available = reader.fill_buf().expect("a read").to_vec();
            if available.is_empty() {
                break;
            }
            reader.consume(available.len());
            given.extend(available);
        }
        assert_eq!(given, text.as_bytes());
    }

    #[test]
    fn lines_whole_in_a_block_are_shared_and_blocks_are_filled_again() {
        let text = "one\ntwo\nthree\n".repeat(200);
        let mut reader = SharedTextReader::with_capacity(64, trickle(text.as_bytes(), 64));
        let lines = lines_of(&mut reader);
        assert!(lines.iter().all(|(_, shared)| *shared), "{lines:?}");
        // No record held a block: one was filled again and again.
        assert!(reader.kept.len() <= 1, "{} blocks kept", reader.kept.len());
    }

    #[test]
    fn a_block_held_by_a_record_is_not_filled_again() {
        let text = "one\ntwo\nthree\n".repeat(20);
        let mut reader = SharedTextReader::with_capacity(16, trickle(text.as_bytes(), 16));
        let mut held = Vec::new();
        loop {
            if reader.fill_buf().expect("a read").is_empty() {
                break;
            }
            let (block, _) = reader.shared().expect("text");
            held.push(Arc::clone(block));
            let len = reader.buffered().len();
            reader.consume(len);
        }
        let text_again: String = held.iter().map(|block| block.as_str()).collect();
        assert_eq!(text_again, text);
    }

    #[test]
    fn records_read_from_blocks_share_them_and_equal_those_read_from_bytes() {
        use std::path::Path;

        use sessionlog_schema::{EventRecord, SessionHeader, SessionId};

        use crate::reader::{LogReader, SessionStream};

        let id = SessionId::parse("s").expect("a valid id");
        let mut log = SessionHeader::root(id.clone(), 1, "/work".to_owned()).encode();
        for seq in 1..=500 {
            let data = format!(r#"{{"text":"{}"}}"#, "é".repeat(seq as usize % 40));
            log.push_str(&EventRecord::new(seq, 7, None, "note", &data).encode(&id));
        }
        let records = |source: &mut dyn SessionStream| {
            let mut records = Vec::new();
            while let Some((record, _)) = source.next_event_unproven().expect("a good log") {
                records.push(record);
            }
            records
        };
        let longest = log.lines().map(str::len).max().unwrap_or(0);
        let path = Path::new("s.jsonl");
        let mut bytes = LogReader::new(Cursor::new(log.as_bytes()), path, None).expect("a header");
        let from_bytes = records(&mut bytes);
        for block in [64, 1000, 1 << 16] {
            let source = SharedTextReader::with_capacity(block, trickle(log.as_bytes(), block));
            let mut shared = LogReader::new(source, path, None).expect("a header");
            let from_blocks = records(&mut shared);
            assert_eq!(from_blocks, from_bytes);
            // A shared body leaves no room of its own when given up. A
            // line longer than a block spans two, and is copied; no other.
            let copied = from_blocks
                .into_iter()
                .filter(|record| !record.clone().into_body().is_empty())
                .count();
            match block > longest {
                true => assert_eq!(copied, 0, "blocks of {block} bytes"),
                false => assert!(copied > 0, "blocks of {block} bytes"),
            }
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_given_unshared() {
        let mut bytes = b"good\n".to_vec();
        bytes.extend_from_slice(b"ba\xffd\nlast\n");
        let mut reader = SharedTextReader::with_capacity(1024, trickle(&bytes, 1024));
        let lines = lines_of(&mut reader);
        assert_eq!(lines.concat_bytes(), bytes);
        assert!(lines.iter().all(|(_, shared)| !*shared), "{lines:?}");
    }

    trait ConcatBytes {
        fn concat_bytes(&self) -> Vec<u8>;
    }

    impl ConcatBytes for Vec<(Vec<u8>, bool)> {
        fn concat_bytes(&self) -> Vec<u8> {
            self.iter().flat_map(|(line, _)| line.clone()).collect()
        }
    }
}
