//! Arbitrary datagrams into both ends of the UD engine: a server with one open session
//! and a client with calls in flight. Nothing may panic; a request the server
//! accepts names ranges inside its datagram and can be answered; whatever the client
//! takes for a reply completes one of its own calls, once.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rpc_core::fuzzing::ud::{UdClient, UdClientConfig, UdServer, UdServerConfig};
use rpc_core::fuzzing::CallHead;
use rpc_core::MetadataMap;

const DATAGRAM: usize = 1024;
const PEER_QPN: u32 = 7;

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let mut server = UdServer::new(UdServerConfig {
        window: 4,
        datagram: DATAGRAM,
        max_sessions: 2,
    });
    let session = server
        .open_session(PEER_QPN, DATAGRAM)
        .expect("first session");
    let mut client: UdClient<u32, u32> = UdClient::new(UdClientConfig::new(session, 4, DATAGRAM));
    let mut out = vec![0u8; DATAGRAM];
    let md = MetadataMap::new();
    let mut started = Vec::new();
    for waiter in 0..3u32 {
        if client.reserve() {
            if let Ok((id, _)) = client.start_call(
                now,
                waiter,
                waiter,
                &CallHead::new("/fuzz.Svc/Method", &md, Some(Duration::from_secs(1))),
                &(),
                &mut out,
            ) {
                started.push(id);
            }
        }
    }

    // Each record: imm:u32, source selector:u8, len:u8, then `len` bytes.
    let mut rest = data;
    let mut completed = Vec::new();
    while rest.len() >= 6 {
        let imm = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let from_peer = rest[4] & 1 == 0;
        let len = (rest[5] as usize).min(rest.len() - 6);
        let dgram = &rest[6..6 + len];
        rest = &rest[6 + len..];

        let src = if from_peer { PEER_QPN } else { PEER_QPN + 1 };
        if let Some(inc) = server.handle_datagram(now, src, imm, dgram) {
            assert!(inc.path.end <= dgram.len() && inc.path.start <= inc.path.end);
            assert!(inc.body.end <= dgram.len() && inc.body.start <= inc.body.end);
            let _ = server.respond(
                inc.session,
                inc.id,
                Ok((&MetadataMap::new(), &())),
                &mut out,
            );
        }
        while server.poll_transmit(&mut out).is_some() {}

        if let Some(c) = client.handle_datagram(now, imm, dgram) {
            assert!(
                started.contains(&c.id),
                "a completion for a call never started"
            );
            assert!(!completed.contains(&c.id), "call {} completed twice", c.id);
            completed.push(c.id);
        }
    }
});
