//! The device word at the handshake and the framing rule (see `device.rs`).

use rpc_transport::msg::ImmMode;
use rpc_transport::{DeviceCaps, Fabric};

use super::device::imm_mode;
use super::*;

fn roce() -> DeviceCaps {
    DeviceCaps {
        fabric: Fabric::Roce,
        imm_data: true,
        ud: true,
        atomics: true,
        srq: true,
        mw_type2: true,
        max_inline: 256,
        max_sge: 32,
        max_msg_size: Some(1 << 30),
    }
}

fn iwarp() -> DeviceCaps {
    DeviceCaps {
        fabric: Fabric::Iwarp,
        imm_data: false,
        ud: false,
        atomics: false,
        mw_type2: false,
        ..roce()
    }
}

fn rc_only() -> DeviceCaps {
    DeviceCaps {
        ud: false,
        ..roce()
    }
}

fn rc_hello(device: Option<DeviceCaps>) -> ClientHello<RcAsk> {
    let mut h = ClientHello::new(RcAsk {
        credits: 9,
        slot_size: 8192,
        max_message: 1 << 20,
    });
    h.device = device;
    h
}

fn ud_hello(device: Option<DeviceCaps>) -> ClientHello<UdAsk> {
    let mut h = ClientHello::new(UdAsk {
        window: 4,
        datagram: 4096,
        max_message: 1 << 20,
        qkey: 7,
    });
    h.device = device;
    h
}

fn policy(device: Option<DeviceCaps>) -> Policy {
    Policy {
        rc: Some(RcPolicy {
            credits: 9,
            slot_size: 8192,
        }),
        ud: Some(UdPolicy {
            window: 4,
            datagram: 1024,
            max_sessions: 4,
            qkey: 3,
            accepts_rc: true,
        }),
        max_message: 1 << 20,
        capabilities: Capabilities::NONE,
        device,
    }
}

fn plenty() -> Availability {
    Availability {
        receive_credits_free: 1000,
        ud_sessions_open: 0,
    }
}

/// The client's framing after the server's grant, as `transport::client::rc` does.
fn client_mode(client: DeviceCaps, server: Option<DeviceCaps>) -> Result<ImmMode, String> {
    let hello = rc_hello(Some(client));
    let answer = decide(&hello.encode(), &policy(server), &plenty());
    let bytes = match answer {
        Decision::Rc { grant, .. } => grant.encode(),
        Decision::Reject(r) => r.encode(),
        Decision::Ud { .. } => unreachable!("an RC hello"),
    };
    let grant = check_rc(&hello, &bytes).map_err(|e| e.to_string())?;
    Ok(imm_mode(&client, grant.device))
}

#[test]
fn the_device_word_travels_in_hello_and_grants_and_older_peers_send_none() {
    let h = rc_hello(Some(iwarp()));
    assert_eq!(
        ClientHello::decode(&h.encode()).unwrap().device,
        Some(iwarp())
    );
    let h = ud_hello(Some(rc_only()));
    assert_eq!(
        ClientHello::decode(&h.encode()).unwrap().device,
        Some(rc_only())
    );
    // A hello of an older build ends at its ask.
    assert_eq!(
        ClientHello::decode(&rc_hello(None).encode())
            .unwrap()
            .device,
        None
    );

    let (_, g) = decide(
        &rc_hello(Some(roce())).encode(),
        &policy(Some(iwarp())),
        &plenty(),
    )
    .into_rc()
    .unwrap();
    assert_eq!(g.device, Some(iwarp()));
    assert_eq!(Answer::decode(&g.encode()).unwrap(), Answer::Rc(g));
    let (_, g) = decide(
        &ud_hello(Some(roce())).encode(),
        &policy(Some(roce())),
        &plenty(),
    )
    .into_ud()
    .unwrap();
    assert_eq!(Answer::decode(&g.encode()).unwrap(), Answer::Ud(g));
    // An older server's grant has no device word.
    let old = RcGrant {
        device: None,
        ..g_rc()
    };
    match Answer::decode(&old.encode()).unwrap() {
        Answer::Rc(g) => assert_eq!(g.device, None),
        a => panic!("{a:?}"),
    }
}

fn g_rc() -> RcGrant {
    RcGrant {
        credits: 2,
        slot_size: 8192,
        max_message: 1,
        capabilities: Capabilities::NONE,
        device: Some(roce()),
    }
}

#[test]
fn immediates_only_when_both_devices_have_them() {
    assert_eq!(imm_mode(&roce(), Some(roce())), ImmMode::Immediate);
    assert_eq!(imm_mode(&rc_only(), Some(roce())), ImmMode::Immediate);
    assert_eq!(imm_mode(&iwarp(), Some(roce())), ImmMode::Header);
    assert_eq!(imm_mode(&roce(), Some(iwarp())), ImmMode::Header);
    assert_eq!(imm_mode(&iwarp(), Some(iwarp())), ImmMode::Header);
    // A peer that sent no word (an older build) has immediates.
    assert_eq!(imm_mode(&roce(), None), ImmMode::Immediate);
    assert_eq!(imm_mode(&iwarp(), None), ImmMode::Header);
}

#[test]
fn a_server_without_immediates_frames_every_client_in_the_payload() {
    assert_eq!(client_mode(iwarp(), Some(iwarp())), Ok(ImmMode::Header));
    // The client's device has them, the server's not: the grant tells it.
    assert_eq!(client_mode(roce(), Some(iwarp())), Ok(ImmMode::Header));
    assert_eq!(client_mode(roce(), Some(roce())), Ok(ImmMode::Immediate));
    // An older server (no device word) is taken to have immediates.
    assert_eq!(client_mode(roce(), None), Ok(ImmMode::Immediate));
}

#[test]
fn a_server_with_immediates_refuses_a_client_without_naming_why() {
    let e = client_mode(iwarp(), Some(roce())).unwrap_err();
    assert_eq!(
        e,
        "server refused the connection: this client's device has no immediate data \
         (iWARP), which the server's receive pool needs"
    );
    // So does an older server, which is taken to have immediates.
    assert!(client_mode(iwarp(), None).is_err());
    let d = decide(
        &ud_hello(Some(iwarp())).encode(),
        &policy(Some(roce())),
        &plenty(),
    );
    assert_eq!(d, Decision::Reject(Reject::NoImmediateData));
}

#[test]
fn a_server_without_immediates_refuses_an_older_client() {
    let d = decide(&rc_hello(None).encode(), &policy(Some(iwarp())), &plenty());
    assert_eq!(d, Decision::Reject(Reject::ClientTooOldForHeaderFraming));
    // That older client still reads a reason (a code unknown to it).
    let e = check_rc(
        &rc_hello(None),
        &Reject::ClientTooOldForHeaderFraming.encode(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot frame without it"), "{e}");
}

#[test]
fn a_ud_ask_to_a_device_without_ud_is_refused_naming_it() {
    let hello = ud_hello(Some(roce()));
    let d = decide(&hello.encode(), &policy(Some(rc_only())), &plenty());
    assert_eq!(d, Decision::Reject(Reject::NoUdDevice));
    let e = check_ud(&hello, &Reject::NoUdDevice.encode())
        .unwrap_err()
        .to_string();
    // The channel falls back to RC on this text (`transport::channel`).
    assert!(e.contains(NO_UD), "{e}");
    assert_eq!(
        e,
        "server refused the UD session: the server's device has no UD (RC only)"
    );
    // RC to the same server is granted.
    let d = decide(
        &rc_hello(Some(roce())).encode(),
        &policy(Some(rc_only())),
        &plenty(),
    );
    assert!(matches!(d, Decision::Rc { .. }), "{d:?}");
}
