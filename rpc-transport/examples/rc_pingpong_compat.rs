//! `ibv_rc_pingpong`, spoken by rdma-rpc's transport: interoperates with rdma-core's
//! own `ibv_rc_pingpong` in either role, which shows that our RC QP setup (attribute
//! masks, PSNs, path MTU, GID routing) is right on the wire.
//!
//! ```text
//! rc_pingpong_compat [options]            # server: waits on TCP port 18515
//! rc_pingpong_compat [options] HOST       # client
//!   -p PORT  -d DEVICE  -i IB_PORT(1)  -s SIZE(4096)  -m MTU(1024)  -r RX_DEPTH(500)
//!   -n ITERS(1000)  -l SL(0)  -g GID_INDEX(device's preferred)  -e (sleep on CQ events)
//! ```
//!
//! The out-of-band exchange is ibv_rc_pingpong's (rdma-core `libibverbs/examples/
//! rc_pingpong.c`, `pingpong.c`): over one TCP connection the client sends its
//! destination as the NUL-terminated text `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, then
//! the GID as 32 hex digits: each 32-bit word printed `%08x` after `htobe32`, which is
//! the GID's bytes in order), in a 52-byte message. The server reads it, moves its QP
//! to RTR and RTS, answers with its own destination, and waits for the client's
//! `"done"` (5 bytes, with the NUL); the client connects its QP after sending `"done"`.
//! Both sides post RX_DEPTH receives before the exchange; the client sends first, and
//! each side sends again only once its previous send completed and a message arrived,
//! until both have sent and received ITERS messages.
//!
//! Needs the `rdma` feature to reach a real device (e.g. rxe0 in the SoftRoCE VM).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Instant;

use rpc_transport::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, QpAttr, QpCap, QpEndpoint,
    QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcOpcode,
    WorkCompletion,
};

/// `sizeof "0000:000000:000000:00000000000000000000000000000000"` in C: 51 + NUL.
const MSG_LEN: usize = 52;
/// ibv_rc_pingpong's wr_ids (`PINGPONG_RECV_WRID`, `PINGPONG_SEND_WRID`).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "usage: rc_pingpong_compat [-p PORT] [-d DEVICE] [-i IB_PORT] [-s SIZE] \
[-m MTU] [-r RX_DEPTH] [-n ITERS] [-l SL] [-g GID_INDEX] [-e] [HOST]";

struct Opts {
    port: u16,
    device: Option<String>,
    ib_port: u8,
    size: usize,
    mtu: Mtu,
    rx_depth: u32,
    iters: u64,
    sl: u8,
    gid_index: Option<u8>,
    events: bool,
    server: Option<String>,
}

fn parse_args() -> Result<Opts, BoxError> {
    let mut o = Opts {
        port: 18515,
        device: None,
        ib_port: 1,
        size: 4096,
        mtu: Mtu::Mtu1024,
        rx_depth: 500,
        iters: 1000,
        sl: 0,
        gid_index: None,
        events: false,
        server: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "-p" | "--port" => o.port = val()?.parse()?,
            "-d" | "--ib-dev" => o.device = Some(val()?),
            "-i" | "--ib-port" => o.ib_port = val()?.parse()?,
            "-s" | "--size" => o.size = val()?.parse()?,
            "-m" | "--mtu" => {
                let bytes: u32 = val()?.parse()?;
                o.mtu = Mtu::from_bytes(bytes)
                    .filter(|m| m.bytes() == bytes)
                    .ok_or("MTU must be 256, 512, 1024, 2048 or 4096")?;
            }
            "-r" | "--rx-depth" => o.rx_depth = val()?.parse()?,
            "-n" | "--iters" => o.iters = val()?.parse()?,
            "-l" | "--sl" => o.sl = val()?.parse()?,
            "-g" | "--gid-idx" => o.gid_index = Some(val()?.parse()?),
            "-e" | "--events" => o.events = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}").into()),
            s => o.server = Some(s.to_string()),
        }
    }
    if o.rx_depth < 2 || o.size == 0 {
        return Err("rx depth must be at least 2 and size positive".into());
    }
    Ok(o)
}

/// Our destination as ibv_rc_pingpong writes it: `QpEndpoint`'s text form is exactly
/// `"%04x:%06x:%06x:"` plus the GID's 16 bytes in hex, then a NUL pads to 52 bytes.
fn encode(ep: &QpEndpoint) -> Result<[u8; MSG_LEN], BoxError> {
    let text = ep.to_string();
    if text.len() != MSG_LEN - 1 {
        return Err(format!("destination {text:?} does not fit the wire format").into());
    }
    let mut msg = [0u8; MSG_LEN];
    msg[..MSG_LEN - 1].copy_from_slice(text.as_bytes());
    Ok(msg)
}

fn decode(msg: &[u8; MSG_LEN]) -> Result<QpEndpoint, BoxError> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(MSG_LEN);
    Ok(std::str::from_utf8(&msg[..end])?.parse()?)
}

struct Ctx {
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    size: usize,
    send_flags: SendFlags,
}

impl Ctx {
    /// Receives land in the first `size` bytes of the region, sends leave from the
    /// next `size`: rdma-core's tool shares one buffer, which is fine for a C program
    /// that never reads it; two halves let us check what arrived.
    fn post_recv(&self, n: u32) -> Result<(), BoxError> {
        let sge = [self.mr.sge(0, self.size as u32)];
        let wrs = vec![
            RecvWr {
                wr_id: RECV_WRID,
                sg_list: &sge
            };
            n as usize
        ];
        // SAFETY: the receive half of `mr` is only touched by the NIC until the QP is
        // destroyed (see `run`, which reads it after dropping the QP); `mr` outlives
        // the QP because both live in `self` and the QP is dropped first.
        unsafe { self.qp.post_recv(&wrs) }?;
        Ok(())
    }

    fn post_send(&self) -> Result<(), BoxError> {
        let sge = [self.mr.sge(self.size, self.size as u32)];
        let wr = SendWr::new(SEND_WRID, SendOp::Send, &sge).flags(self.send_flags);
        // SAFETY: the send half of `mr` is written once before the first post and never
        // again, and `mr` outlives the QP (see `post_recv`).
        unsafe { self.qp.post_send(&[wr]) }?;
        Ok(())
    }
}

fn exchange_as_client(host: &str, port: u16, mine: &QpEndpoint) -> Result<QpEndpoint, BoxError> {
    let mut s = TcpStream::connect((host, port))?;
    s.write_all(&encode(mine)?)?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)?;
    s.write_all(b"done\0")?;
    decode(&msg)
}

/// The server connects its QP before answering, as rdma-core's does: the client may
/// send as soon as it has the answer.
fn exchange_as_server(
    port: u16,
    mine: &QpEndpoint,
    connect: impl FnOnce(&QpEndpoint) -> Result<(), BoxError>,
) -> Result<QpEndpoint, BoxError> {
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    let (mut s, _) = listener.accept()?;
    drop(listener);
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)?;
    let remote = decode(&msg)?;
    connect(&remote)?;
    s.write_all(&encode(mine)?)?;
    let mut done = [0u8; 5];
    s.read_exact(&mut done)?;
    Ok(remote)
}

fn print_dest(which: &str, ep: &QpEndpoint) {
    println!(
        "  {which} address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        ep.lid, ep.qpn, ep.psn, ep.gid
    );
}

fn open_device(name: Option<&str>) -> Result<Device, BoxError> {
    if let Some(name) = name {
        return Ok(Device::open(name)?);
    }
    let first = Device::list()?
        .into_iter()
        .find(|d| d.provider == rpc_transport::ProviderKind::Verbs)
        .ok_or("no RDMA device found (build with --features rdma; use -d soft0 for soft)")?;
    Ok(Device::open(&first.name)?)
}

fn run(o: &Opts) -> Result<(), BoxError> {
    let dev = open_device(o.device.as_deref())?;
    let pd = dev.alloc_pd()?;
    let mr = pd.alloc_mr(2 * o.size, AccessFlags::LOCAL_WRITE)?;
    mr.write(o.size, &vec![0x7b; o.size]); // what ibv_rc_pingpong sends
    let cq = dev.create_cq(o.rx_depth + 1)?;
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&init)?;
    // Inline when the payload fits, as ibv_rc_pingpong does.
    let send_flags = if o.size <= qp.cap().max_inline_data as usize {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    let ctx = Ctx {
        cq,
        qp,
        mr,
        size: o.size,
        send_flags,
    };
    ctx.qp
        .modify(QpState::Init, &QpAttr::rc_init(AccessFlags::empty()))?;
    ctx.post_recv(o.rx_depth)?;
    let mut routs = o.rx_depth;

    let gid_index = o.gid_index.unwrap_or_else(|| dev.preferred_gid_index());
    let port = dev.port_attr(o.ib_port)?;
    let psn = std::process::id().wrapping_mul(2_654_435_761) & 0xff_ffff;
    let mine = QpEndpoint {
        lid: port.lid,
        qpn: ctx.qp.qp_num(),
        psn,
        gid: dev.gid(o.ib_port, gid_index)?,
    };
    print_dest("local", &mine);

    let connect = |remote: &QpEndpoint| -> Result<(), BoxError> {
        // As in ibv_rc_pingpong: a GRH only when the peer sent a GID (RoCE needs one).
        let mut ah = AhAttr::from_endpoint(remote, gid_index);
        ah.sl = o.sl;
        ah.port_num = o.ib_port;
        ctx.qp.modify(
            QpState::Rtr,
            &QpAttr::rc_rtr(ah, remote.qpn, remote.psn, o.mtu),
        )?;
        ctx.qp.modify(QpState::Rts, &QpAttr::rc_rts(psn))?;
        Ok(())
    };
    let remote = match &o.server {
        Some(host) => {
            let r = exchange_as_client(host, o.port, &mine)?;
            connect(&r)?;
            r
        }
        None => exchange_as_server(o.port, &mine, connect)?,
    };
    print_dest("remote", &remote);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let mut pending = RECV_WRID;
    if o.server.is_some() {
        ctx.post_send()?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 2];
    while rcnt < o.iters || scnt < o.iters {
        let n = if o.events {
            rt.block_on(ctx.cq.poll_async(&mut wc))?
        } else {
            ctx.cq.poll(&mut wc)?
        };
        for c in &wc[..n] {
            if !c.is_ok() {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    c.status, c.status as u32, c.wr_id
                )
                .into());
            }
            match c.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if c.opcode != WcOpcode::Recv || c.byte_len as usize != o.size {
                        return Err(format!("unexpected receive {c:?}").into());
                    }
                    routs -= 1;
                    if routs <= 1 {
                        ctx.post_recv(o.rx_depth - routs)?;
                        routs = o.rx_depth;
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending &= !c.wr_id;
            if scnt < o.iters && pending == 0 {
                ctx.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    );

    // The peer's payload, checked once no receive is posted any more.
    let Ctx { qp, mr, cq, .. } = ctx;
    drop(qp);
    drop(cq);
    if mr.to_vec(0, o.size).iter().any(|&b| b != 0x7b) {
        return Err("received payload differs from ibv_rc_pingpong's 0x7b fill".into());
    }
    println!("payload check: {} bytes of 0x7b received", o.size);
    Ok(())
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rc_pingpong_compat: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong_compat: {e}");
            ExitCode::FAILURE
        }
    }
}
