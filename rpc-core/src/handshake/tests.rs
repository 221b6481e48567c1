//! The negotiation without a network: encodings, every refusal, every check.

use std::io;

use rpc_transport::msg::handshake as exchange;

use super::*;
use crate::engine::MIN_FRAME;

fn rc_hello() -> ClientHello<RcAsk> {
    ClientHello::new(RcAsk {
        credits: 257,
        slot_size: 8192,
        max_message: 64 << 20,
    })
}

fn ud_hello() -> ClientHello<UdAsk> {
    ClientHello::new(UdAsk {
        window: 32,
        datagram: 4096,
        max_message: 1 << 20,
        qkey: 0x5252_5043,
    })
}

fn policy() -> Policy {
    Policy {
        rc: Some(RcPolicy {
            credits: 129,
            slot_size: 16384,
        }),
        ud: Some(UdPolicy {
            window: 16,
            datagram: 1024,
            max_sessions: 4,
            qkey: 0x1111_2222,
            accepts_rc: true,
        }),
        max_message: 2 << 20,
        // A server without credit windows: fixed grants (see the windows test).
        capabilities: Capabilities::NONE,
        device: None,
    }
}

fn plenty() -> Availability {
    Availability {
        receive_credits_free: 10_000,
        ud_sessions_open: 0,
    }
}

fn rejected(hello: &[u8], policy: &Policy, now: &Availability) -> Reject {
    match decide(hello, policy, now) {
        Decision::Reject(r) => r,
        d => panic!("granted: {d:?}"),
    }
}

/// Deterministic xorshift.
fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

// ---- encodings ----

#[test]
fn hellos_round_trip_with_unknown_capabilities_kept() {
    let mut rc = rc_hello();
    rc.capabilities = Capabilities::from_bits(0x8000_0000_0000_0001);
    let got = ClientHello::decode(&rc.encode()).unwrap();
    assert_eq!(got.capabilities, rc.capabilities);
    assert_eq!(got.ask, Ask::Rc(rc.ask));

    let ud = ud_hello();
    let got = ClientHello::decode(&ud.encode()).unwrap();
    assert_eq!(got, ClientHello::new(Ask::Ud(ud.ask)));
    assert_eq!(got.ask.transport(), Transport::Ud);
    assert!(asks_ud(&ud.encode()));
    assert!(!asks_ud(&rc.encode()));
    assert!(!asks_ud(b"garbage"));
}

#[test]
fn bytes_past_the_known_fields_are_ignored() {
    // Room for fields a later capability appends.
    let mut b = rc_hello().encode();
    b.extend_from_slice(&[0xee; 40]);
    assert_eq!(
        ClientHello::decode(&b).unwrap().ask,
        Ask::Rc(rc_hello().ask)
    );
    let g = RcGrant {
        credits: 2,
        slot_size: 256,
        max_message: 1,
        capabilities: Capabilities::NONE,
        device: Some(rpc_transport::DeviceCaps::from_bits(0xb)),
    };
    let mut b = g.encode();
    b.extend_from_slice(&[0xee; 40]);
    assert_eq!(Answer::decode(&b).unwrap(), Answer::Rc(g));
}

#[test]
fn answers_round_trip() {
    let answers = [
        Answer::Rc(RcGrant {
            credits: 129,
            slot_size: 8192,
            max_message: 64 << 20,
            capabilities: Capabilities::from_bits(5),
            device: None,
        }),
        Answer::Ud(UdGrant {
            window: 32,
            datagram: 1024,
            max_message: 3,
            qkey: 0x1111_2222,
            session: 0xdead_beef,
            accepts_rc: true,
            capabilities: Capabilities::NONE,
            device: None,
        }),
        Answer::Ud(UdGrant {
            window: 1,
            datagram: 4096,
            max_message: 0,
            qkey: 0,
            session: 1,
            accepts_rc: false,
            capabilities: Capabilities::NONE,
            device: None,
        }),
        Answer::Reject(Reject::NotRdmaRpc),
        Answer::Reject(Reject::UnsupportedVersion {
            client: 1,
            server: VERSION,
        }),
        Answer::Reject(Reject::Malformed),
        Answer::Reject(Reject::RcNotAccepted),
        Answer::Reject(Reject::UdNotServed),
        Answer::Reject(Reject::NoReceiveCredits),
        Answer::Reject(Reject::SessionLimit { limit: 4096 }),
        Answer::Reject(Reject::Unknown(999)),
    ];
    for a in answers {
        assert_eq!(Answer::decode(&a.encode()).unwrap(), a);
    }
}

#[test]
fn a_refusal_of_another_version_is_still_read() {
    // A newer server refusing this client: the refusal's layout never changes.
    let r = Reject::UnsupportedVersion {
        client: VERSION,
        server: 7,
    };
    let b = r.encode();
    assert_eq!(u16::from_be_bytes([b[4], b[5]]), 7);
    assert_eq!(Answer::decode(&b).unwrap(), Answer::Reject(r));
    let mut b = Reject::NoReceiveCredits.encode();
    b[5] = 9;
    assert_eq!(
        Answer::decode(&b).unwrap(),
        Answer::Reject(Reject::NoReceiveCredits)
    );
}

#[test]
fn truncated_hellos_and_answers_are_errors_at_every_length() {
    for full in [rc_hello().encode(), ud_hello().encode()] {
        for cut in 0..full.len() {
            let r = ClientHello::decode(&full[..cut]).unwrap_err();
            let want = if cut < 4 {
                Reject::NotRdmaRpc
            } else {
                Reject::Malformed
            };
            assert_eq!(r, want, "cut at {cut}");
        }
    }
    let answers = [
        rc_grant().encode(),
        ud_grant().encode(),
        Reject::SessionLimit { limit: 2 }.encode(),
    ];
    for full in answers {
        for cut in 0..full.len() {
            assert!(
                matches!(
                    Answer::decode(&full[..cut]),
                    Err(HandshakeError::BadAnswer(_))
                ),
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn garbage_never_panics() {
    let mut seed = 0x5eed_u64;
    let pol = policy();
    for i in 0..20_000 {
        let len = (rng(&mut seed) % 64) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng(&mut seed) as u8).collect();
        // Half the time a plausible head, so the decoders get past the magic.
        if i % 2 == 0 && len >= 8 {
            b[0..4].copy_from_slice(&MAGIC);
            b[4..6].copy_from_slice(&VERSION.to_be_bytes());
            b[6] %= 3;
            b[7] %= 3;
        }
        let _ = ClientHello::decode(&b);
        let _ = decide(&b, &pol, &plenty());
        let _ = asks_ud(&b);
        let _ = Answer::decode(&b);
        let _ = check_rc(&rc_hello(), &b);
        let _ = check_ud(&ud_hello(), &b);
    }
}

// ---- the server's decision: every refusal ----

#[test]
fn a_stranger_another_version_and_a_malformed_hello_are_refused() {
    let p = policy();
    let mut b = rc_hello().encode();
    b[0] = b'X';
    assert_eq!(rejected(&b, &p, &plenty()), Reject::NotRdmaRpc);

    let mut b = rc_hello().encode();
    b[4..6].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(
        rejected(&b, &p, &plenty()),
        Reject::UnsupportedVersion {
            client: 1,
            server: 2
        }
    );

    let b = rc_hello().encode();
    assert_eq!(rejected(&b[..20], &p, &plenty()), Reject::Malformed);
    let mut unknown = b.clone();
    unknown[7] = 9;
    assert_eq!(rejected(&unknown, &p, &plenty()), Reject::Malformed);
    // An answer sent as a hello.
    assert_eq!(
        rejected(&rc_grant().encode(), &p, &plenty()),
        Reject::Malformed
    );
}

#[test]
fn asks_that_cannot_work_are_malformed() {
    let p = policy();
    for credits in [0, 1] {
        let mut h = rc_hello();
        h.ask.credits = credits;
        assert_eq!(rejected(&h.encode(), &p, &plenty()), Reject::Malformed);
    }
    let mut h = ud_hello();
    h.ask.window = 0;
    assert_eq!(rejected(&h.encode(), &p, &plenty()), Reject::Malformed);
    let mut h = ud_hello();
    h.ask.datagram = 0;
    assert_eq!(rejected(&h.encode(), &p, &plenty()), Reject::Malformed);
}

#[test]
fn a_transport_the_server_does_not_take_is_refused() {
    let mut p = policy();
    p.rc = None;
    assert_eq!(
        rejected(&rc_hello().encode(), &p, &plenty()),
        Reject::RcNotAccepted
    );
    let mut p = policy();
    p.ud = None;
    assert_eq!(
        rejected(&ud_hello().encode(), &p, &plenty()),
        Reject::UdNotServed
    );
    // A caller serving one transport gets the other's grant as a refusal.
    let d = decide(&ud_hello().encode(), &policy(), &plenty());
    assert_eq!(d.into_rc(), Err(Reject::UdNotServed));
    let d = decide(&rc_hello().encode(), &policy(), &plenty());
    assert_eq!(d.into_ud(), Err(Reject::RcNotAccepted));
}

#[test]
fn an_exhausted_receive_pool_refuses_rc() {
    let p = policy();
    let now = |free| Availability {
        receive_credits_free: free,
        ud_sessions_open: 0,
    };
    // The grant is min(asked 257, policy 129) = 129: exactly that much free is enough.
    assert_eq!(
        rejected(&rc_hello().encode(), &p, &now(128)),
        Reject::NoReceiveCredits
    );
    assert!(decide(&rc_hello().encode(), &p, &now(129))
        .into_rc()
        .is_ok());
    // UD does not draw on the pool.
    assert!(decide(&ud_hello().encode(), &p, &now(0)).into_ud().is_ok());
}

#[test]
fn the_session_limit_refuses_ud_naming_it() {
    let p = policy();
    let now = |open| Availability {
        receive_credits_free: 0,
        ud_sessions_open: open,
    };
    assert!(decide(&ud_hello().encode(), &p, &now(3)).into_ud().is_ok());
    assert_eq!(
        rejected(&ud_hello().encode(), &p, &now(4)),
        Reject::SessionLimit { limit: 4 }
    );
    // RC does not count sessions.
    assert!(decide(&rc_hello().encode(), &p, &plenty())
        .into_rc()
        .is_ok());
}

// ---- the server's decision: what is granted ----

#[test]
fn rc_grants_the_smaller_credits_and_the_servers_slot() {
    let (ask, grant) = decide(&rc_hello().encode(), &policy(), &plenty())
        .into_rc()
        .unwrap();
    assert_eq!(ask, rc_hello().ask);
    assert_eq!(
        grant,
        RcGrant {
            credits: 129,
            slot_size: 16384,
            max_message: 2 << 20,
            capabilities: Capabilities::NONE,
            device: None,
        }
    );
    let mut h = rc_hello();
    h.ask.credits = 9;
    let (_, grant) = decide(&h.encode(), &policy(), &plenty()).into_rc().unwrap();
    assert_eq!(grant.credits, 9, "never more than asked");
    // A policy below 2 credits still grants 2 (the engine's CANCEL credit).
    let mut p = policy();
    p.rc = Some(RcPolicy {
        credits: 1,
        slot_size: 256,
    });
    let (_, grant) = decide(&h.encode(), &p, &plenty()).into_rc().unwrap();
    assert_eq!(grant.credits, 2);
}

#[test]
fn with_credit_windows_rc_starts_at_the_minimal_window_whatever_was_asked() {
    let mut p = policy();
    p.capabilities = Capabilities::SUPPORTED;
    let (ask, grant) = decide(&rc_hello().encode(), &p, &plenty())
        .into_rc()
        .unwrap();
    assert_eq!(ask.credits, 257, "the ask stays the window's cap");
    assert!(grant.capabilities.contains(Capabilities::CREDIT_WINDOWS));
    assert_eq!(grant.credits, 2);
    // Two free receives admit it; one does not.
    let now = |free| Availability {
        receive_credits_free: free,
        ud_sessions_open: 0,
    };
    assert!(decide(&rc_hello().encode(), &p, &now(2)).into_rc().is_ok());
    assert_eq!(
        rejected(&rc_hello().encode(), &p, &now(1)),
        Reject::NoReceiveCredits
    );
    // A client without the capability gets the fixed grant of old.
    let mut h = rc_hello();
    h.capabilities = Capabilities::NONE;
    let (_, grant) = decide(&h.encode(), &p, &plenty()).into_rc().unwrap();
    assert_eq!(grant.credits, 129);
}

#[test]
fn the_connection_limit_refusal_names_the_limit() {
    let no = Reject::ConnectionLimit { limit: 7 };
    assert_eq!(
        check_rc(&rc_hello(), &no.encode()).unwrap_err().to_string(),
        "server refused the connection: its limit of 7 connections is reached (Server::max_connections)"
    );
}

#[test]
fn ud_grants_the_smaller_window_and_datagram_and_says_if_rc_is_taken() {
    let (ask, grant) = decide(&ud_hello().encode(), &policy(), &plenty())
        .into_ud()
        .unwrap();
    assert_eq!(ask, ud_hello().ask);
    assert_eq!(
        grant,
        UdGrant {
            window: 16,
            datagram: 1024,
            max_message: 2 << 20,
            qkey: 0x1111_2222,
            session: 0,
            accepts_rc: true,
            capabilities: Capabilities::NONE,
            device: None,
        }
    );
    let mut h = ud_hello();
    h.ask.window = 3;
    h.ask.datagram = 512;
    let mut p = policy();
    p.ud.as_mut().unwrap().accepts_rc = false;
    let (_, grant) = decide(&h.encode(), &p, &plenty()).into_ud().unwrap();
    assert_eq!((grant.window, grant.datagram), (3, 512));
    assert!(!grant.accepts_rc);
}

#[test]
fn only_common_capabilities_are_granted() {
    let mut h = rc_hello();
    h.capabilities = Capabilities::from_bits(0b1011);
    let mut p = policy();
    p.capabilities = Capabilities::from_bits(0b0110);
    let (_, grant) = decide(&h.encode(), &p, &plenty()).into_rc().unwrap();
    assert_eq!(grant.capabilities, Capabilities::from_bits(0b0010));
    // A policy offering none grants none, so a newer client's bits all drop out.
    let (_, grant) = decide(&h.encode(), &policy(), &plenty()).into_rc().unwrap();
    assert_eq!(grant.capabilities, Capabilities::NONE);
}

// ---- the client's check ----

fn rc_grant() -> RcGrant {
    RcGrant {
        credits: 129,
        slot_size: 8192,
        max_message: 64 << 20,
        capabilities: Capabilities::NONE,
        device: None,
    }
}

fn ud_grant() -> UdGrant {
    UdGrant {
        window: 32,
        datagram: 1024,
        max_message: 1 << 20,
        qkey: 0x1111_2222,
        session: 7,
        accepts_rc: true,
        capabilities: Capabilities::NONE,
        device: None,
    }
}

fn rc_error(answer: &[u8]) -> String {
    check_rc(&rc_hello(), answer).unwrap_err().to_string()
}

fn ud_error(answer: &[u8]) -> String {
    check_ud(&ud_hello(), answer).unwrap_err().to_string()
}

#[test]
fn a_decision_checks_out_on_the_client() {
    let d = decide(&rc_hello().encode(), &policy(), &plenty());
    let (_, grant) = d.into_rc().unwrap();
    assert_eq!(check_rc(&rc_hello(), &grant.encode()).unwrap(), grant);
    let d = decide(&ud_hello().encode(), &policy(), &plenty());
    let (_, mut grant) = d.into_ud().unwrap();
    grant.session = 5;
    assert_eq!(check_ud(&ud_hello(), &grant.encode()).unwrap(), grant);
}

#[test]
fn refusals_read_as_today() {
    // The texts users (and the end-to-end tests) see.
    assert_eq!(
        rc_error(&Reject::NoReceiveCredits.encode()),
        "server refused the connection (no receive credits left)"
    );
    assert_eq!(
        rc_error(&Reject::RcNotAccepted.encode()),
        "server refused the connection: it does not accept RC connections (UD only)"
    );
    assert_eq!(
        ud_error(&Reject::SessionLimit { limit: 2 }.encode()),
        "server refused the UD session: its limit of 2 UD sessions is reached"
    );
    assert_eq!(
        ud_error(&Reject::UdNotServed.encode()),
        "server refused the UD session (it does not serve UD)"
    );
    let version = Reject::UnsupportedVersion {
        client: 2,
        server: 3,
    };
    assert_eq!(
        rc_error(&version.encode()),
        "server refused the connection: it speaks rdma-rpc protocol version 3, this client version 2"
    );
    assert!(rc_error(&Reject::Malformed.encode()).contains("malformed"));
    assert!(ud_error(&Reject::NotRdmaRpc.encode()).contains("did not recognise"));
    assert!(rc_error(&Reject::Unknown(77).encode()).contains("reason 77"));
    assert!(matches!(
        check_rc(&rc_hello(), &Reject::NoReceiveCredits.encode()),
        Err(HandshakeError::Refused {
            transport: Transport::Rc,
            reason: Reject::NoReceiveCredits
        })
    ));
}

#[test]
fn rc_grants_that_cannot_work_are_errors() {
    let with = |f: fn(&mut RcGrant)| {
        let mut g = rc_grant();
        f(&mut g);
        rc_error(&g.encode())
    };
    assert_eq!(
        with(|g| g.credits = 1),
        "server offered 1 credits of 8192-byte slots"
    );
    assert_eq!(
        with(|g| g.slot_size = MIN_FRAME as u32 - 1),
        format!("server offered 129 credits of {}-byte slots", MIN_FRAME - 1)
    );
    assert_eq!(
        with(|g| g.credits = 258),
        "server granted 258 credits, more than the 257 asked"
    );
    assert!(with(|g| g.capabilities = Capabilities::from_bits(1)).contains("capabilities 0x1"));
    // The edges are fine.
    let mut g = rc_grant();
    g.credits = 257;
    g.slot_size = MIN_FRAME as u32;
    assert!(check_rc(&rc_hello(), &g.encode()).is_ok());
}

#[test]
fn ud_grants_that_cannot_work_are_errors() {
    let with = |f: fn(&mut UdGrant)| {
        let mut g = ud_grant();
        f(&mut g);
        ud_error(&g.encode())
    };
    assert!(with(|g| g.window = 0).contains("window of 0"));
    assert!(with(|g| g.window = 33).contains("window of 33 calls, asked 32"));
    assert!(with(|g| g.datagram = 0).contains("0-byte datagrams"));
    assert!(with(|g| g.datagram = 4097).contains("4097-byte datagrams"));
    assert!(with(|g| g.capabilities = Capabilities::from_bits(4)).contains("capabilities"));
}

#[test]
fn answers_of_the_wrong_shape_are_errors() {
    assert!(rc_error(&ud_grant().encode()).contains("with a UD grant"));
    assert!(ud_error(&rc_grant().encode()).contains("with an RC grant"));
    let mut b = rc_grant().encode();
    b[0] = b'H';
    assert_eq!(rc_error(&b), "not an rdma-rpc peer (bad handshake magic)");
    let mut b = rc_grant().encode();
    b[4..6].copy_from_slice(&3u16.to_be_bytes());
    assert!(rc_error(&b).contains("granted in protocol version 3"));
    let mut b = rc_grant().encode();
    b[6] = 0;
    assert!(
        rc_error(&b).contains("unknown kind 0"),
        "a hello as an answer"
    );
    let mut b = rc_grant().encode();
    b[7] = 5;
    assert!(rc_error(&b).contains("unknown transport 5"));
}

// ---- the exchange's failures, and version-1 peers ----

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_closed_connection_or_a_stranger_reads_clearly() {
    let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
    let e = HandshakeError::from(eof);
    assert_eq!(e, HandshakeError::Closed);
    assert!(
        e.to_string().contains("older than protocol version 2"),
        "{e}"
    );

    let e = block_on(exchange::recv(&mut &b"HTTP/1.1 400"[..])).unwrap_err();
    assert_eq!(
        HandshakeError::from(e).to_string(),
        "not an rdma-rpc peer (bad handshake magic)"
    );
    assert!(HandshakeError::from(io::Error::other("boom"))
        .to_string()
        .contains("boom"));
}

#[test]
fn a_version_1_peer_is_recognised_and_answered_in_its_format() {
    // The first bytes of a version-1 hello: magic, version 1, flags.
    let v1 = b"RRPC\x00\x01\x00\x00";
    let e = block_on(exchange::recv(&mut &v1[..])).unwrap_err();
    let old = OldPeer::recognize(&e).expect("an old rdma-rpc peer");
    assert_eq!(old.version(), 1);
    assert_eq!(
        old.to_string(),
        "peer speaks rdma-rpc protocol version 1, this side 2"
    );
    // What a version-1 client reads: 50 bytes, "RRPC", version 2 (which it refuses
    // as "peer speaks protocol version 2, this side 1"), the rejected flag.
    let b = old.refusal();
    assert_eq!(b.len(), 50);
    assert_eq!(&b[0..4], b"RRPC");
    assert_eq!(u16::from_be_bytes([b[4], b[5]]), 2);
    assert_eq!(u16::from_be_bytes([b[6], b[7]]), 1);

    // Another stranger is not an old peer.
    let e = block_on(exchange::recv(&mut &b"GET / HTTP/1.1"[..])).unwrap_err();
    assert!(OldPeer::recognize(&e).is_none());
    assert!(OldPeer::recognize(&io::Error::other("x")).is_none());
}
