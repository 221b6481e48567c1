//! The server's decision: a pure function of the hello, the policy and what is free.

use rpc_transport::DeviceCaps;

use super::device::assumed;
use super::{Ask, Capabilities, ClientHello, RcAsk, RcGrant, Reject, UdAsk, UdGrant};

/// What a server takes over RC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcPolicy {
    /// Credits a connection gets at most (calls in flight plus the one clients keep
    /// for CANCEL frames); never fewer than 2 are granted.
    pub credits: u32,
    /// The frame size of every connection.
    pub slot_size: u32,
}

/// What a server serves over UD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdPolicy {
    /// Calls a session may have outstanding at most.
    pub window: u32,
    /// Largest datagram payload the server's UD QP handles.
    pub datagram: u32,
    /// Sessions open at once at most.
    pub max_sessions: u32,
    /// Q_Key of the server's UD QP.
    pub qkey: u32,
    /// Told to UD clients: whether the server takes RC connections too. (Separate
    /// from [`Policy::rc`], which is whether this decision may grant one: a caller
    /// deciding for both transports sets it to `rc.is_some()`.)
    pub accepts_rc: bool,
}

/// A server's settings, as far as the handshake goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// RC connections, or `None` to refuse them ([`Reject::RcNotAccepted`]).
    pub rc: Option<RcPolicy>,
    /// UD sessions, or `None` to refuse them ([`Reject::UdNotServed`]).
    pub ud: Option<UdPolicy>,
    /// Largest message body the server accepts.
    pub max_message: u64,
    /// Features the server implements.
    pub capabilities: Capabilities,
    /// The server's device (`None`: taken to have everything, as an older server).
    /// Its shared receive pools frame in its mode: a device with immediates
    /// refuses clients without ([`Reject::NoImmediateData`]), a device without them
    /// frames every connection in the payload's head, which an older client (no
    /// device word) cannot ([`Reject::ClientTooOldForHeaderFraming`]); a UD ask to a
    /// device without UD is refused [`Reject::NoUdDevice`].
    pub device: Option<DeviceCaps>,
}

/// What the server has free now. Only the asked transport's field is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Availability {
    /// Receive-pool credits not granted to any connection.
    pub receive_credits_free: u32,
    /// UD sessions open.
    pub ud_sessions_open: u32,
}

/// What [`decide`] decided, with what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// An RC connection: the caller reserves `grant.credits` of its pool, connects
    /// its QP and answers [`RcGrant::encode`].
    Rc {
        /// What the client asked (its `max_message` bounds what the server sends).
        ask: RcAsk,
        /// What is granted.
        grant: RcGrant,
    },
    /// A UD session: the caller opens it in its engine, sets `grant.session` and
    /// answers [`UdGrant::encode`].
    Ud {
        /// What the client asked.
        ask: UdAsk,
        /// What is granted (`session` still 0).
        grant: UdGrant,
    },
    /// Refused: the caller answers [`Reject::encode`].
    Reject(Reject),
}

impl Decision {
    /// For a caller that grants only RC (its policy has no UD): the grant or the
    /// refusal. A UD grant cannot come from such a policy; it would be refused as
    /// [`Reject::UdNotServed`].
    pub fn into_rc(self) -> Result<(RcAsk, RcGrant), Reject> {
        match self {
            Decision::Rc { ask, grant } => Ok((ask, grant)),
            Decision::Ud { .. } => Err(Reject::UdNotServed),
            Decision::Reject(r) => Err(r),
        }
    }

    /// For a caller that grants only UD (its policy has no RC): the grant or the
    /// refusal. An RC grant cannot come from such a policy; it would be refused as
    /// [`Reject::RcNotAccepted`].
    pub fn into_ud(self) -> Result<(UdAsk, UdGrant), Reject> {
        match self {
            Decision::Ud { ask, grant } => Ok((ask, grant)),
            Decision::Rc { .. } => Err(Reject::RcNotAccepted),
            Decision::Reject(r) => Err(r),
        }
    }
}

/// Whether `hello` is a readable hello that asks for a UD session (lets a server
/// that decides for each transport in its own place route it).
pub fn asks_ud(hello: &[u8]) -> bool {
    matches!(
        ClientHello::decode(hello),
        Ok(ClientHello {
            ask: Ask::Ud(_),
            ..
        })
    )
}

/// Decides on the client hello `hello` under `policy` with `now` free.
///
/// RC: with [`Capabilities::CREDIT_WINDOWS`] agreed, the minimal window of 2
/// credits (the server then moves it between 2 and `min(asked, policy)`); without,
/// `min(asked, policy)` credits for good (a client asking fewer than 2 is
/// malformed); refused when more than the free receive credits; the server's slot
/// size.
/// UD: `min(asked, policy)` window and datagram, refused once `max_sessions` are
/// open. Both: the server's largest message, the capabilities both offer.
pub fn decide(hello: &[u8], policy: &Policy, now: &Availability) -> Decision {
    let hello = match ClientHello::decode(hello) {
        Ok(h) => h,
        Err(r) => return Decision::Reject(r),
    };
    let capabilities = hello.capabilities.common(policy.capabilities);
    let server = assumed(policy.device);
    match (server.imm_data, hello.device) {
        (true, Some(client)) if !client.imm_data => {
            return Decision::Reject(Reject::NoImmediateData);
        }
        (false, None) => return Decision::Reject(Reject::ClientTooOldForHeaderFraming),
        _ => {}
    }
    let device = policy.device;
    match hello.ask {
        Ask::Rc(ask) => {
            let Some(rc) = policy.rc else {
                return Decision::Reject(Reject::RcNotAccepted);
            };
            if ask.credits < 2 {
                return Decision::Reject(Reject::Malformed);
            }
            let credits = if capabilities.contains(Capabilities::CREDIT_WINDOWS) {
                // The minimal window; the server grows it once the peer has proven
                // its RDMA path, out of the shared pool.
                crate::engine::credit::MIN_WINDOW
            } else {
                ask.credits.min(rc.credits.max(2))
            };
            if credits > now.receive_credits_free {
                return Decision::Reject(Reject::NoReceiveCredits);
            }
            let grant = RcGrant {
                credits,
                slot_size: rc.slot_size,
                max_message: policy.max_message,
                capabilities,
                device,
            };
            Decision::Rc { ask, grant }
        }
        Ask::Ud(ask) => {
            if !server.ud {
                return Decision::Reject(Reject::NoUdDevice);
            }
            let Some(ud) = policy.ud else {
                return Decision::Reject(Reject::UdNotServed);
            };
            if ask.window == 0 || ask.datagram == 0 {
                return Decision::Reject(Reject::Malformed);
            }
            if now.ud_sessions_open >= ud.max_sessions {
                return Decision::Reject(Reject::SessionLimit {
                    limit: ud.max_sessions,
                });
            }
            let grant = UdGrant {
                window: ask.window.min(ud.window.max(1)),
                datagram: ask.datagram.min(ud.datagram),
                max_message: policy.max_message,
                qkey: ud.qkey,
                session: 0,
                accepts_rc: ud.accepts_rc,
                capabilities,
                device,
            };
            Decision::Ud { ask, grant }
        }
    }
}
