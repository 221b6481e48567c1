//! What a peer may read of the regions a connection lends: through a type-2 memory
//! window bound to exactly one body's bytes on that connection's QP, invalidated
//! when the peer is done with it (where the device has windows), or through the
//! region's own rkey (where it has none: siw). `docs/large-messages.md`, "Exposure".
//! Both sides lend through it: the server its responses and stream messages, the
//! client its requests and stream messages (`transport/client/rc.rs`).
//!
//! Windows are kept per connection and reused: a body costs a bind WR and an
//! invalidate WR on the QP's send queue, no allocation once the connection has as
//! many windows as it ever lent at once (bounded by its pool's regions, each at
//! least one [`GRAIN`](rpc_transport::msg::GRAIN)). Window WRs are signaled under
//! [`WINDOW_BIT`], at most [`WINDOW_WRS`] outstanding per connection (the QP's send
//! queue and the CQ are sized for them); a bind that finds none free waits like a
//! send that finds no slot, an invalidation waits in line holding its region.
//! A region goes back to its pool only once its window's invalidation completed,
//! so a peer can never read a region after it was lent again.
//!
//! Bytes received into the read pool and sent on where they lie (a gather list's
//! references, [`LendWindows::lend_shared`]) are lent only through windows: that
//! pool's regions grant no remote access of their own, so each reference exposes
//! exactly its own range, from its own connection, until it is invalidated; on a
//! device without windows such bytes are copied as before.

use std::collections::VecDeque;
use std::sync::Arc;

use rpc_transport::msg::{PooledRegion, SharedRegion};
use rpc_transport::{AccessFlags, MemoryWindow, MwBind, QueuePair, WcOpcode, WorkCompletion};

/// Bit of a window WR's `wr_id` (send rings use the low 32 bits, Reads bit 63).
pub(crate) const WINDOW_BIT: u64 = 1 << 62;
/// Window WRs (binds and invalidations) one connection keeps outstanding.
pub(crate) const WINDOW_WRS: u32 = 16;
/// Free windows a connection keeps for later bodies; more are deallocated.
const SPARE_WINDOWS: usize = 64;

/// How a pool that lends must register its regions: with windows, the region
/// itself grants no remote access at all.
pub(crate) fn lend_access(windows: bool) -> AccessFlags {
    if windows {
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND
    } else {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
    }
}

/// A region lent to the peer, with the window that exposes it (none on the
/// region-rkey path). Dropping it (the connection died) deallocates the window,
/// which ends its binding, and returns the region.
pub(crate) struct Lent {
    // Field order: the window goes before the memory it exposes.
    window: Option<MemoryWindow>,
    memory: Memory,
    /// The other references of a gather list lent together, each with its window.
    more: Vec<Lent>,
    /// Bytes of received memory it exposes where they lie (a reference's length).
    in_place: usize,
}

/// What a window exposes: a region of the lend pool the body was encoded into, or
/// one of the read pool holding bytes received and sent on where they lie.
enum Memory {
    Region(PooledRegion),
    Shared(SharedRegion),
}

impl Lent {
    fn new(window: Option<MemoryWindow>, memory: Memory) -> Lent {
        Lent {
            window,
            memory,
            more: Vec::new(),
            in_place: 0,
        }
    }

    /// The peer was told of it: counts the received bytes it lends where they lie
    /// (`PoolStats::lent_in_place`).
    pub(crate) fn announced(&self) {
        if let Memory::Shared(s) = &self.memory {
            s.record_lent(self.in_place);
        }
        for part in &self.more {
            part.announced();
        }
    }

    /// Where the body lies, and the key that reads it.
    pub(crate) fn addr(&self) -> u64 {
        match &self.memory {
            Memory::Region(r) => r.addr(),
            Memory::Shared(s) => s.mr().addr(),
        }
    }
}

/// One connection's windows.
pub(crate) struct LendWindows {
    qp: Arc<QueuePair>,
    /// Windows on (`false`: lend by the region's rkey).
    on: bool,
    free: Vec<MemoryWindow>,
    /// Window WRs that may still be posted.
    room: u32,
    /// Invalidations posted, in posting order (their completions come in that order).
    invalidating: VecDeque<Lent>,
    /// Invalidations waiting for room.
    waiting: VecDeque<Lent>,
    /// A gather list found too little room: the next completion wakes its sender.
    starved: bool,
    /// The peer reads gather lists (`Capabilities::GATHER_LISTS`).
    in_place: bool,
}

/// Why a body could not be lent now.
pub(crate) enum LendRefusal {
    /// No window WR may be posted now: try again after a send completion (or,
    /// on a client, send the body in fragments instead).
    NoRoom(PooledRegion),
    /// The bind could not be posted (the QP is broken): the connection is over.
    Broken(String),
}

impl LendWindows {
    /// `on`: the device has type-2 windows and the pool registers with
    /// [`lend_access`]`(true)`.
    pub(crate) fn new(qp: Arc<QueuePair>, on: bool) -> LendWindows {
        tracing::debug!(
            qp = qp.qp_num(),
            exposure = if on {
                "a memory window per body"
            } else {
                "the pool region's rkey"
            },
            "bodies by reference lent through"
        );
        LendWindows {
            qp,
            on,
            free: Vec::new(),
            room: WINDOW_WRS,
            invalidating: VecDeque::new(),
            waiting: VecDeque::new(),
            starved: false,
            in_place: false,
        }
    }

    /// Whether bytes received may be lent where they lie, in gather lists: the
    /// peer reads them (it offered `GATHER_LISTS`); only through windows still.
    pub(crate) fn lending_in_place(mut self, peer_reads_lists: bool) -> Self {
        self.in_place = peer_reads_lists;
        self
    }

    /// Keeps up to `wrs` window WRs outstanding instead of [`WINDOW_WRS`] (the
    /// QP's send queue and the CQ sized for them): a client lends a body per call
    /// in flight, so it sizes this by its credits.
    pub(crate) fn with_room(mut self, wrs: u32) -> Self {
        self.room = wrs;
        self
    }

    /// Whether `wc` is a window WR's completion.
    pub(crate) fn owns(wc: &WorkCompletion) -> bool {
        wc.wr_id & WINDOW_BIT != 0
    }

    /// Lends `region`'s first `len` bytes: binds a window to them (posted before
    /// the frame that names it, so it is in place when the peer reads); returns the
    /// rkey for the descriptor and what to keep until the peer is done.
    pub(crate) fn lend(
        &mut self,
        region: PooledRegion,
        len: usize,
    ) -> Result<(u32, Lent), LendRefusal> {
        if !self.on {
            let rkey = region.rkey();
            return Ok((rkey, Lent::new(None, Memory::Region(region))));
        }
        if self.room == 0 {
            return Err(LendRefusal::NoRoom(region));
        }
        let (addr, len) = (region.addr(), len.max(1) as u64);
        match self.bind(region.mr(), addr, len) {
            Ok((rkey, window)) => Ok((rkey, Lent::new(Some(window), Memory::Region(region)))),
            Err(why) => Err(LendRefusal::Broken(why)),
        }
    }

    /// Whether bytes received may be lent where they lie (through windows only, to
    /// a peer that reads gather lists).
    pub(crate) fn lends_shared(&self) -> bool {
        self.on && self.in_place
    }

    /// Whether `n` references of a gather list may be lent now (windows on, and
    /// room for a bind each).
    pub(crate) fn can_lend_shared(&mut self, n: usize) -> bool {
        let ok = self.on && self.room as usize >= n;
        self.starved |= self.on && !ok;
        ok
    }

    /// Lends bytes received into the read pool where they lie: `(region, addr,
    /// len)` each, a window bound over exactly that range. Only after
    /// [`LendWindows::can_lend_shared`] said so. Returns each reference's rkey, in
    /// order, and what to keep until the peer is done with all of them; `Err`: a
    /// bind could not be posted (the connection is over).
    pub(crate) fn lend_shared(
        &mut self,
        refs: impl IntoIterator<Item = (SharedRegion, u64, usize)>,
        rkeys: &mut Vec<u32>,
    ) -> Result<Option<Lent>, String> {
        let mut lent: Option<Lent> = None;
        for (region, addr, len) in refs {
            let (rkey, window) = self.bind(region.mr(), addr, len as u64)?;
            rkeys.push(rkey);
            let mut part = Lent::new(Some(window), Memory::Shared(region));
            part.in_place = len;
            match &mut lent {
                Some(l) => l.more.push(part),
                None => lent = Some(part),
            }
        }
        Ok(lent)
    }

    /// Binds a window (a spare one, or a new one) over `len` bytes at `addr` of
    /// `mr`, readable remotely; takes one room.
    fn bind(
        &mut self,
        mr: &rpc_transport::MemoryRegion,
        addr: u64,
        len: u64,
    ) -> Result<(u32, MemoryWindow), String> {
        let window = match self.free.pop() {
            Some(w) => w,
            None => self
                .qp
                .pd()
                .alloc_mw()
                .map_err(|e| format!("ibv_alloc_mw: {e}"))?,
        };
        let bind = MwBind {
            mr,
            addr,
            len,
            access: AccessFlags::REMOTE_READ,
        };
        // The window and the memory's registration live in the `Lent` the caller
        // builds, kept until the bind and its invalidation completed (or the
        // connection is over and the QP executes nothing more).
        let rkey = self
            .qp
            .post_bind_mw(WINDOW_BIT, &window, &bind)
            .map_err(|e| format!("posting a window bind: {e}"))?;
        self.room -= 1;
        Ok((rkey, window))
    }

    /// The peer is done with `lent` (or the call ended without lending it):
    /// invalidates its window; the region goes back once that completed.
    pub(crate) fn release(&mut self, mut lent: Lent) -> Result<(), String> {
        for part in std::mem::take(&mut lent.more) {
            self.release(part)?;
        }
        if lent.window.is_none() {
            return Ok(());
        }
        self.waiting.push_back(lent);
        self.post_waiting()
    }

    fn post_waiting(&mut self) -> Result<(), String> {
        while self.room > 0 {
            let Some(lent) = self.waiting.pop_front() else {
                break;
            };
            let rkey = lent.window.as_ref().map_or(0, MemoryWindow::rkey);
            self.qp
                .post_local_inv(WINDOW_BIT | 1, rkey)
                .map_err(|e| format!("posting a window invalidation: {e}"))?;
            self.room -= 1;
            self.invalidating.push_back(lent);
        }
        Ok(())
    }

    /// The connection is over: every window goes (which ends its binding) and
    /// every region held for an invalidation comes back.
    pub(crate) fn clear(&mut self) {
        self.waiting.clear();
        self.invalidating.clear();
        self.free.clear();
    }

    /// A window WR completed: its room is free again; an invalidation returns its
    /// window for reuse and its region to the pool. An error means the QP is
    /// broken (a bind the device refused, or a flush): the connection is over.
    /// `Ok(true)`: room came back from none, so a body may be waiting for it.
    pub(crate) fn on_completion(&mut self, wc: &WorkCompletion) -> Result<bool, String> {
        let was_full = self.room == 0;
        self.room += 1;
        if !wc.is_ok() {
            return Err(format!("a memory window WR failed: {}", wc.status));
        }
        if wc.opcode == WcOpcode::LocalInv {
            if let Some(Lent { window, memory, .. }) = self.invalidating.pop_front() {
                drop(memory);
                if let Some(w) = window.filter(|_| self.free.len() < SPARE_WINDOWS) {
                    self.free.push(w);
                }
            }
        }
        self.post_waiting()?;
        let starved = std::mem::take(&mut self.starved);
        Ok((was_full || starved) && self.room > 0)
    }
}
