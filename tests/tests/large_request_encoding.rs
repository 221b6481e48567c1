//! A large request is encoded on tokio's blocking pool, not on the caller's worker
//! (where the copy would hold every task queued behind it, such as the driver
//! delivering other calls' replies), on any runtime: here the current-thread one,
//! where `block_in_place` would panic. A small request is encoded in line.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};
use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use tests::Echo;

/// An [`Echo`] that notes the thread its bytes were written on.
#[derive(Debug, Default)]
struct Traced {
    echo: Echo,
    written_on: Arc<Mutex<Vec<ThreadId>>>,
}

impl Message for Traced {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        // Written into memory (a send slot, a registered region: bounded). Not the
        // look for `Bytes` to lend in place, whose writer is unbounded and copies
        // nothing of a payload this large (it gives up at once).
        if buf.remaining_mut() < usize::MAX / 4 {
            self.written_on
                .lock()
                .unwrap()
                .push(std::thread::current().id());
        }
        self.echo.encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        self.echo.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.echo.encoded_len()
    }

    fn clear(&mut self) {
        self.echo.clear();
    }
}

/// Sends `len` bytes through the echo; the threads the request was written on.
async fn echo_traced(ch: &Channel, len: usize) -> Vec<ThreadId> {
    let data = tests::seeded(7, len);
    let written_on = Arc::new(Mutex::new(Vec::new()));
    let req = Request::new(Traced {
        echo: Echo {
            id: len as u64,
            data: data.clone(),
        },
        written_on: written_on.clone(),
    });
    let reply = Grpc::new(ch.clone())
        .unary::<Traced, Echo>(req, tests::path("Echo"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (reply.id, reply.data == data),
        (len as u64, true),
        "{len} B"
    );
    let threads = written_on.lock().unwrap().clone();
    threads
}

#[tokio::test]
async fn a_large_request_is_encoded_off_the_callers_thread() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = tests::serve_echo(Server::builder(), async {
        let _ = rx.await;
    })
    .await;
    let ch = Channel::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let caller = std::thread::current().id();
    // 8 MiB: by reference, encoded into a registered region on the blocking pool.
    let large = echo_traced(&ch, 8 << 20).await;
    assert_eq!(
        large.len(),
        1,
        "the 8 MiB request was encoded {} times",
        large.len()
    );
    assert_ne!(
        large[0], caller,
        "the 8 MiB request was encoded on the caller's thread"
    );
    // 1 KiB: in line, into its send slot.
    let small = echo_traced(&ch, 1024).await;
    assert_eq!(
        small,
        vec![caller],
        "the 1 KiB request was handed off or not encoded once"
    );
    drop(tx);
    server.await.unwrap();
}
