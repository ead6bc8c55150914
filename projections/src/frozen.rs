//! The bytes of a decoded snapshot, which the parts of a state read in
//! place: held whole, or read page by page as lookups land on them.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Where the pages of a snapshot read page by page are: a file kept
/// open, say. Reads must give the bytes as they were written; each page
/// is checked against its CRC once read, so a source that changed or
/// fails gives an unreadable page, never wrong bytes.
pub trait PageSource: Send + Sync + fmt::Debug {
    /// Fills `buffer` with the bytes at `offset` of the source.
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> std::io::Result<()>;
}

/// One page of a snapshot read page by page: its length and the CRC32 of
/// its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPage {
    /// Its length in bytes.
    pub len: u32,
    /// The CRC32 of its bytes.
    pub crc: u32,
}

/// A snapshot's state bytes, shared by the parts of the state that read
/// them in place and never changed.
pub(crate) type Frozen = Arc<FrozenBytes>;

/// The bytes of a decoded snapshot's state: all of them in memory, or
/// pages of a [`PageSource`], each read and checked against its CRC the
/// first time a read lands on it and kept from then on.
pub(crate) struct FrozenBytes {
    kept: Kept,
}

enum Kept {
    Whole(Vec<u8>),
    Paged(Paged),
}

struct Paged {
    source: Box<dyn PageSource>,
    /// Where byte 0 of the state is in the source.
    offset: u64,
    /// Where each page starts in the state, and the state's length last.
    starts: Vec<usize>,
    /// Each page's CRC.
    crcs: Vec<u32>,
    /// Each page's bytes once read; `None` for one that could not be read
    /// or did not match its CRC.
    loaded: Vec<OnceLock<Option<Box<[u8]>>>>,
    /// Whether a page could not be read.
    failed: AtomicBool,
    /// For each bucket of `1 << BUCKET_SHIFT` bytes of the state, the
    /// page holding its first byte: a read finds its page among the few that start in its
    /// bucket, not by a search of them all.
    buckets: Vec<u32>,
}

/// The bytes of a bucket of [`Paged::buckets`]: a page is at least four
/// times as long, so a bucket starts at most two pages.
const BUCKET_SHIFT: u32 = 12;

impl FrozenBytes {
    /// Bytes held whole.
    pub(crate) fn whole(bytes: Vec<u8>) -> FrozenBytes {
        FrozenBytes {
            kept: Kept::Whole(bytes),
        }
    }

    /// The state of `pages`, one after the other from byte `offset` of
    /// `source`.
    pub(crate) fn paged(
        source: Box<dyn PageSource>,
        offset: u64,
        pages: Vec<SnapshotPage>,
    ) -> Result<FrozenBytes, String> {
        let mut starts = Vec::with_capacity(pages.len() + 1);
        let mut at = 0usize;
        for page in &pages {
            starts.push(at);
            at = usize::try_from(page.len)
                .ok()
                .and_then(|len| at.checked_add(len))
                .ok_or_else(|| "its pages are longer than memory".to_owned())?;
        }
        starts.push(at);
        if offset.checked_add(at as u64).is_none() {
            return Err("its pages end past any file".to_owned());
        }
        if pages.is_empty() || pages.iter().any(|page| page.len == 0) {
            return Err("it has an empty page, or none".to_owned());
        }
        u32::try_from(pages.len()).map_err(|_| "too many pages".to_owned())?;
        let mut buckets = Vec::with_capacity((at >> BUCKET_SHIFT) + 1);
        let mut page = 0usize;
        for bucket in 0..=(at >> BUCKET_SHIFT) {
            let first = bucket << BUCKET_SHIFT;
            while page + 1 < pages.len() && starts[page + 1] <= first {
                page += 1;
            }
            buckets.push(page as u32);
        }
        Ok(FrozenBytes {
            kept: Kept::Paged(Paged {
                source,
                offset,
                starts,
                loaded: pages.iter().map(|_| OnceLock::new()).collect(),
                crcs: pages.iter().map(|page| page.crc).collect(),
                failed: AtomicBool::new(false),
                buckets,
            }),
        })
    }

    /// How many bytes the state has.
    pub(crate) fn len(&self) -> usize {
        match &self.kept {
            Kept::Whole(bytes) => bytes.len(),
            Kept::Paged(paged) => paged.starts.last().copied().unwrap_or(0),
        }
    }

    /// The bytes at `range`: `None` when they are not within the state,
    /// or (read page by page) not within one page, or on a page that
    /// could not be read.
    pub(crate) fn get(&self, range: Range<usize>) -> Option<&[u8]> {
        match &self.kept {
            Kept::Whole(bytes) => bytes.get(range),
            Kept::Paged(paged) => paged.get(range),
        }
    }

    /// Whether a page could not be read or did not match its CRC: what
    /// was read of the state since may be wrong.
    pub(crate) fn failed(&self) -> bool {
        match &self.kept {
            Kept::Whole(_) => false,
            Kept::Paged(paged) => paged.failed.load(Ordering::Acquire),
        }
    }

    /// Reads every page not read yet: whether every page could be read
    /// and matched its CRC (true for bytes held whole).
    pub(crate) fn read_every_page(&self) -> bool {
        if let Kept::Paged(paged) = &self.kept {
            for (index, loaded) in paged.loaded.iter().enumerate() {
                loaded.get_or_init(|| paged.read(index));
            }
        }
        !self.failed()
    }

    /// Whether pages are read as reads land on them.
    pub(crate) fn is_paged(&self) -> bool {
        matches!(self.kept, Kept::Paged(_))
    }
}

impl Paged {
    fn get(&self, range: Range<usize>) -> Option<&[u8]> {
        // A read across pages, or past the state, is none the encoder's
        // cuts allow: the pages were not cut by it.
        let index = self
            .page_of(range.start)
            .filter(|&index| range.start <= range.end && range.end <= self.starts[index + 1]);
        let Some(index) = index else {
            self.failed.store(true, Ordering::Release);
            return None;
        };
        let start = self.starts[index];
        let page = self.loaded[index]
            .get_or_init(|| self.read(index))
            .as_deref()?;
        page.get(range.start - start..range.end - start)
    }

    /// The page holding byte `at` (or, for `at` at the state's end, the
    /// last page).
    fn page_of(&self, at: usize) -> Option<usize> {
        let bucket = at >> BUCKET_SHIFT;
        let low = *self.buckets.get(bucket)? as usize;
        let high = self
            .buckets
            .get(bucket + 1)
            .map_or(self.crcs.len() - 1, |&page| page as usize);
        // The last page of `low..=high` that starts at or before `at`.
        let later = self.starts.get(low + 1..=high)?;
        Some(low + later.partition_point(|&start| start <= at))
    }

    /// Page `index`, read and checked against its CRC.
    fn read(&self, index: usize) -> Option<Box<[u8]>> {
        let (start, end) = (self.starts[index], self.starts[index + 1]);
        let mut bytes = vec![0u8; end - start].into_boxed_slice();
        let read = self.source.read_at(&mut bytes, self.offset + start as u64);
        if read.is_err() || crc32fast::hash(&bytes) != self.crcs[index] {
            self.failed.store(true, Ordering::Release);
            return None;
        }
        Some(bytes)
    }
}

impl fmt::Debug for FrozenBytes {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kept {
            Kept::Whole(bytes) => write!(formatter, "FrozenBytes::Whole({} bytes)", bytes.len()),
            Kept::Paged(paged) => write!(
                formatter,
                "FrozenBytes::Paged({} bytes in {} pages of {:?})",
                self.len(),
                paged.crcs.len(),
                paged.source
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Bytes(Vec<u8>);

    impl PageSource for Bytes {
        fn read_at(&self, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
            let start = offset as usize;
            let bytes = self
                .0
                .get(start..start + buffer.len())
                .ok_or_else(|| std::io::Error::other("past the end"))?;
            buffer.copy_from_slice(bytes);
            Ok(())
        }
    }

    fn paged(source: &[u8], cuts: &[usize], damaged: Option<usize>) -> FrozenBytes {
        let mut pages = Vec::new();
        let mut bounds = cuts.to_vec();
        bounds.push(source.len());
        let mut start = 0;
        for end in bounds {
            pages.push(SnapshotPage {
                len: (end - start) as u32,
                crc: crc32fast::hash(&source[start..end]),
            });
            start = end;
        }
        let mut stored = b"head".to_vec();
        stored.extend_from_slice(source);
        if let Some(at) = damaged {
            stored[4 + at] ^= 1;
        }
        match FrozenBytes::paged(Box::new(Bytes(stored)), 4, pages) {
            Ok(bytes) => bytes,
            Err(error) => panic!("pages: {error}"),
        }
    }

    #[test]
    fn reads_within_a_page_give_the_bytes_and_reads_across_pages_give_none_and_are_told() {
        let source: Vec<u8> = (0..20_000).map(|at| at as u8).collect();
        let cuts = [10, 40, 41, 4096, 4097, 9000, 17_000];
        let bytes = paged(&source, &cuts, None);
        assert_eq!(bytes.len(), 20_000);
        let mut starts = vec![0];
        starts.extend(cuts);
        starts.push(20_000);
        for page in starts.windows(2) {
            let (start, end) = (page[0], page[1]);
            assert_eq!(bytes.get(start..end), Some(&source[start..end]));
            assert_eq!(bytes.get(end - 1..end), Some(&source[end - 1..end]));
            assert_eq!(bytes.get(start..start), Some(&[][..]));
        }
        assert_eq!(bytes.get(20_000..20_000), Some(&[][..]));
        assert!(!bytes.failed());
        for across in [
            9..11,
            4095..4097,
            8999..9001,
            19_990..20_001,
            20_001..20_001,
        ] {
            let bytes = paged(&source, &cuts, None);
            assert_eq!(bytes.get(across.clone()), None, "{across:?}");
            assert!(bytes.failed(), "{across:?}");
        }
    }

    #[test]
    fn a_page_that_does_not_match_its_crc_reads_as_none_and_is_told() {
        let source: Vec<u8> = (0..100).collect();
        let bytes = paged(&source, &[50], Some(60));
        assert_eq!(bytes.get(0..50), Some(&source[0..50]));
        assert!(!bytes.failed(), "the damaged page was not read yet");
        assert_eq!(bytes.get(55..56), None);
        assert!(bytes.failed());
        // Still none, read once.
        assert_eq!(bytes.get(50..51), None);
    }
}
