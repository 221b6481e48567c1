//! The firehose server: this program again (`--serve`), in a process of its own so
//! that its memory is the server's alone.

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
    let router = Server::builder().add_service(FirehoseServer::new(Pourer));
    examples::child::serve_until_stdin_closes(router).await
}
