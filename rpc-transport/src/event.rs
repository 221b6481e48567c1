//! Asynchronous (affiliated and unaffiliated) events, as in `enum ibv_event_type`.

/// Identifies a CQ, QP or SRQ in an [`AsyncEvent`]; see the objects' `id()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId(pub u64);

/// An asynchronous event reported by a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// The SRQ's receive count fell below the armed limit; the limit is disarmed.
    SrqLimitReached(ObjectId),
    /// A CQ overran; its QPs went to the error state.
    CqErr(ObjectId),
    /// A QP hit a fatal error and moved to ERR.
    QpFatal(u32),
    /// An RC QP in RTR received its first packet.
    CommEstablished(u32),
    /// A QP attached to an SRQ in ERR will produce no more receive completions.
    QpLastWqeReached(u32),
    /// The port became active.
    PortActive,
    /// The port went down.
    PortErr,
    /// The device is unusable.
    DeviceFatal,
}
