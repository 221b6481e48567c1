//! The records a ring's bytes travel in (see `ring`, "Records"): each publish is
//! one record, a seal word and then its bytes, starting on a cache line; and a
//! reader's [`Window`] onto the records it found, read as one run of bytes.

/// Records start at multiples of this (a cache line), so that the seal and the first
/// bytes of a small message reach the reader in one line.
pub(crate) const ALIGN: u64 = 64;
/// The seal word at the start of each record.
pub(crate) const SEAL: u64 = 8;
/// Records a window holds at most; a reader takes the rest in its next pass. Few,
/// so that a window is cheap to make and to move (one is made per read pass).
pub(crate) const WINDOW_RECORDS: usize = 8;

/// What the seal at a record start holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Nothing published here yet: the producer cleared the slot before a reader
    /// could reach it.
    Empty,
    /// A record whose bytes run from the slot's position plus [`SEAL`] to here.
    Data(u64),
}

/// The seal `seal` found at record start `at` in a ring of `cap` bytes; `None` for a
/// value no honest producer writes there (bytes beyond the ring, or behind `at`).
pub(crate) fn parse(seal: u64, at: u64, cap: u64) -> Option<Slot> {
    if seal == 0 {
        return Some(Slot::Empty);
    }
    (seal > at + SEAL && seal - at <= cap).then_some(Slot::Data(seal))
}

/// One record's bytes in a window: window bytes `at..at + len` lie at ring
/// positions `pos..pos + len` (a window spans at most a ring: `u32` offsets).
#[derive(Clone, Copy, Default)]
struct Run {
    pos: u64,
    at: u32,
    len: u32,
}

impl Run {
    fn end(&self) -> u64 {
        u64::from(self.at) + u64::from(self.len)
    }
}

/// The bytes a reader found, as window positions `0..len()`: the rest of the record
/// it stood in, then whole records in order (their seals and padding left out).
pub(crate) struct Window {
    runs: [Run; WINDOW_RECORDS],
    n: usize,
    len: u64,
    /// Where reading stood when the window was taken: `(head, end)` as
    /// [`Window::position`] gives them.
    from: (u64, u64),
}

impl Window {
    /// An empty window for a reader at ring position `head`, inside a record whose
    /// bytes end at `end` (or at a record start: `end <= head`).
    pub(crate) fn new(head: u64, end: u64) -> Window {
        Window {
            runs: [Run::default(); WINDOW_RECORDS],
            n: 0,
            len: 0,
            from: (head, end),
        }
    }

    /// Adds the `len` bytes at ring position `pos`: a record's (or the rest of one),
    /// the next record starting on the line after them. The window is not full.
    pub(crate) fn push(&mut self, pos: u64, len: u64) {
        debug_assert!(!self.is_full() && self.len + len <= u64::from(u32::MAX));
        self.runs[self.n] = Run {
            pos,
            at: self.len as u32,
            len: len as u32,
        };
        self.n += 1;
        self.len += len;
    }

    /// Whether the window holds all the records it can: more may wait beyond it.
    pub(crate) fn is_full(&self) -> bool {
        self.n == WINDOW_RECORDS
    }

    /// Where the record after the window's last one starts (`None` while empty).
    pub(crate) fn next_start(&self) -> Option<u64> {
        let last = self.runs[..self.n].last()?;
        Some((last.pos + u64::from(last.len)).next_multiple_of(ALIGN))
    }

    /// Bytes in the window.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The ring position of window bytes `at..at + len` if one record holds them
    /// all (the common case: a frame inside one record).
    pub(crate) fn within_one(&self, at: u64, len: usize) -> Option<u64> {
        let r = self.runs[..self.n]
            .iter()
            .find(|r| at < r.end() || (len == 0 && at == r.end()))?;
        let from = at - u64::from(r.at);
        (from + len as u64 <= u64::from(r.len)).then_some(r.pos + from)
    }

    /// The ring pieces `(position, length)` of window bytes `at..at + len`, in
    /// order; the caller keeps inside `0..len()`.
    pub(crate) fn pieces(&self, at: u64, len: usize) -> impl Iterator<Item = (u64, usize)> + '_ {
        let end = at + len as u64;
        self.runs[..self.n]
            .iter()
            .filter(move |r| u64::from(r.at) < end && at < r.end())
            .map(move |r| {
                let from = at.max(u64::from(r.at));
                let to = end.min(r.end());
                (r.pos + (from - u64::from(r.at)), (to - from) as usize)
            })
    }

    /// Where reading stands once the window's bytes before `to` are consumed:
    /// `(head, end)`, the ring position to go on from and, inside a record, where its
    /// bytes end (at a record start: 0). At a record's last byte it moves on to the
    /// next record's start.
    pub(crate) fn position(&self, to: u64) -> (u64, u64) {
        if to == 0 {
            return self.from;
        }
        for r in &self.runs[..self.n] {
            let ends = r.pos + u64::from(r.len);
            if to < r.end() {
                return (r.pos + (to - u64::from(r.at)), ends);
            }
            if to == r.end() {
                return (ends.next_multiple_of(ALIGN), 0);
            }
        }
        debug_assert!(false, "consumed past the window");
        self.from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1 << 20;

    #[test]
    fn seals_are_taken_only_when_an_honest_producer_could_have_written_them() {
        assert_eq!(parse(0, 640, CAP), Some(Slot::Empty));
        assert_eq!(parse(640 + SEAL + 1, 640, CAP), Some(Slot::Data(649)));
        assert_eq!(parse(640 + CAP, 640, CAP), Some(Slot::Data(640 + CAP)));
        // A record with no bytes, one reaching behind its start, one beyond the ring.
        assert_eq!(parse(640 + SEAL, 640, CAP), None);
        assert_eq!(parse(600, 640, CAP), None);
        assert_eq!(parse(641 + CAP, 640, CAP), None);
    }

    #[test]
    fn a_window_reads_its_records_as_one_run_and_says_where_reading_stands() {
        // The rest of a record (ring 100..164), then two records' bytes.
        let mut w = Window::new(100, 164);
        w.push(100, 64);
        w.push(200, 10);
        w.push(1 << 20, 30);
        assert_eq!(w.len(), 104);
        assert_eq!(w.next_start(), Some((1 << 20) + 64));
        let pieces: Vec<_> = w.pieces(60, 20).collect();
        assert_eq!(pieces, [(160, 4), (200, 10), (1 << 20, 6)]);
        assert_eq!(w.within_one(60, 20), None, "across three records");
        assert_eq!(w.within_one(66, 8), Some(202));
        assert_eq!(w.within_one(74, 30), Some(1 << 20));
        assert_eq!(w.within_one(74, 31), None, "past the window");
        assert_eq!(w.position(0), (100, 164), "nothing consumed");
        assert_eq!(w.position(10), (110, 164), "inside the first record");
        assert_eq!(w.position(64), (192, 0), "at its end: the next start");
        assert_eq!(w.position(74), (256, 0));
        assert_eq!(w.position(80), ((1 << 20) + 6, (1 << 20) + 30));
        assert!(!w.is_full());
    }

    #[test]
    fn a_window_is_full_at_its_records() {
        let mut w = Window::new(0, 0);
        assert_eq!(w.next_start(), None);
        for i in 0..WINDOW_RECORDS as u64 {
            assert!(!w.is_full());
            w.push(i * 64 + SEAL, 1);
        }
        assert!(w.is_full());
        assert_eq!(w.len(), WINDOW_RECORDS as u64);
    }
}
