//! Streaming calls end to end over the soft RDMA provider (RC on 127.0.0.1),
//! written against the transport's raw seam (`tests::raw_stream`): what a user of a
//! server-, client- or bidirectional stream relies on.

use std::time::Duration;

use rpc_core::transport::{Channel, Server};
use rpc_core::Code;
use tests::raw_stream::{
    next, open, read_all, ChanSource, CountSource, Seen, StreamService, Witness,
};
use tests::{serve_router, Echo};

async fn channel() -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop) = serve_router(Server::builder().add_service(StreamService)).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    (ch, stop)
}

/// A client source with nothing to send (a server-streaming call).
fn nothing() -> rpc_core::stream::BoxMessageSource {
    CountSource::boxed(0, 0, 0, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_that_ends_ok_gives_every_message_then_none() {
    let (mut ch, _stop) = channel().await;
    let r = open(&mut ch, "Count", 101, &[5, 10, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(
        msgs.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(msgs.iter().all(|m| m.data.len() == 10));
    assert!(
        inbound.as_mut().trailers().is_some(),
        "an OK end has trailers"
    );
    assert!(next(&mut inbound).await.is_none(), "still ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_mid_stream_gives_the_messages_before_it_then_that_status() {
    let (mut ch, _stop) = channel().await;
    let r = open(&mut ch, "Count", 102, &[3, 1, 1], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    assert_eq!(msgs.len(), 3);
    let s = end.unwrap_err();
    assert_eq!(s.code(), Code::Aborted);
    assert_eq!(s.message(), "failed after 3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_before_its_response_fails_the_call_future() {
    let (mut ch, _stop) = channel().await;
    let e = open(&mut ch, "Fail", 103, &[], None, nothing())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_response_stream_cancels_the_call_at_the_server() {
    let (mut ch, _stop) = channel().await;
    // Read two messages, then drop: the producer (still able to produce) sees it.
    let mut w = Witness::new(104);
    let r = open(&mut ch, "Endless", 104, &[1], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    for i in 0..2 {
        assert_eq!(next(&mut inbound).await.unwrap().unwrap().id, i);
    }
    drop(inbound);
    w.wait_for("the server's producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;

    // Without reading anything: the server's writer is blocked on the stream's
    // credits when the reset comes, and is woken by it.
    let mut w = Witness::new(105);
    let r = open(&mut ch, "Endless", 105, &[1], None, nothing())
        .await
        .unwrap();
    w.wait_for("the window's worth produced", |s| *s == Seen::Polled(16))
        .await;
    drop(r);
    w.wait_for("the blocked producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
    // The connection is fine afterwards.
    let r = open(&mut ch, "Count", 106, &[2, 1, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    assert_eq!(read_all(&mut inbound).await.0.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_source_ending_ends_the_servers_inbound_after_every_message() {
    let (mut ch, _stop) = channel().await;
    let mut w = Witness::new(107);
    // Client-streaming: 500 messages then the end (half-close); the server answers
    // once its inbound ended, having seen every message (close drains in-flight
    // messages before the end).
    let (tx, src) = ChanSource::new(107, 8);
    let feed = tokio::spawn(async move {
        for i in 0..500u64 {
            let m = Echo {
                id: i,
                data: vec![1; (i % 50) as usize],
            };
            tx.send(Ok(m)).await.unwrap();
        }
    });
    let r = open(&mut ch, "Sum", 107, &[], None, src.boxed())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    feed.await.unwrap();
    end.unwrap();
    assert_eq!(msgs.len(), 1);
    let total: u64 = (0..500u64).map(|i| i % 50).sum();
    assert_eq!(msgs[0].id, 500);
    assert_eq!(msgs[0].data, total.to_be_bytes().to_vec());
    w.wait_for("inbound ended OK", |s| *s == Seen::InboundEnded(Ok(500)))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidi_ping_pong_reads_each_answer_before_sending_the_next() {
    let (mut ch, _stop) = channel().await;
    let mut w = Witness::new(108);
    let (tx, src) = ChanSource::new(108, 1);
    // The call future resolves with the headers, before any message is sent.
    let r = open(&mut ch, "Bidi", 108, &[], None, src.boxed())
        .await
        .unwrap();
    let mut inbound = r.messages;
    for i in 0..100u64 {
        let m = Echo {
            id: 108,
            data: i.to_be_bytes().to_vec(),
        };
        tx.send(Ok(m.clone())).await.unwrap();
        assert_eq!(next(&mut inbound).await.unwrap().unwrap(), m);
    }
    drop(tx);
    assert!(next(&mut inbound).await.is_none());
    w.wait_for("inbound ended OK", |s| *s == Seen::InboundEnded(Ok(100)))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_ends_the_call_mid_stream_on_both_sides() {
    let (mut ch, _stop) = channel().await;
    let mut w = Witness::new(109);
    let (tx, src) = ChanSource::new(109, 1);
    tx.send(Ok(Echo {
        id: 109,
        data: vec![],
    }))
    .await
    .unwrap();
    let r = open(
        &mut ch,
        "Hold",
        109,
        &[],
        Some(Duration::from_millis(300)),
        src.boxed(),
    )
    .await
    .unwrap();
    let mut inbound = r.messages;
    let e = next(&mut inbound).await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // The server's inbound ends so, its producer and the client's are dropped.
    w.wait_for_all(
        "inbound DEADLINE_EXCEEDED, both producers dropped",
        vec![
            Seen::InboundEnded(Err(Code::DeadlineExceeded)),
            Seen::ProducerDropped,
            Seen::ProducerDropped,
        ],
    )
    .await;
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_streams_run_at_once_on_one_channel() {
    let (ch, _stop) = channel().await;
    let mut tasks = Vec::new();
    for k in 0..16u64 {
        let mut ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            let tag = 200 + k;
            let (tx, src) = ChanSource::new(tag, 1);
            let r = open(&mut ch, "Bidi", 108, &[], None, src.boxed())
                .await
                .unwrap();
            let mut inbound = r.messages;
            for i in 0..50u64 {
                let m = Echo {
                    id: tag,
                    data: vec![i as u8; (i * 97 % 3000) as usize],
                };
                tx.send(Ok(m.clone())).await.unwrap();
                assert_eq!(next(&mut inbound).await.unwrap().unwrap(), m);
            }
            drop(tx);
            assert!(next(&mut inbound).await.is_none());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_of_messages_larger_than_a_slot_arrives_whole() {
    let (mut ch, _stop) = channel().await;
    // 20 messages of 64 KiB (a slot is 8 KiB): each goes as fragments, and more
    // than the window's worth of them (16): credits come back as they are read.
    let r = open(&mut ch, "Count", 110, &[20, 65536, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len(), 20);
    assert!(msgs.iter().all(|m| m.data.len() == 65536));
    // And the client's: 3 of 100 kB, echoed back.
    let src = CountSource::boxed(111, 3, 100_000, None);
    let r = open(&mut ch, "Bidi", 111, &[], None, src).await.unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len(), 3);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m.id, i as u64);
        assert_eq!(m.data, vec![(i % 251) as u8; 100_000]);
    }
}
