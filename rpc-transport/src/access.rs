//! Memory access rights, as in `enum ibv_access_flags`.

bitflags::bitflags! {
    /// What the local HCA and remote peers may do with a memory region
    /// (or, on a QP, which remote operations it accepts).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The HCA may write the region (needed for receives, RDMA Read targets, atomics).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA Write into the region.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA Read from the region.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on the region.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`); a window
        /// then grants its own remote rights over its range, whatever the region's.
        const MW_BIND = 1 << 4;
    }
}
