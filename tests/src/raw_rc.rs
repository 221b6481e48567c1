//! A raw RC client over the message layer: it speaks rdma-rpc's handshake by hand,
//! then sends whatever frames a test builds (garbage, lying descriptors) and reads
//! what comes back, on the device the server uses (the default: soft, rxe0 in the
//! SoftRoCE VM). For tests of what a server does with a peer that is not rdma-rpc's
//! client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::fuzzing::handshake::device::imm_mode;
use rpc_core::fuzzing::handshake::{check_rc, Capabilities, ClientHello, RcAsk, RcGrant};
use rpc_transport::msg::{handshake, OneRead, RecvPool, RecvTarget, SendRing, SendSlot};
use rpc_transport::{
    AccessFlags, CompletionQueue, Device, ProtectionDomain, QpCap, QpInitAttr, QpType, QueuePair,
    WcOpcode, WcStatus, WorkCompletion,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The first packet sequence number of each side (any value both agree on).
const PSN: u32 = 5;
/// How long a raw client waits for an answer or for the server to close.
const PATIENCE: Duration = Duration::from_secs(20);
/// The `wr_id` of [`RawRcClient::read`]'s Read (send slots use small ids).
const READ_WR_ID: u64 = 900;

/// A connected raw client: its verbs objects, what the server granted, and the
/// handshake's TCP connection (the server closes it when it drops the client).
pub struct RawRcClient {
    /// The device, kept open for the objects below.
    pub dev: Device,
    /// Where a test registers the regions it lends.
    pub pd: ProtectionDomain,
    /// Both directions' completions.
    pub cq: CompletionQueue,
    /// Connected to the server's queue pair.
    pub qp: Arc<QueuePair>,
    /// Receives for the server's frames: 8 slots of the granted size.
    pub pool: RecvPool,
    /// Sends: `send_slots` slots of the granted size.
    pub ring: SendRing,
    /// The server's answer to the hello.
    pub grant: RcGrant,
    /// The handshake connection, held open as a client does.
    pub tcp: TcpStream,
}

impl RawRcClient {
    /// Connects to the rdma-rpc server at `addr`, asking for 8 credits of 8 KiB slots,
    /// with `send_slots` send slots and its queue pair opened to the server for
    /// `remote` (e.g. `REMOTE_READ` to lend bodies by reference).
    ///
    /// # Panics
    /// On any failure: the handshake is the precondition of every such test.
    pub async fn connect(addr: SocketAddr, send_slots: u32, remote: AccessFlags) -> RawRcClient {
        Self::connect_offering(addr, send_slots, remote, Capabilities::SUPPORTED).await
    }

    /// As [`RawRcClient::connect`], offering only `offer` at the handshake (an older
    /// client's set).
    pub async fn connect_offering(
        addr: SocketAddr,
        send_slots: u32,
        remote: AccessFlags,
        offer: Capabilities,
    ) -> RawRcClient {
        let dev = rpc_transport::msg::open_device(None).expect("the default RDMA device");
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = Arc::new(pd.create_qp(&init).unwrap());
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let mut hello = ClientHello::new(RcAsk {
            credits: 8,
            slot_size: 8192,
            max_message: 1 << 20,
        })
        .with_device(dev.caps());
        hello.capabilities = offer;
        handshake::send(&mut tcp, &qp.endpoint(PSN).unwrap(), &hello.encode())
            .await
            .unwrap();
        let reply = handshake::recv(&mut tcp).await.unwrap();
        let grant = check_rc(&hello, &reply.payload).unwrap();
        qp.connect_rc(&reply.endpoint, PSN, remote).unwrap();
        let slot = grant.slot_size as usize;
        // Framed as the server's device and this one agree (docs/fabrics.md).
        let mode = imm_mode(&dev.caps(), grant.device);
        let pool =
            RecvPool::with_mode(&pd, RecvTarget::Qp(qp.clone()), 8, slot, None, mode).unwrap();
        let ring = SendRing::with_mode(&pd, qp.clone(), send_slots, slot, mode).unwrap();
        RawRcClient {
            dev,
            pd,
            cq,
            qp,
            pool,
            ring,
            grant,
            tcp,
        }
    }

    /// A free send slot, once the completions of earlier sends have given one back.
    pub async fn free_slot(&mut self) -> SendSlot {
        loop {
            if let Some(s) = self.ring.acquire() {
                return s;
            }
            let mut wc = [WorkCompletion::default(); 8];
            let n = self.cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                self.ring.handle_completion(w);
            }
            tokio::task::yield_now().await;
        }
    }

    /// The next frame the server sent (its immediate and bytes), or the status of
    /// the first failed completion.
    ///
    /// # Panics
    /// If neither comes within 20 s.
    pub async fn next_frame(&mut self) -> Result<(u32, Vec<u8>), WcStatus> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut wc = [WorkCompletion::default(); 1];
            if self.cq.poll(&mut wc).unwrap() == 1 {
                let w = wc[0];
                if !w.is_ok() {
                    return Err(w.status);
                }
                if w.opcode == WcOpcode::Recv {
                    let s = self.pool.complete(&w).unwrap();
                    return Ok((s.imm().unwrap_or(0), s.bytes().to_vec()));
                }
                self.ring.handle_completion(&w);
            }
            assert!(
                Instant::now() < deadline,
                "nothing came back within {PATIENCE:?}"
            );
            tokio::task::yield_now().await;
        }
    }

    /// Reads `len` bytes of the server's memory at `addr` under `rkey` with one RDMA
    /// Read: its status and what landed (zeros where nothing did).
    ///
    /// # Panics
    /// If a frame arrives meanwhile (the tests read while the server waits), or the
    /// Read does not complete within 20 s.
    pub async fn read(&mut self, addr: u64, rkey: u32, len: u32) -> (WcStatus, Vec<u8>) {
        let read = OneRead::post(&self.qp, &self.pd, READ_WR_ID, addr, rkey, len).unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut wc = [WorkCompletion::default(); 1];
            if self.cq.poll(&mut wc).unwrap() == 1 {
                let w = wc[0];
                if read.owns(&w) {
                    return read.finish(&w);
                }
                assert_ne!(w.opcode, WcOpcode::Recv, "a frame came during the Read");
                self.ring.handle_completion(&w);
            }
            assert!(Instant::now() < deadline, "the Read did not complete");
            tokio::task::yield_now().await;
        }
    }

    /// Returns once the server has closed the handshake connection (end of stream or
    /// a reset).
    ///
    /// # Panics
    /// If it is still open after 20 s.
    pub async fn closed_by_server(&mut self) {
        let mut buf = [0u8; 64];
        let eof = async {
            loop {
                match self.tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(PATIENCE, eof)
            .await
            .expect("the server closed the connection");
    }
}
