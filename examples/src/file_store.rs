//! The file transfer service: files uploaded in chunks, kept in memory, downloaded
//! in chunks of [`CHUNK_SIZE`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rpc_core::{Request, Response, Status, Streaming};

use crate::checksum::Fnv1a;
use crate::filetransfer::file_transfer_server::FileTransfer;
use crate::filetransfer::{Chunk, FileName, Stored};

/// Bytes per chunk of a download (an upload's chunks are the client's choice).
pub const CHUNK_SIZE: usize = 1024 * 1024;

/// Largest file the store takes: an upload past it fails `RESOURCE_EXHAUSTED`
/// rather than growing the server without bound.
pub const MAX_FILE: u64 = 1 << 30;

/// Files by name.
#[derive(Debug, Default, Clone)]
pub struct FileStore {
    files: Arc<Mutex<HashMap<String, Bytes>>>,
}

#[rpc_core::async_trait]
impl FileTransfer for FileStore {
    async fn upload(&self, request: Request<Streaming<Chunk>>) -> Result<Response<Stored>, Status> {
        let mut chunks = request.into_inner();
        let first = chunks
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an upload needs at least one chunk"))?;
        if first.name.is_empty() {
            return Err(Status::invalid_argument(
                "the first chunk must name the file",
            ));
        }
        let name = first.name.clone();
        let mut checksum = Fnv1a::default();
        let mut data = Vec::new();
        let mut next = Some(first);
        while let Some(chunk) = next {
            if (data.len() + chunk.data.len()) as u64 > MAX_FILE {
                return Err(Status::resource_exhausted(format!(
                    "{name}: over the store's limit of {MAX_FILE} bytes"
                )));
            }
            checksum.update(&chunk.data);
            data.extend_from_slice(&chunk.data);
            next = chunks.message().await?;
        }
        let stored = Stored {
            name: name.clone(),
            size: data.len() as u64,
            checksum: checksum.value(),
        };
        self.files
            .lock()
            .expect("not poisoned")
            .insert(name, Bytes::from(data));
        Ok(Response::new(stored))
    }

    type DownloadStream = futures_util::stream::Iter<std::vec::IntoIter<Result<Chunk, Status>>>;

    async fn download(
        &self,
        request: Request<FileName>,
    ) -> Result<Response<Self::DownloadStream>, Status> {
        let name = request.into_inner().name;
        let file = self
            .files
            .lock()
            .expect("not poisoned")
            .get(&name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no file {name:?}")))?;
        // Each chunk shares the stored buffer: no copy until the transport encodes it.
        let chunks: Vec<_> = (0..file.len())
            .step_by(CHUNK_SIZE)
            .map(|start| {
                Ok(Chunk {
                    name: String::new(),
                    data: file.slice(start..(start + CHUNK_SIZE).min(file.len())),
                })
            })
            .collect();
        Ok(Response::new(futures_util::stream::iter(chunks)))
    }
}
