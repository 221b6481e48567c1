//! A raw RC server over the message layer: it answers rdma-rpc's handshake by hand,
//! then reads what the real client sends (requests whose bodies it lends by
//! reference) and answers as a test decides, on the default device. For tests of
//! what a client exposes to a server that is not rdma-rpc's: replaying an old
//! descriptor, reading another connection's.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::fuzzing::codec::{read_request, write_response, write_status, StatusCuts};
use rpc_core::fuzzing::handshake::device::imm_mode;
use rpc_core::fuzzing::handshake::{
    decide, Availability, Capabilities, ClientHello, Policy, RcPolicy,
};
use rpc_core::fuzzing::wire::{imm, parse_imm, Descriptor, Kind};
use rpc_core::{MetadataMap, Status};
use rpc_transport::msg::{
    handshake, ReadError, Reader, RecvPool, RecvTarget, RegionPool, SendRing,
};
use rpc_transport::{
    AccessFlags, CompletionQueue, Device, ProtectionDomain, QpCap, QpInitAttr, QpType, QueuePair,
    WcOpcode, WcStatus, WorkCompletion,
};
use tokio::net::{TcpListener, TcpStream};

/// This side's first packet sequence number.
const PSN: u32 = 7;
/// Frames a client may have unanswered (the grant's credits) and the frame size.
const CREDITS: u32 = 8;
const SLOT: u32 = 8192;
/// How long the raw server waits for a frame or a Read.
const PATIENCE: Duration = Duration::from_secs(20);

/// Listens on 127.0.0.1 for rdma-rpc clients.
pub struct RawRcServer {
    listener: TcpListener,
}

/// One accepted client connection: its verbs objects and what came on it.
pub struct RawRcPeer {
    /// The device, kept open for the objects below.
    pub dev: Device,
    /// This connection's protection domain.
    pub pd: ProtectionDomain,
    /// Both directions' completions.
    pub cq: CompletionQueue,
    /// Connected to the client's queue pair.
    pub qp: Arc<QueuePair>,
    pool: RecvPool,
    ring: SendRing,
    /// Reads the client's lent bodies (its descriptors, or any a test makes up).
    reader: Reader,
    /// Frames that came while a Read was awaited.
    frames: VecDeque<(u32, Vec<u8>)>,
    /// The handshake connection, held open as a server does.
    _tcp: TcpStream,
}

impl RawRcServer {
    /// Binds 127.0.0.1 on a free port.
    pub async fn bind() -> RawRcServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        RawRcServer { listener }
    }

    /// Where clients dial it.
    pub fn addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap()
    }

    /// Accepts the next client, granting RDMA Read (bodies by reference) only.
    ///
    /// # Panics
    /// If no client comes within 20 s, or its handshake fails.
    pub async fn accept(&self) -> RawRcPeer {
        let (mut tcp, _) = tokio::time::timeout(PATIENCE, self.listener.accept())
            .await
            .expect("a client within 20 s")
            .unwrap();
        let hello = handshake::recv(&mut tcp).await.unwrap();
        let dev = rpc_transport::msg::open_device(None).expect("the default RDMA device");
        let policy = Policy {
            rc: Some(RcPolicy {
                credits: CREDITS,
                slot_size: SLOT,
            }),
            ud: None,
            max_message: 64 << 20,
            capabilities: Capabilities::RDMA_READ,
            device: Some(dev.caps()),
        };
        let now = Availability {
            receive_credits_free: 1024,
            ud_sessions_open: 0,
        };
        let (_, grant) = decide(&hello.payload, &policy, &now).into_rc().unwrap();
        let client = ClientHello::decode(&hello.payload).unwrap().device;
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: CREDITS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = Arc::new(pd.create_qp(&init).unwrap());
        qp.accept_rc(&hello.endpoint, PSN, AccessFlags::empty())
            .unwrap();
        let mode = imm_mode(&dev.caps(), client);
        let slot = grant.slot_size as usize;
        let target = RecvTarget::Qp(qp.clone());
        let pool = RecvPool::with_mode(&pd, target, grant.credits, slot, None, mode).unwrap();
        let ring = SendRing::with_mode(&pd, qp.clone(), 8, slot, mode).unwrap();
        let into = RegionPool::with_access(&pd, 16 << 20, AccessFlags::LOCAL_WRITE);
        let reader = Reader::new(qp.clone(), into, 1 << 20, 4);
        let endpoint = qp.endpoint(PSN).unwrap();
        handshake::send(&mut tcp, &endpoint, &grant.encode())
            .await
            .unwrap();
        RawRcPeer {
            dev,
            pd,
            cq,
            qp,
            pool,
            ring,
            reader,
            frames: VecDeque::new(),
            _tcp: tcp,
        }
    }
}

impl RawRcPeer {
    /// Handles one completion: a frame is kept, a Read's goes to the reader, a
    /// send's gives its slot back.
    fn complete(&mut self, w: &WorkCompletion) {
        if Reader::owns(w) {
            self.reader.handle_completion(w);
        } else if w.opcode == WcOpcode::Recv || w.opcode == WcOpcode::RecvRdmaWithImm {
            // A flushed receive (the QP broke: a test's bad Read) brings nothing.
            if let Ok(s) = self.pool.complete(w) {
                self.frames
                    .push_back((s.imm().unwrap_or(0), s.bytes().to_vec()));
            }
        } else {
            self.ring.handle_completion(w);
        }
    }

    async fn poll_once(&mut self) {
        let mut wc = [WorkCompletion::default(); 4];
        let n = self.cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            self.complete(w);
        }
        tokio::task::yield_now().await;
    }

    /// The next frame the client sent: its kind, call id and bytes.
    ///
    /// # Panics
    /// If none comes within 20 s.
    pub async fn next_frame(&mut self) -> (Kind, u32, Vec<u8>) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some((imm, f)) = self.frames.pop_front() {
                let (kind, id) = parse_imm(imm).expect("a valid immediate");
                return (kind, id, f);
            }
            assert!(Instant::now() < deadline, "no frame within {PATIENCE:?}");
            self.poll_once().await;
        }
    }

    /// The next request: its call id and the descriptor of the body it lends.
    ///
    /// # Panics
    /// If the next frame is not a `REQ` whose body is lent by reference.
    pub async fn next_lent_request(&mut self) -> (u32, Descriptor) {
        let (kind, id, f) = self.next_frame().await;
        assert_eq!(kind, Kind::Req, "a request");
        let head = read_request(&f).unwrap();
        (id, head.by_ref.expect("a body lent by reference"))
    }

    /// Reads `d` from the client with RDMA Read: the bytes, or the status of the
    /// Read that failed (`REM_ACCESS_ERR`: the client lends no such memory to
    /// this connection).
    ///
    /// # Panics
    /// If the Read does not complete within 20 s.
    pub async fn read(&mut self, d: Descriptor) -> Result<Vec<u8>, WcStatus> {
        self.reader.start(1, d.addr, d.rkey, d.len, &[]);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            self.reader.pump(&mut cx).unwrap();
            if let Some((_, r)) = self.reader.poll_done() {
                return match r {
                    Ok(b) => Ok(b.to_vec()),
                    Err(ReadError::Failed(s)) => Err(s),
                    Err(e) => panic!("read not done: {e}"),
                };
            }
            assert!(Instant::now() < deadline, "the Read did not complete");
            self.poll_once().await;
        }
    }

    async fn post(&mut self, len: impl FnOnce(&mut [u8]) -> usize, imm: u32) {
        let deadline = Instant::now() + PATIENCE;
        let slot = loop {
            if let Some(s) = self.ring.acquire() {
                break s;
            }
            assert!(Instant::now() < deadline, "no send slot came back");
            self.poll_once().await;
        };
        let n = len(self.ring.buf(&slot));
        self.ring.post(slot, n, imm).unwrap();
    }

    /// Answers call `id` with an OK response carrying `body` (an encoded message
    /// that fits one frame).
    pub async fn respond(&mut self, id: u32, body: &[u8]) {
        let fill = |out: &mut [u8]| {
            let n = write_response(&MetadataMap::new(), body.len(), out).unwrap();
            out[n..n + body.len()].copy_from_slice(body);
            n + body.len()
        };
        self.post(fill, imm(Kind::Resp, id)).await;
    }

    /// Answers call `id` with `status`.
    pub async fn respond_status(&mut self, id: u32, status: &Status) {
        let fill = |out: &mut [u8]| write_status(status, None, out, &mut StatusCuts::default()).len;
        self.post(fill, imm(Kind::Resp, id)).await;
    }

    /// Returns call `id`'s credit with nothing else (the answer to a `CANCEL`).
    pub async fn credit_return(&mut self, id: u32) {
        self.post(|_| 0, imm(Kind::Cr, id)).await;
    }
}
