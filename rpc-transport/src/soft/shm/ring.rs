//! One direction of a shared-memory link: a single-producer, single-consumer byte
//! ring in a sealed memfd, and the eventfd "doorbell" that wakes a sleeping reader.
//!
//! Layout of the memfd (one page of header, then [`RING_BYTES`] of data):
//!
//! | offset | field | written by |
//! | --- | --- | --- |
//! | 0 | magic, capacity | the creator (the reader), before sharing |
//! | 128 | `head`: where the reader goes on (bytes before it are free) | the consumer |
//! | 192 | `waiting`: the reader may sleep; ring the bell | the reader sets (and withdraws), the producer clears |
//! | 256 | `rung`: the bell was rung and is still readable | the producer sets, the reader clears |
//! | 320 | `space`: the ring was full; ring the writer's bell when space frees | the producer sets, the reader clears |
//! | 384 | `jump`: the producer skipped to this position (no record before it) | the producer |
//!
//! Positions count bytes forever (64 bits do not wrap); the place in the data is the
//! position modulo the capacity (a power of two).
//!
//! Records: each publish is one record in the data area, starting at a multiple of
//! [`ALIGN`] (a cache line): an 8-byte seal, then the bytes. The producer copies the
//! bytes in and then stores the seal with Release: the position where they end. A
//! reader polls the seal at its `head`, loads it with Acquire, and copies the bytes
//! out; the next record starts at the first multiple of `ALIGN` after them. So a
//! small message reaches the reader in the one cache line it polls, and the reader
//! prefetches the record's other lines at once. With a shared `tail` index instead
//! (this ring until 2026-12), each message cost the reader two lines fetched from
//! the writer's core one after the other, the index and then the bytes: a line
//! moves between these cores in about 100 ns (rdtsc marks: 77-100 ns between
//! loading `tail` and decoding the head behind it). Modelled in C on this machine
//! (two threads, 80 B messages each way), a round trip took 547-572 ns with the
//! index and 367-384 ns with seals; `rpc-bench`'s 32 B x 1 p50 went from
//! 1.96-1.98 µs to 1.84-1.90 µs (five alternating rounds).
//!
//! A seal must never be mistaken for one: a record start may hold bytes of an older
//! record. So every record start is cleared (zero: nothing yet) before a reader can
//! reach it: before the seal of the record that ends there is stored, or before
//! `jump` leads there. The producer clears a few slots beyond each record after its
//! seal ([`CLEAR_AHEAD`]), so that a small message's seal does not wait behind
//! the store that clears the next start (which takes the line from the reader's
//! cache: 442-455 ns per round trip in the same model); only a record longer than
//! that clears its successor first. Each record keeps the next start's slot in
//! free space: one record takes at most [`MAX_WRITE`] bytes.
//!
//! Ordering: the producer copies bytes in, then stores the seal with Release; the
//! reader loads the seal with Acquire before copying them out, then stores `head`
//! with Release; the producer loads `head` with Acquire before reusing that space.
//! So a byte is never read before it is written, nor overwritten before it is read.
//! The producer loads `head` only when the free space it saw at its last load runs
//! out: the reader writes that line on every read. The reader publishes `head` once
//! per read pass, however many records the pass took; inside a record it keeps where
//! the record's bytes end, since no seal stands at its `head` then.
//!
//! Wake-ups (no system call while both sides poll): a reader about to sleep stores
//! `waiting = 1`, issues a SeqCst fence, and looks at the seal at its `head` once
//! more; the producer stores a seal, issues a SeqCst fence, and reads `waiting`. With
//! a SeqCst fence between each side's store and load, at least one of them sees the
//! other's store (Dekker): either the reader finds the new record and does not sleep,
//! or the producer sees `waiting`, clears it and writes the eventfd. The reader drains
//! the eventfd when it finds `rung` set, so a level-triggered epoll set does not keep
//! reporting it. A reader that polls again after announcing (a poller that was woken,
//! or armed and then found work) withdraws `waiting`, so that a conversation between
//! two spinning sides rings no bell: the request is made only by a side about to
//! sleep.
//!
//! The same handshake runs the other way for a writer that found the ring full: it
//! stores `space = 1`, fences, and looks at `head` once more; the reader stores
//! `head`, fences, and reads `space`. A reader that freed space for such a writer
//! tells its link, which rings the writer's own inbox bell (its link holds it), so a
//! large transfer is paced by the reader rather than by the writer's next poll.
//!
//! Memory: pages of the memfd become resident as the data area is first written, and
//! stay so while the ring lives. So that a conversation of small messages does not
//! slowly touch the whole ring (a MiB per direction and connection, a thousand
//! connections' worth of a server's RSS), a producer that finds the ring empty and its
//! position past [`JUMP_AFTER`] skips to the start of the data area: it clears the
//! slot there and stores the new position in `jump` (Release, then a fence, so that
//! `jump` is seen before any byte written after it); a reader whose `head` is below
//! `jump` goes on there. Only an empty ring jumps, so the reader's `head` is exactly
//! where the producer left, no record stands there, and a stale `jump` is never
//! above it. The reader looks at `jump` before loading the seal at its `head` (after
//! a jump, that slot's page may have been given back: see below) and again after it
//! (the producer may have jumped and written over the slot meanwhile). The skipped
//! bytes are free at once: the producer counts its space from `max(head, jump)`, so
//! a jump never shrinks the ring (counted from `head`, the skipped gap stayed "in
//! use" until the reader moved, and a bulk transfer that kept finding the ring empty
//! crept along in steps of the jump's offset).
//! Small messages keep to the first [`JUMP_AFTER`] bytes plus one record; bulk
//! transfers use the whole ring.
//!
//! A connection that carried bulk data and then went quiet would still keep every
//! page it touched, so once its link has seen the ring empty with nothing written for
//! a while (`rc::link`), the producer punches those pages out of the memfd
//! ([`Producer::release_idle`], `MADV_REMOVE`) beyond the first [`KEEP_BYTES`]. That
//! is safe without the reader's help: with the ring empty every byte belongs to the
//! producer but the reader's next slot, which is clear (empty) and reads as zeros
//! (empty) once released. The producer first jumps to the start of the data area, so
//! that the slot the reader polls lies in the pages kept: polled, a released page
//! came back (a page more per idle ring). Polls and reads look at `jump` before that
//! slot; only a reader stopped between those two loads for the whole jump and
//! release still loads the old slot, and brings its one page back until the next
//! release.
//!
//! Trust: the peer can write anything into the shared page. Seals are checked on
//! every use (a record's end within a ring of its start, `jump` within a ring ahead
//! of `head`, `tail - head` within the capacity for the producer; a violation is
//! [`Corrupt`], which breaks the connection), and data is only ever addressed modulo
//! the capacity, so a lying peer can make this side read garbage bytes (which then
//! fail to decode as frames, or land as payload exactly where a valid frame would have
//! put them) but never touch memory outside the mapping. The memfd is sealed against
//! shrinking before it is shared and the mapper checks the seals and the size, so a
//! peer cannot make the mapping fault (SIGBUS) by truncating it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::super::sys::EventFd;
use super::records::{self, Slot, Window, ALIGN, SEAL};

/// Data bytes of one direction's ring. Chosen as 16 frames of the largest chunk
/// (`rc::tx::CHUNK`, 64 KiB): a writer can run a whole MiB ahead of its reader.
pub(crate) const RING_BYTES: usize = 1 << 20;
/// A producer finding the ring empty past this offset starts again at offset 0 (see
/// the module docs, "Memory"): one page, so a small-message connection keeps about
/// two pages of each ring resident.
pub(crate) const JUMP_AFTER: usize = 4 << 10;
/// The start of the data area an idle producer keeps resident (see the module docs):
/// what small messages touch after a jump.
pub(crate) const KEEP_BYTES: usize = 2 * PAGE;
const PAGE: usize = 4096;
const HEADER: usize = 4096;
const MAP_LEN: usize = HEADER + RING_BYTES;
/// The most bytes one write takes: the ring less a record's seal and the line that
/// keeps the next record's start free (see the module docs, "Records").
pub(crate) const MAX_WRITE: usize = RING_BYTES - (SEAL + ALIGN) as usize;
/// How far beyond a record's end the producer keeps record starts cleared (see the
/// module docs, "Records"): a small message's successor starts within it.
const CLEAR_AHEAD: u64 = 4 * ALIGN;
/// How much of a record [`Inbox::window`] asks the CPU for ahead of use: a few
/// small frames' worth.
const PREFETCH_BYTES: u64 = 4 * ALIGN;
/// The second version of the layout: records with seals. A peer of the first (a
/// shared `tail`) refuses the ring rather than misreading it.
const MAGIC: u64 = u64::from_be_bytes(*b"rrpcrng2");
const OFF_MAGIC: usize = 0;
const OFF_CAP: usize = 8;
const OFF_HEAD: usize = 128;
const OFF_WAITING: usize = 192;
const OFF_RUNG: usize = 256;
const OFF_SPACE: usize = 320;
const OFF_JUMP: usize = 384;

/// The peer broke the ring's invariants (indices out of range).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// A shared mapping of one ring's memfd.
struct Mapping {
    ptr: NonNull<u8>,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics (the
// header) or through the producer/consumer protocol (the data), whose owners are
// `Send` and take `&mut self` (producer) or are used under the QP lock (consumer).
unsafe impl Send for Mapping {}
// SAFETY: as above; the only `&self` accesses are atomic loads and stores.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new ring: a sealed memfd with an initialised header, and its mapping.
    fn create() -> io::Result<(Mapping, OwnedFd)> {
        // SAFETY: the name is a valid C string; flags are constants.
        let raw = unsafe {
            libc::memfd_create(
                c"rdma-rpc-soft-ring".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just created and belongs to nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscalls on a descriptor we own.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), MAP_LEN as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let m = Mapping::map(&fd)?;
        m.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
        m.u64_at(OFF_CAP)
            .store(RING_BYTES as u64, Ordering::Relaxed);
        Ok((m, fd))
    }

    /// Maps a ring the peer created, after checking that it cannot shrink under us
    /// and has the expected size and header.
    fn open(fd: &OwnedFd) -> io::Result<Mapping> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        // SAFETY: plain syscall on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad("ring memfd is not sealed against shrinking"));
        }
        // SAFETY: `st` is a live, writable local; the kernel fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_size as u64 != MAP_LEN as u64 {
            return Err(bad("ring memfd has the wrong size"));
        }
        let m = Mapping::map(fd)?;
        if m.u64_at(OFF_MAGIC).load(Ordering::Relaxed) != MAGIC
            || m.u64_at(OFF_CAP).load(Ordering::Relaxed) != RING_BYTES as u64
        {
            return Err(bad("ring header does not match"));
        }
        Ok(m)
    }

    fn map(fd: &OwnedFd) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a descriptor we own, at an address the
        // kernel picks; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAP_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER);
        // SAFETY: `off` is an aligned offset inside the header page, which lives as long
        // as `self`; shared memory is accessed only atomically there.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= HEADER);
        // SAFETY: as in `u64_at`.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// The seal slot of a record starting at position `at` (a multiple of [`ALIGN`]).
    fn seal_at(&self, at: u64) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(ALIGN));
        let off = (at as usize) & (RING_BYTES - 1) & !(ALIGN as usize - 1);
        // SAFETY: `off` is a multiple of 64 inside the data area (masked by the
        // capacity, a power of two), which lives as long as `self`; the data area
        // starts page-aligned, so the word is aligned. Seal slots are accessed
        // atomically; the same bytes are copied as record bytes only while they are
        // the producer's free space or published bytes before the reader's `head`.
        unsafe { &*self.data().add(off).cast::<AtomicU64>() }
    }

    /// Asks the CPU for the lines of positions `from..to` (up to
    /// [`PREFETCH_BYTES`]) at once, without waiting for them. The writer's core holds
    /// a new record's lines, about 100 ns each to fetch; loaded as the frames are
    /// decoded, one after the other, a frame across two lines waited for each in
    /// turn.
    fn prefetch(&self, from: u64, to: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let end = to.min(from + PREFETCH_BYTES);
            let mut at = from & !(ALIGN - 1);
            while at < end {
                let p = self.data().wrapping_add((at as usize) & (RING_BYTES - 1));
                // SAFETY: a prefetch only hints the cache and never faults; `p` is
                // inside the data area anyway.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        p.cast_const().cast(),
                    )
                };
                at += ALIGN;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (from, to);
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data area starts right after the header, inside the mapping.
        unsafe { self.ptr.as_ptr().add(HEADER) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `map` mapped; nothing refers to it any more
        // (the owners hold the mapping by value or in an `Arc` being dropped).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), MAP_LEN) };
    }
}

/// Bytes from `src` into the ring at byte count `pos` (wrapping at the end).
fn copy_in(m: &Mapping, pos: u64, src: &[u8]) {
    let at = (pos as usize) & (RING_BYTES - 1);
    let first = src.len().min(RING_BYTES - at);
    // SAFETY: both ranges lie inside the data area (`at + first <= RING_BYTES`, the
    // rest from 0); the producer owns this free space until it stores the seal.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), m.data().add(at), first);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(first), m.data(), src.len() - first);
    }
}

/// Bytes from the ring at byte count `pos` into `dst` (wrapping at the end).
fn copy_out(m: &Mapping, pos: u64, dst: &mut [u8]) {
    let at = (pos as usize) & (RING_BYTES - 1);
    let first = dst.len().min(RING_BYTES - at);
    // SAFETY: as in `copy_in`; the consumer owns published bytes until it moves `head`.
    // A misbehaving peer writing them meanwhile only changes the bytes we copy.
    unsafe {
        std::ptr::copy_nonoverlapping(m.data().add(at), dst.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(m.data(), dst.as_mut_ptr().add(first), dst.len() - first);
    }
}

/// What `seal`, loaded at record start `at` of this ring, says.
fn slot_of(seal: u64, at: u64) -> Result<Slot, Corrupt> {
    records::parse(seal, at, RING_BYTES as u64).ok_or(Corrupt)
}

/// The writing end of a ring the peer created (and reads).
pub(crate) struct Producer {
    map: Mapping,
    /// Where the next record starts (a multiple of [`ALIGN`]).
    tail: u64,
    /// The last write rang the bell (see [`Producer::take_rang`]).
    rang: bool,
    /// Where the last jump went (0: none yet); the reader's `head` counts as at
    /// least this (see the module docs, "Memory").
    jump: u64,
    /// End of the data area written since the last release (see `release_idle`).
    touched: usize,
    /// Where the free space ended when the reader's `head` was last read: up to here
    /// the producer writes without reading it again (its cache line moves to the
    /// reader with every read the reader publishes).
    free_to: u64,
    /// Every record start from `tail` to here is cleared (see the module docs,
    /// "Records").
    cleared: u64,
    bell: EventFd,
}

impl Producer {
    /// Maps the peer's ring (`memfd`) with its doorbell (`bell`).
    pub(crate) fn open(memfd: &OwnedFd, bell: EventFd) -> io::Result<Producer> {
        let map = Mapping::open(memfd)?;
        Ok(Producer {
            map,
            tail: 0,
            rang: false,
            jump: 0,
            touched: 0,
            free_to: 0,
            // A new memfd reads as zeros: every slot of the first lap is clear.
            cleared: RING_BYTES as u64,
            bell,
        })
    }

    /// Copies as much of `bufs` (in order) as fits, publishes it, and rings the bell if
    /// the reader said it may sleep. Returns the bytes taken (0: the ring is full).
    pub(crate) fn write(&mut self, bufs: &[&[u8]]) -> Result<usize, Corrupt> {
        self.publish(bufs, true)
    }

    /// As [`Producer::write`], without ringing a sleeping reader's bell: its request
    /// stays set, so the next ringing write wakes it to read both.
    pub(crate) fn write_quiet(&mut self, bufs: &[&[u8]]) -> Result<usize, Corrupt> {
        self.publish(bufs, false)
    }

    fn publish(&mut self, bufs: &[&[u8]], ring: bool) -> Result<usize, Corrupt> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        self.jump_if_empty();
        let mut room = self.room();
        if room < want {
            self.look_at_head()?;
            room = self.room();
            if room < want {
                // Full: ask the reader to ring when it frees space, then look once
                // more (the writer's half of the second Dekker handshake).
                self.map.u32_at(OFF_SPACE).store(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                self.look_at_head()?;
                room = self.room();
            }
        }
        let n = want.min(room);
        if n == 0 {
            return Ok(0);
        }
        debug_assert!(n <= MAX_WRITE);
        let start = self.tail;
        self.copy_from(bufs, start + SEAL, n);
        let end = start + SEAL + n as u64;
        let next = end.next_multiple_of(ALIGN);
        if next >= self.cleared {
            // A long record went past the cleared slots: its successor's is cleared
            // before the seal that leads a reader there.
            self.map.seal_at(next).store(0, Ordering::Relaxed);
            self.cleared = next + ALIGN;
        }
        self.map.seal_at(start).store(end, Ordering::Release);
        self.tail = next;
        self.clear_ahead();
        let at = (start as usize) & (RING_BYTES - 1);
        let reach = at.saturating_add((self.cleared - start) as usize);
        self.touched = self.touched.max(reach.min(RING_BYTES));
        self.rang = ring && self.ring_bell();
        Ok(n)
    }

    /// Bytes the next record can take in the free space last seen: its seal, its
    /// bytes and the next record's slot must all lie in it.
    fn room(&self) -> usize {
        let last_start = self.free_to.saturating_sub(SEAL) / ALIGN * ALIGN;
        last_start.saturating_sub(self.tail + SEAL) as usize
    }

    /// Reads the reader's `head` (for free space); a `head` that the producer's
    /// position cannot be a ring ahead of is [`Corrupt`].
    fn look_at_head(&mut self) -> Result<(), Corrupt> {
        let head = self.head();
        if self.tail.wrapping_sub(head) > RING_BYTES as u64 {
            return Err(Corrupt);
        }
        self.free_to = head + RING_BYTES as u64;
        Ok(())
    }

    /// Clears the record starts from `cleared` up to [`CLEAR_AHEAD`] beyond `tail`,
    /// within the free space last seen.
    fn clear_ahead(&mut self) {
        let until = (self.tail + CLEAR_AHEAD).min(self.free_to.saturating_sub(SEAL));
        while self.cleared + SEAL <= until {
            self.map.seal_at(self.cleared).store(0, Ordering::Relaxed);
            self.cleared += ALIGN;
        }
    }

    /// Whether the last [`Producer::write`] rang the bell (its reader had said it
    /// sleeps); asking forgets it. For the device's doorbell count.
    pub(crate) fn take_rang(&mut self) -> bool {
        std::mem::take(&mut self.rang)
    }

    /// The ring is empty and the caller saw no write for a while: gives the pages
    /// written since the last release beyond the first [`KEEP_BYTES`] back to the
    /// system (see the module docs). Returns whether it did (a system call).
    pub(crate) fn release_idle(&mut self) -> bool {
        if self.touched <= KEEP_BYTES || self.head() != self.tail {
            return false;
        }
        // The reader polls the slot where the next record starts: moved to the start
        // of the data area, it lies in the pages kept (polling a released page would
        // fault it back in).
        if (self.tail as usize) & (RING_BYTES - 1) != 0 {
            self.jump_to_start();
        }
        let len = self.touched.next_multiple_of(PAGE) - KEEP_BYTES;
        // SAFETY: `KEEP_BYTES..KEEP_BYTES + len` lies inside the data area (`touched`
        // is at most `RING_BYTES`, a multiple of the page), page-aligned, in a shared
        // writable mapping of a memfd. With the ring empty nobody reads these bytes
        // until this producer (`&mut self`) publishes again, but for the slot at the
        // reader's `head`, which then reads as zero (nothing yet), as cleared slots
        // do; the rest reads as zeros until written, as fresh memfd pages do.
        let r = unsafe {
            libc::madvise(
                self.map.data().add(KEEP_BYTES).cast(),
                len,
                libc::MADV_REMOVE,
            )
        };
        self.touched = KEEP_BYTES;
        r == 0
    }

    /// An empty ring past [`JUMP_AFTER`]: go on at the start of the data area, so that
    /// small messages keep touching the same few pages (see the module docs). The
    /// slot there is cleared before `jump` leads a reader to it.
    fn jump_if_empty(&mut self) {
        let at = (self.tail as usize) & (RING_BYTES - 1);
        if at < JUMP_AFTER || self.head() != self.tail {
            return;
        }
        self.jump_to_start();
    }

    /// With the ring empty: the next record starts at the start of the data area.
    fn jump_to_start(&mut self) {
        let at = (self.tail as usize) & (RING_BYTES - 1);
        let to = self.tail + (RING_BYTES - at) as u64;
        self.map.seal_at(to).store(0, Ordering::Relaxed);
        self.map.u64_at(OFF_JUMP).store(to, Ordering::Release);
        // Bytes written from here on may land on the reader's slot: `jump` is seen
        // first (the reader checks it after loading that slot).
        fence(Ordering::Release);
        self.tail = to;
        self.jump = to;
        self.cleared = to + ALIGN;
        // Empty: the reader's `head` counts as `to`.
        self.free_to = to + RING_BYTES as u64;
    }

    /// The reader's `head` as far as free space goes: a reader still before the last
    /// jump skips the gap unread, so the gap is free (see the module docs).
    fn head(&self) -> u64 {
        self.map
            .u64_at(OFF_HEAD)
            .load(Ordering::Acquire)
            .max(self.jump)
    }

    /// Copies `len` bytes of the concatenation of `bufs` to the ring at position `at`.
    fn copy_from(&self, bufs: &[&[u8]], at: u64, len: usize) {
        let (mut left, mut at) = (len, at);
        for b in bufs {
            if left == 0 {
                break;
            }
            let k = b.len().min(left);
            copy_in(&self.map, at, &b[..k]);
            at += k as u64;
            left -= k;
        }
    }

    /// Where the next record starts: positions ever published to, padding included.
    pub(crate) fn published(&self) -> u64 {
        self.tail
    }

    /// The reader's `head` if published bytes wait unread, else `None`.
    pub(crate) fn unread(&self) -> Option<u64> {
        let head = self.head();
        (head != self.tail).then_some(head)
    }

    /// Rings the peer's bell regardless of `waiting`: its writer waits for space in
    /// the ring this side reads (see [`Inbox::read`]), or its reader left this ring's
    /// bytes unread after its request to ring was spent (see `rc::link`).
    pub(crate) fn nudge(&self) {
        self.bell.signal();
        self.map.u32_at(OFF_RUNG).store(1, Ordering::Release);
    }

    /// Tests and fuzzing only: stores `seal` at the next record's start, as a
    /// misbehaving peer would.
    pub(crate) fn poke_seal(&mut self, seal: u64) {
        self.map.seal_at(self.tail).store(seal, Ordering::Release);
        self.rang = self.ring_bell();
    }

    /// Fuzzing only: stores `jump` as given, as a misbehaving peer would.
    pub(crate) fn poke_jump(&mut self, v: u64) {
        self.map.u64_at(OFF_JUMP).store(v, Ordering::Release);
    }

    /// The producer's half of the Dekker handshake (see the module docs). Returns
    /// whether it rang.
    fn ring_bell(&self) -> bool {
        fence(Ordering::SeqCst);
        let waiting = self.map.u32_at(OFF_WAITING);
        if waiting.load(Ordering::Relaxed) != 0 && waiting.swap(0, Ordering::AcqRel) != 0 {
            self.bell.signal();
            // After the signal: a reader that sees `rung` drains a readable eventfd.
            self.map.u32_at(OFF_RUNG).store(1, Ordering::Release);
            return true;
        }
        false
    }
}

/// The reading end of a ring this side created.
///
/// `read` (and `window`, `consume_to`) must not run concurrently with itself (the
/// QP lock serialises it); the other methods may run from anywhere (a CQ being
/// armed, the helper).
pub(crate) struct Inbox {
    map: Mapping,
    /// Where reading goes on: a record's start, or a byte inside one (see `end`).
    /// A local copy; the shared one is only written.
    head: AtomicU64,
    /// Inside a record: where its bytes end; else at most `head`.
    end: AtomicU64,
    bell: EventFd,
}

impl Inbox {
    /// A new ring and its doorbell; the descriptors go to the peer (the memfd may be
    /// closed once sent: the mapping keeps the memory).
    pub(crate) fn create() -> io::Result<(Inbox, OwnedFd)> {
        let (map, memfd) = Mapping::create()?;
        let bell = EventFd::new()?;
        Ok((
            Inbox {
                map,
                head: AtomicU64::new(0),
                end: AtomicU64::new(0),
                bell,
            },
            memfd,
        ))
    }

    pub(crate) fn bell(&self) -> &EventFd {
        &self.bell
    }

    /// Whether published bytes are waiting (a look at the seal the reader polls: no
    /// system call). A seal that is no honest one counts as waiting: the read that
    /// follows finds it [`Corrupt`].
    pub(crate) fn has_data(&self) -> bool {
        let head = self.head.load(Ordering::Acquire);
        if self.end.load(Ordering::Relaxed) > head {
            return true;
        }
        // After a jump the reader's slot is the jump's target (a jump with no record
        // behind it yet is not input).
        let at = match self.jumped_from(head) {
            Ok(to) => to.unwrap_or(head),
            Err(Corrupt) => return true,
        };
        self.map.seal_at(at).load(Ordering::Acquire) != 0
    }

    /// What the seal at record start `at` says.
    fn slot(&self, at: u64) -> Result<Slot, Corrupt> {
        slot_of(self.map.seal_at(at).load(Ordering::Acquire), at)
    }

    /// Where the producer jumped to from the reader's record start `head`, if it did
    /// (see the module docs, "Memory"); a `jump` beyond a ring ahead, or not to the
    /// start of the data area, is [`Corrupt`].
    fn jumped_from(&self, head: u64) -> Result<Option<u64>, Corrupt> {
        let jump = self.map.u64_at(OFF_JUMP).load(Ordering::Acquire);
        if jump <= head {
            return Ok(None);
        }
        if jump - head > RING_BYTES as u64 || !jump.is_multiple_of(RING_BYTES as u64) {
            return Err(Corrupt);
        }
        Ok(Some(jump))
    }

    /// The first slot a read looks at: the one at the reader's record start `head`,
    /// or, if the producer jumped from there, the one it jumped to.
    fn first_slot(&self, head: u64) -> Result<(u64, Slot), Corrupt> {
        // `jump` before the slot: after a jump the slot at `head` may lie in a page
        // an idle release gave back, and a load there would fault it in again.
        if let Some(to) = self.jumped_from(head)? {
            return Ok((to, self.slot(to)?));
        }
        let seal = self.map.seal_at(head).load(Ordering::Acquire);
        // And after it: a jump between the two loads may have put any bytes in the
        // slot; one after the second found the slot empty, and the next read goes
        // there.
        if let Some(to) = self.jumped_from(head)? {
            return Ok((to, self.slot(to)?));
        }
        Ok((head, slot_of(seal, head)?))
    }

    /// Copies available bytes into `bufs` in order; returns how many (0: empty) and
    /// whether the writer waits for the space they freed (ring its bell: see
    /// [`Producer::nudge`]).
    pub(crate) fn read(&self, bufs: &mut [&mut [u8]]) -> Result<(usize, bool), Corrupt> {
        let mut w = self.window()?;
        while self.extend(&mut w)? {}
        let mut n = 0u64;
        for b in bufs.iter_mut() {
            let k = (b.len() as u64).min(w.len() - n) as usize;
            if k == 0 {
                break;
            }
            self.copy_at(&w, n, &mut b[..k]);
            n += k as u64;
        }
        if n == 0 {
            return Ok((0, false));
        }
        Ok((n as usize, self.consume_to(&w, n)))
    }

    /// Starts a read: drains a bell that rang, and returns the readable bytes as a
    /// [`Window`] onto the first record found (or the rest of the one being read),
    /// to be copied with [`Inbox::copy_at`], grown by [`Inbox::extend`] and consumed
    /// with [`Inbox::consume_to`]. A seal no honest producer writes is [`Corrupt`].
    ///
    /// Only one record, so that a lone message does not wait for the next record's
    /// slot: the producer cleared that line last (see the module docs, "Records"),
    /// so loading it fetches it from the writer's core. The reader goes on into
    /// later records when they queue up (`rc::rx`, where the figures are).
    pub(crate) fn window(&self) -> Result<Window, Corrupt> {
        let rung = self.map.u32_at(OFF_RUNG);
        if rung.load(Ordering::Relaxed) != 0 && rung.swap(0, Ordering::AcqRel) != 0 {
            self.bell.drain();
        }
        let head = self.head.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        let mut w = Window::new(head, end);
        if end > head {
            // Inside a record: the ring is not empty, so the producer cannot have
            // jumped.
            w.push(head, end - head);
        } else if let (at, Slot::Data(end)) = self.first_slot(head)? {
            w.push(at + SEAL, end - at - SEAL);
            self.map.prefetch(at + ALIGN, end);
        }
        Ok(w)
    }

    /// Adds the records published after `w`'s last one, while it has room; whether
    /// it added any. Records after the first are reached through their
    /// predecessor's seal, and the producer jumps only from an empty ring: no jump
    /// can pass them.
    pub(crate) fn extend(&self, w: &mut Window) -> Result<bool, Corrupt> {
        let Some(mut at) = w.next_start() else {
            return Ok(false);
        };
        let mut added = false;
        while !w.is_full() {
            let Slot::Data(end) = self.slot(at)? else {
                break;
            };
            w.push(at + SEAL, end - at - SEAL);
            self.map.prefetch(at + ALIGN, end);
            at = end.next_multiple_of(ALIGN);
            added = true;
        }
        Ok(added)
    }

    /// Copies window bytes `at..at + out.len()` (inside `w`, not yet consumed).
    pub(crate) fn copy_at(&self, w: &Window, at: u64, out: &mut [u8]) {
        if let Some(pos) = w.within_one(at, out.len()) {
            return copy_out(&self.map, pos, out);
        }
        let mut done = 0;
        for (pos, len) in w.pieces(at, out.len()) {
            copy_out(&self.map, pos, &mut out[done..done + len]);
            done += len;
        }
        debug_assert_eq!(done, out.len(), "copied past the window");
    }

    /// Consumes every window byte before `to`: the producer may write there again.
    /// Returns whether it waits for that space (ring its bell: see
    /// [`Producer::nudge`]).
    pub(crate) fn consume_to(&self, w: &Window, to: u64) -> bool {
        let (head, end) = w.position(to);
        self.end.store(end, Ordering::Relaxed);
        self.head.store(head, Ordering::Release);
        self.map.u64_at(OFF_HEAD).store(head, Ordering::Release);
        // The reader's half of the second Dekker handshake (see the module docs).
        fence(Ordering::SeqCst);
        let space = self.map.u32_at(OFF_SPACE);
        space.load(Ordering::Relaxed) != 0 && space.swap(0, Ordering::AcqRel) != 0
    }

    /// The reader may sleep from now on: the producer's next publish rings the bell.
    /// If bytes already wait, the bell is rung here, so a sleeper wakes at once;
    /// returns whether it was.
    pub(crate) fn announce_sleep(&self) -> bool {
        let input = self.ask_to_be_rung();
        if input {
            self.ring_own_bell();
        }
        input
    }

    /// The reader's half of the Dekker handshake: the producer's next publish rings
    /// the bell. Returns whether bytes already wait, which no bell announces: the
    /// caller reads them instead of sleeping, or rings ([`Inbox::ring_own_bell`]).
    pub(crate) fn ask_to_be_rung(&self) -> bool {
        self.map.u32_at(OFF_WAITING).store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.has_data()
    }

    /// Rings the bell as a producer does (a reader that will sleep on it after all).
    pub(crate) fn ring_own_bell(&self) {
        self.bell.signal();
        // After the signal: a reader that sees `rung` drains a readable eventfd.
        self.map.u32_at(OFF_RUNG).store(1, Ordering::Release);
    }

    /// The reader polls again: withdraws a request to ring that it made before it
    /// slept, so that the producer does not ring (a system call on each side) for
    /// every message while the reader spins. Stores only if the request is still
    /// there: the producer reads `waiting` on every publish, and a line nobody
    /// writes stays shared. No handshake needed: a reader about to sleep asks again.
    pub(crate) fn withdraw_sleep(&self) {
        let waiting = self.map.u32_at(OFF_WAITING);
        if waiting.load(Ordering::Relaxed) != 0 {
            waiting.store(0, Ordering::Relaxed);
        }
    }

    /// Tests only: resident pages of the data area (mincore: the memfd's pages in
    /// memory).
    #[cfg(test)]
    pub(crate) fn resident_pages(&self) -> usize {
        let mut v = vec![0u8; RING_BYTES / PAGE];
        // SAFETY: the data area is page-aligned (after one header page) and mapped for
        // `RING_BYTES`; `v` has one byte per page.
        let r = unsafe { libc::mincore(self.map.data().cast(), RING_BYTES, v.as_mut_ptr()) };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        v.iter().filter(|b| *b & 1 == 1).count()
    }

    /// Tests only: whether a ring is requested (`waiting`) and one is unread (`rung`).
    #[cfg(test)]
    pub(crate) fn flags(&self) -> (bool, bool) {
        let m = &self.map;
        (
            m.u32_at(OFF_WAITING).load(Ordering::SeqCst) != 0,
            m.u32_at(OFF_RUNG).load(Ordering::SeqCst) != 0,
        )
    }

    /// Tests only: the seal at the reader's record start, to play a misbehaving peer.
    #[cfg(test)]
    pub(crate) fn poke_seal(&self, v: u64) {
        let head = self.head.load(Ordering::Relaxed);
        self.map.seal_at(head).store(v, Ordering::Release);
    }
}

/// Fuzz entry (`fuzz/fuzz_targets/shm_ring.rs`): bytes through a ring in pieces, with
/// the peer's seals possibly lying, then decoded as RC frames. Reads never panic nor
/// leave the mapping; an honest ring delivers exactly what was written; the frames
/// decode as `wire::fuzz_one` requires.
///
/// `data`: byte 0 picks the piece sizes, byte 1 whether a seal (bit 0) or `jump`
/// (bit 1) lies, bytes 2..10 what, the rest is the stream.
#[doc(hidden)]
pub fn fuzz_ring(data: &[u8]) {
    if data.len() < 10 {
        return;
    }
    let (inbox, memfd) = Inbox::create().expect("memfd");
    let bell = EventFd::from_owned(inbox.bell().try_clone_owned().expect("dup"));
    let mut p = Producer::open(&memfd, bell).expect("map");
    let piece = usize::from(data[0]) * 97 + 1;
    let stream = &data[10..];
    let mut got = Vec::with_capacity(stream.len());
    let mut sent = 0;
    let mut buf = vec![0u8; piece];
    let value = u64::from_le_bytes(data[2..10].try_into().expect("8"));
    let mut lie = (data[1] & 1 == 1).then_some(value);
    if data[1] & 2 == 2 {
        p.poke_jump(value);
    }
    loop {
        let end = (sent + piece).min(stream.len());
        sent += p
            .write(&[&stream[sent..end]])
            .expect("the reader keeps its indices");
        if let Some(t) = lie.take() {
            p.poke_seal(t);
        }
        let (a, b) = buf.split_at_mut(piece / 2);
        match inbox.read(&mut [a, b]) {
            Ok((0, _)) if sent == stream.len() => break,
            Ok((n, _)) => got.extend_from_slice(&buf[..n]),
            Err(Corrupt) => return,
        }
        if got.len() > 4 * RING_BYTES {
            return; // a lie that passed the check: bounded, then stop
        }
    }
    if data[1] & 3 == 0 {
        assert!(got == stream, "the ring changed the stream");
    }
    super::super::wire::fuzz_one(&got);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Producer, Inbox) {
        let (inbox, memfd) = Inbox::create().unwrap();
        // The peer would get a duplicate of the bell over SCM_RIGHTS.
        let bell = EventFd::from_owned(inbox.bell().try_clone_owned().unwrap());
        (Producer::open(&memfd, bell).unwrap(), inbox)
    }

    /// Bytes cross the ring in order through many wraps, in pieces of odd sizes.
    #[test]
    fn bytes_arrive_in_order_across_wraps() {
        let (mut p, c) = pair();
        let total = 3 * RING_BYTES + 12345;
        let src: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
        let mut got = Vec::with_capacity(total);
        let (mut sent, mut buf) = (0, vec![0u8; 70_001]);
        while got.len() < total {
            let end = (sent + 300_007).min(total);
            sent += p.write(&[&src[sent..end]]).unwrap();
            let mut want = [&mut buf[..]];
            let n = c.read(&mut want).unwrap().0;
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got == src);
    }

    /// A full ring takes nothing more until the reader frees space, and then about
    /// what it freed (records start on a line).
    #[test]
    fn full_ring_takes_nothing() {
        let (mut p, c) = pair();
        let big = vec![7u8; RING_BYTES + 10];
        assert_eq!(p.write(&[&big]).unwrap(), MAX_WRITE);
        assert_eq!(p.write(&[b"x"]).unwrap(), 0);
        let mut b = [0u8; 100];
        // The writer found it full: the read that frees space says to ring it.
        assert_eq!(c.read(&mut [&mut b[..]]).unwrap(), (100, true));
        let k = p.write(&[&big]).unwrap();
        assert!(k > 0 && k <= 100 + ALIGN as usize, "took {k}");
        assert_eq!(c.read(&mut [&mut b[..]]).unwrap(), (100, true));
        assert_eq!(
            c.read(&mut [&mut b[..]]).unwrap(),
            (100, false),
            "asked once, rung once"
        );
    }

    /// Bytes of an older record where a new one starts are never taken for its seal:
    /// each record start is cleared before a reader can reach it. The first lap's
    /// bytes are words that would read as honest seals at the next lap's positions;
    /// messages of many sizes (shorter and longer than the slots cleared ahead) then
    /// arrive exactly as written.
    #[test]
    fn an_older_records_bytes_are_never_taken_for_a_seal() {
        let (mut p, c) = pair();
        let lure: Vec<u8> = (0..MAX_WRITE / 8)
            .flat_map(|w| (RING_BYTES as u64 + 8 + 8 * w as u64 + 100).to_le_bytes())
            .collect();
        assert_eq!(p.write(&[&lure]).unwrap(), lure.len());
        let mut buf = vec![0u8; RING_BYTES];
        assert_eq!(c.read(&mut [&mut buf[..]]).unwrap().0, lure.len());
        for (i, len) in [100, 1000, 3, 300, 5000, 64, 57, 56, 65, 20_000, 1]
            .into_iter()
            .cycle()
            .take(200)
            .enumerate()
        {
            let msg = vec![(i % 251) as u8; len];
            assert_eq!(p.write(&[&msg]).unwrap(), len);
            let (n, _) = c.read(&mut [&mut buf[..]]).unwrap();
            assert!(
                n == len && buf[..n] == msg[..],
                "message {i} ({len} B) read as {n} B"
            );
        }
    }

    /// A reader that polls again withdraws its request: the next publish rings
    /// nothing (no system call on either side), and announcing again re-arms it.
    #[test]
    fn a_withdrawn_request_rings_nothing() {
        let (mut p, c) = pair();
        c.announce_sleep();
        c.withdraw_sleep();
        p.write(&[b"a"]).unwrap();
        assert!(
            !p.take_rang(),
            "rang for a reader that withdrew its request"
        );
        let mut b = [0u8; 8];
        c.read(&mut [&mut b[..]]).unwrap();
        assert!(
            !c.announce_sleep(),
            "rang its own bell with nothing waiting"
        );
        p.write(&[b"b"]).unwrap();
        assert!(p.take_rang(), "did not ring for a reader that sleeps");
        assert!(!p.take_rang(), "a second look saw a second ring");
    }

    /// The bell rings only after the reader announced sleep, once per announcement,
    /// and a read drains it.
    #[test]
    fn bell_rings_only_for_a_sleeper() {
        let (mut p, c) = pair();
        let readable = |c: &Inbox| {
            let mut pfd = libc::pollfd {
                fd: c.bell().raw(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, no wait.
            unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
        };
        p.write(&[b"a"]).unwrap();
        assert!(!readable(&c), "rang for a reader that polls");
        let mut b = [0u8; 8];
        c.read(&mut [&mut b[..]]).unwrap();
        c.announce_sleep();
        assert!(!readable(&c));
        p.write(&[b"b"]).unwrap();
        assert!(readable(&c), "a sleeping reader was not woken");
        c.read(&mut [&mut b[..]]).unwrap();
        assert!(!readable(&c), "the read did not drain the bell");
        p.write(&[b"c"]).unwrap();
        assert!(!readable(&c), "rang twice for one announcement");
        // Announcing with bytes already waiting wakes at once.
        c.announce_sleep();
        assert!(readable(&c));
    }

    /// A quiet write leaves a sleeping reader asleep with its request standing, so the
    /// next ringing write wakes it, and it reads both writes in order.
    #[test]
    fn a_quiet_write_leaves_the_bell_to_the_next_one() {
        let (mut p, c) = pair();
        c.announce_sleep();
        p.write_quiet(&[b"ab"]).unwrap();
        assert!(!p.take_rang(), "a quiet write rang the bell");
        p.write(&[b"c"]).unwrap();
        assert!(p.take_rang(), "the write after a quiet one did not ring");
        let mut b = [0u8; 8];
        let (n, _) = c.read(&mut [&mut b[..]]).unwrap();
        assert_eq!(&b[..n], b"abc");
    }

    fn resident_pages(c: &Inbox) -> usize {
        c.resident_pages()
    }

    /// A ring that carried bulk data keeps only its first pages once its producer
    /// releases them while it is empty, and carries bytes intact afterwards (the
    /// released pages come back zeroed and are written before they are read).
    #[test]
    fn an_idle_producer_gives_bulk_pages_back() {
        let (mut p, c) = pair();
        let mut buf = vec![0u8; RING_BYTES];
        let big: Vec<u8> = (0..MAX_WRITE).map(|i| (i % 241) as u8).collect();
        assert_eq!(p.write(&[&big]).unwrap(), big.len());
        assert!(
            !p.release_idle(),
            "released pages the reader has yet to read"
        );
        assert_eq!(c.read(&mut [&mut buf[..]]).unwrap().0, big.len());
        assert!(resident_pages(&c) > RING_BYTES / PAGE / 2);
        assert!(p.release_idle());
        // The reader goes on polling and reading at its next slot, which stays in
        // the pages kept: neither looks at the slot it stopped at, in a page given
        // back (a load there faults the page in again).
        assert!(!c.has_data(), "a release is not input");
        assert_eq!(c.read(&mut [&mut buf[..]]).unwrap().0, 0, "nothing to read");
        let resident = resident_pages(&c);
        assert!(
            resident <= KEEP_BYTES / PAGE,
            "{resident} pages resident after the release"
        );
        assert!(!p.release_idle(), "released twice with nothing written");
        // Across the released pages (a jump, then a wrap) bytes still arrive intact.
        for round in 0..3 {
            assert_eq!(p.write(&[&big]).unwrap(), big.len());
            let (n, _) = c.read(&mut [&mut buf[..]]).unwrap();
            assert!(
                n == big.len() && buf[..n] == big[..],
                "round {round} changed"
            );
            p.release_idle();
        }
    }

    /// A conversation of small messages (each read before the next is written, as
    /// calls and replies are) keeps to the first pages instead of touching the
    /// whole ring: 40 MiB through it leaves at most `JUMP_AFTER` and a message
    /// resident, and every byte arrives in order.
    #[test]
    fn small_messages_keep_to_the_first_pages() {
        let (mut p, c) = pair();
        let mut buf = [0u8; 200];
        for i in 0..(40 << 20) / 100usize {
            let msg = [(i % 251) as u8; 100];
            assert_eq!(p.write(&[&msg]).unwrap(), 100);
            assert_eq!(c.read(&mut [&mut buf[..]]).unwrap(), (100, false));
            assert!(buf[..100] == msg, "message {i} changed");
        }
        let most = (JUMP_AFTER + 100).div_ceil(4096);
        let resident = resident_pages(&c);
        assert!(
            resident <= most,
            "{resident} pages resident, expected at most {most}"
        );
    }

    /// A jump frees the bytes it skips at once: right after one, before the reader
    /// has moved, the producer takes a whole ring's worth (the reverted jump took only
    /// the jump's offset, so bulk data crept along in steps of it), and the reader
    /// gets every byte in order across the jump.
    #[test]
    fn a_jump_keeps_the_whole_ring() {
        let (mut p, c) = pair();
        let mut buf = vec![0u8; RING_BYTES + 10];
        let first = vec![1u8; JUMP_AFTER + 1];
        assert_eq!(p.write(&[&first]).unwrap(), first.len());
        assert_eq!(c.read(&mut [&mut buf[..]]).unwrap().0, first.len());
        // Empty, past JUMP_AFTER: this write jumps to offset 0.
        let big: Vec<u8> = (0..RING_BYTES + 10).map(|i| (i % 253) as u8).collect();
        assert_eq!(
            p.write(&[&big]).unwrap(),
            MAX_WRITE,
            "the jump shrank the ring"
        );
        let (n, _) = c.read(&mut [&mut buf[..]]).unwrap();
        assert_eq!(n, MAX_WRITE);
        assert!(buf[..n] == big[..n], "bytes changed across the jump");
    }

    /// A peer sealing a record longer than the ring, or one ending before it
    /// starts, breaks the ring instead of exposing memory.
    #[test]
    fn lying_seal_is_corrupt() {
        let mut b = [0u8; 8];
        for lie in [RING_BYTES as u64 + 1, 3] {
            let (_p, c) = pair();
            c.poke_seal(lie);
            assert_eq!(c.read(&mut [&mut b[..]]), Err(Corrupt), "seal {lie}");
        }
    }

    /// A memfd that could shrink under the mapper is refused.
    /// The fuzz entry on a few inputs: honest, lying, and frames split across pieces.
    #[test]
    fn fuzz_entry_runs() {
        let mut d = vec![3u8, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut f = Vec::new();
        crate::soft::wire::encode(&mut f, 0, 1, 2, &crate::soft::wire::Body::Ack, 0);
        for _ in 0..100 {
            d.extend_from_slice(&f);
        }
        fuzz_ring(&d);
        d[1] = 1;
        d[2..10].copy_from_slice(&(RING_BYTES as u64 * 3).to_le_bytes());
        fuzz_ring(&d);
        // A lying `jump` (far ahead, then just ahead of the stream).
        d[1] = 2;
        fuzz_ring(&d);
        d[2..10].copy_from_slice(&7u64.to_le_bytes());
        fuzz_ring(&d);
    }

    #[test]
    fn unsealed_memfd_is_refused() {
        // SAFETY: plain syscall, result checked.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just created.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::ftruncate(raw, MAP_LEN as libc::off_t) }, 0);
        assert!(Mapping::open(&fd).is_err());
    }
}
