//! The firehose server: this program again (`--serve`), in a process of its own so
//! that its memory is the server's alone.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use rpc_core::transport::Server;
use rpc_core::{Request, Response, Status};

use crate::slowconsumer::firehose_server::{Firehose, FirehoseServer};
use crate::slowconsumer::{Block, PourRequest};

/// Pours blocks, each made when the transport asks for it (a producer that runs
/// ahead of its reader would show here as growth of the server's memory).
struct Pourer;

/// The blocks of one `Pour`, made as the transport asks for them.
type Blocks = futures_util::stream::Iter<std::iter::Map<std::ops::Range<u64>, BlockOf>>;
type BlockOf = Box<dyn FnMut(u64) -> Result<Block, Status> + Send>;

#[rpc_core::async_trait]
impl Firehose for Pourer {
    type PourStream = Blocks;

    async fn pour(
        &self,
        request: Request<PourRequest>,
    ) -> Result<Response<Self::PourStream>, Status> {
        let PourRequest { bytes, message } = request.into_inner();
        if message == 0 {
            return Err(Status::invalid_argument("message size 0"));
        }
        let message = u64::from(message);
        let count = bytes.div_ceil(message);
        let block: BlockOf = Box::new(move |i| {
            let len = (bytes - i * message).min(message) as usize;
            Ok(Block {
                data: vec![0x5a; len],
            })
        });
        Ok(Response::new(futures_util::stream::iter(
            (0..count).map(block),
        )))
    }
}

/// In the child: serve the firehose on 127.0.0.1 until stdin closes, printing the
/// port first.
pub(crate) async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("PORT {}", listener.local_addr()?.port());
    // Stdin is read on a blocking thread: its end is the parent saying stop.
    let eof = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()));
    let stop = async {
        let _ = eof.await;
    };
    Server::builder()
        .add_service(FirehoseServer::new(Pourer))
        .serve_with_listener(listener, stop)
        .await?;
    Ok(())
}

/// The server child; stopped (stdin closed, then waited for) when dropped.
pub(crate) struct Child {
    child: std::process::Child,
    pub(crate) port: u16,
    pub(crate) pid: u32,
}

impl Child {
    pub(crate) fn spawn() -> std::io::Result<Child> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("server child said {line:?}")))?;
        let pid = child.id();
        Ok(Child { child, port, pid })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
