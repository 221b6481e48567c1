//! What both sides' drivers share for bodies by reference (RDMA Read): defaults,
//! the pool-occupancy handle, and turning a failed read into a status. The protocol
//! is `engine::wire`'s ("Large messages by reference"); `docs/large-messages.md`
//! says what it exposes.

use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

use rpc_transport::msg::{
    GatherPart, Gathered, Keep, Piece, PoolStats, ReadError, Reader, RegionPool, WeakRegionPool,
};

use crate::engine::gather::{self, Gather, MAX_GATHER_PARTS};
use crate::engine::wire::Descriptor;

use crate::status::Status;
use crate::transport::lock;

/// Bodies longer than this go by reference by default. Measured with `rpc-bench`
/// on the soft provider (`docs/large-messages.md`, "Choosing the threshold"): by
/// reference wins from 48 KiB on, fragments of 8 KiB slots near 16 KiB; the
/// crossover lies between.
pub const DEFAULT_RENDEZVOUS_THRESHOLD: usize = 32 * 1024;
/// Registered bytes a client connection's pools may hold by default, half for
/// requests lent and half for responses read (registered as used, so an idle
/// connection holds none): a default max message (65 MiB) fits each half.
pub const DEFAULT_CLIENT_POOL_BYTES: usize = 160 * 1024 * 1024;
/// Registered bytes a server's pools (shared by its connections) may hold by
/// default, half for responses lent and half for requests read.
pub const DEFAULT_SERVER_POOL_BYTES: usize = 1024 * 1024 * 1024;
/// RDMA Read WRs one connection keeps in flight (within the QP's outstanding-Read
/// limit of 16 and beyond its send slots).
pub(crate) const READ_WRS: u32 = 8;
/// RDMA Read WRs one server connection keeps in flight (the server's CQ holds
/// this many per connection it admits).
pub(crate) const SERVER_READ_WRS: u32 = 4;
/// A Read's largest piece when the devices do not say their max message size.
pub(crate) const UNKNOWN_MAX_READ: u32 = 1 << 20;

/// Occupancy of the registered-memory pools of a server, or of a channel's
/// connections: what a test or an operator reads to see that memory came back.
/// Holds no pool alive.
#[derive(Clone, Default)]
pub struct RendezvousStats {
    pools: Arc<Mutex<Vec<WeakRegionPool>>>,
}

impl RendezvousStats {
    /// A handle to pass to `Endpoint::rendezvous_stats` or
    /// `Server::builder().rendezvous_stats`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The sum over the live pools (bytes registered, lent or read into and not yet
    /// back, requests waiting for room).
    pub fn get(&self) -> PoolStats {
        let mut pools = lock(&self.pools);
        pools.retain(|p| p.upgrade().is_some());
        let mut sum = PoolStats::default();
        for p in pools.iter().filter_map(WeakRegionPool::upgrade) {
            let s = p.stats();
            sum.limit += s.limit;
            sum.registered += s.registered;
            sum.in_use += s.in_use;
            sum.regions_in_use += s.regions_in_use;
            sum.waiting += s.waiting;
            sum.registrations += s.registrations;
            sum.lent_in_place += s.lent_in_place;
        }
        sum
    }

    pub(crate) fn watch(&self, pool: &RegionPool) {
        lock(&self.pools).push(pool.downgrade());
    }
}

impl std::fmt::Debug for RendezvousStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RendezvousStats").field(&self.get()).finish()
    }
}

/// Queues the Reads of a body sent as a gather list: its references read into
/// their places and its inline runs copied, all in one region, after `head` (a
/// request's head, path and metadata, so that they share the buffer; empty for a
/// response).
pub(crate) fn start_gather(reader: &mut Reader, tag: u32, head: &[u8], g: &Gather) {
    let mut pieces = [Piece::Inline(&[]); MAX_GATHER_PARTS];
    let mut n = 0;
    for p in g.pieces() {
        pieces[n] = match p {
            gather::Piece::Inline(b) => Piece::Inline(b),
            gather::Piece::Ref(d) => Piece::Remote {
                addr: d.addr,
                rkey: d.rkey,
                len: d.len,
            },
        };
        n += 1;
    }
    reader.start_pieces(tag, head, &pieces[..n]);
}

/// Bytes the gather list of `g` takes in a frame (`engine::gather`'s layout).
pub(crate) fn gathered_len(g: &Gathered) -> usize {
    2 + g
        .parts
        .iter()
        .map(|p| match p {
            GatherPart::Inline(r) => 4 + r.len(),
            GatherPart::Ref { .. } => 16,
        })
        .sum::<usize>()
}

/// The list's pieces, each reference under the key `rkey` gives it (called once
/// per reference, in order).
pub(crate) fn gathered_pieces(
    g: &Gathered,
    mut rkey: impl FnMut(&Keep) -> u32,
) -> Vec<gather::Piece<'_>> {
    g.parts
        .iter()
        .map(|p| match p {
            GatherPart::Inline(r) => gather::Piece::Inline(&g.inline[r.clone()]),
            GatherPart::Ref { region, addr, len } => gather::Piece::Ref(Descriptor {
                addr: *addr,
                rkey: rkey(region),
                len: *len as u32,
            }),
        })
        .collect()
}

/// The status a call ends with when the pool refused its body (larger than the
/// whole pool: the message names the limit).
pub(crate) fn pool_refusal(e: rpc_transport::Error) -> Status {
    match e {
        rpc_transport::Error::InvalidArgument(m) => Status::resource_exhausted(m),
        e => Status::resource_exhausted(e.to_string()),
    }
}

/// The status a call ends with when its body could not be read.
pub(crate) fn read_failed(what: &str, e: ReadError) -> Status {
    match e {
        ReadError::TooLarge(m) => Status::resource_exhausted(m),
        ReadError::Failed(s) => Status::unavailable(format!(
            "RDMA Read of the {what} by reference failed ({s:?}): the peer's descriptor \
             named memory it did not lend, or the connection broke; connection closed"
        )),
    }
}

/// A waker that runs `f`: a driver's kick when a pool has room again for a read
/// that waits. `f` must take no lock a region's owner may hold (a region may come
/// back under any lock): notifying a `Notify` is the intended use.
pub(crate) fn waker(f: impl Fn() + Send + Sync + 'static) -> Waker {
    struct FnWake<F>(F);
    impl<F: Fn() + Send + Sync + 'static> Wake for FnWake<F> {
        fn wake(self: Arc<Self>) {
            (self.0)();
        }
    }
    Waker::from(Arc::new(FnWake(f)))
}
