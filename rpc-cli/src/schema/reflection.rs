//! Descriptors from the server's `grpc.reflection.v1.ServerReflection` service (or
//! v1alpha's, for a server that has only that), over one bidirectional call: list
//! the services, then ask for the file of each (the server sends its imports along;
//! any it did not are asked for by name).

use std::collections::HashSet;

use prost::Message;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use rpc_core::client::Grpc;
use rpc_core::transport::Channel;
use rpc_core::Streaming;
use rpc_core::{Code, Request, Status};
use rpc_reflection::pb::v1::server_reflection_request::MessageRequest;
use rpc_reflection::pb::v1::server_reflection_response::MessageResponse;
use rpc_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use tokio::sync::mpsc;

use super::Schema;
use crate::fail::{local, Fail};

pub(super) async fn fetch(
    channel: Channel,
    addr: &str,
    symbol: Option<&str>,
) -> Result<Schema, Fail> {
    let no_reflection = |status: Status| {
        if status.code() == Code::Unimplemented {
            local(format!(
                "{addr} serves no reflection (grpc.reflection.v1 or v1alpha): \
                 pass --proto or --protoset"
            ))
        } else {
            local(format!(
                "reflection at {addr} failed: {}: {}",
                crate::fail::code_name(status.code()),
                status.message()
            ))
        }
    };
    let (mut session, services) = Session::start(channel).await.map_err(no_reflection)?;
    let mut files = Files::default();
    for service in &services {
        files
            .add_symbol(&mut session, service)
            .await
            .map_err(no_reflection)?
            .map_err(|e| local(format!("reflection at {addr}: service {service}: {e}")))?;
    }
    if let Some(symbol) = symbol {
        // Unknown to the server is not an error here: the caller names what it lacks.
        let symbol = symbol.replace('/', ".");
        let _ = files
            .add_symbol(&mut session, &symbol)
            .await
            .map_err(no_reflection)?;
    }
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(files.protos)
        .map_err(|e| local(format!("reflection at {addr} sent bad descriptors: {e}")))?;
    let mut services = services;
    services.sort();
    Ok(Schema { pool, services })
}

const V1: &str = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const V1ALPHA: &str = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

/// One `ServerReflectionInfo` call: a request, then its answer.
struct Session {
    requests: mpsc::Sender<ServerReflectionRequest>,
    responses: Streaming<ServerReflectionResponse>,
}

impl Session {
    /// A call of `path`: v1's, or v1alpha's with v1's messages (the two versions'
    /// messages are the same field for field).
    async fn open(channel: Channel, path: &'static str) -> Result<Session, Status> {
        let (requests, outbox) = mpsc::channel(1);
        let outbound = futures_util::stream::unfold(outbox, |mut rx| async move {
            rx.recv().await.map(|request| (request, rx))
        });
        let responses = Grpc::new(channel)
            .streaming(Request::new(outbound), path)
            .await?
            .into_inner();
        Ok(Session {
            requests,
            responses,
        })
    }

    /// A session with the server's reflection service, v1 or else v1alpha, and
    /// the services it lists.
    async fn start(channel: Channel) -> Result<(Session, Vec<String>), Status> {
        let mut last = Status::unimplemented("no reflection");
        for path in [V1, V1ALPHA] {
            let listed = match Session::open(channel.clone(), path).await {
                Ok(mut session) => session
                    .ask(MessageRequest::ListServices(String::new()))
                    .await
                    .map(|answer| (session, answer)),
                Err(status) => Err(status),
            };
            match listed {
                Ok((session, MessageResponse::ListServicesResponse(list))) => {
                    let names = list.service.into_iter().map(|s| s.name).collect();
                    return Ok((session, names));
                }
                Ok((_, other)) => {
                    return Err(Status::internal(format!(
                        "reflection answered a service list with {other:?}"
                    )))
                }
                Err(status) if status.code() == Code::Unimplemented => last = status,
                Err(status) => return Err(status),
            }
        }
        Err(last)
    }

    async fn ask(&mut self, request: MessageRequest) -> Result<MessageResponse, Status> {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        if self.requests.send(request).await.is_err() {
            // The call ended: its status says why.
            self.responses.message().await?;
            return Err(Status::unavailable("the reflection call ended"));
        }
        let response = self
            .responses
            .message()
            .await?
            .ok_or_else(|| Status::unavailable("the reflection call ended"))?;
        response
            .message_response
            .ok_or_else(|| Status::internal("a reflection answer with nothing in it"))
    }
}

/// The files fetched so far, each once.
#[derive(Default)]
struct Files {
    names: HashSet<String>,
    protos: Vec<FileDescriptorProto>,
}

impl Files {
    /// Fetches the file defining `symbol` and whatever it imports that is not here
    /// yet. The outer error ends the session; the inner is the server's answer that
    /// it does not know the symbol or a file.
    async fn add_symbol(
        &mut self,
        session: &mut Session,
        symbol: &str,
    ) -> Result<Result<(), String>, Status> {
        let mut asks = vec![MessageRequest::FileContainingSymbol(symbol.to_owned())];
        while let Some(ask) = asks.pop() {
            let answer = session.ask(ask).await?;
            let encoded = match answer {
                MessageResponse::FileDescriptorResponse(files) => files.file_descriptor_proto,
                MessageResponse::ErrorResponse(e) => {
                    return Ok(Err(e.error_message));
                }
                other => return Ok(Err(format!("unexpected answer {other:?}"))),
            };
            for bytes in encoded {
                let file = FileDescriptorProto::decode(bytes.as_slice())
                    .map_err(|e| Status::internal(format!("a file that does not decode: {e}")))?;
                if !self.names.insert(file.name().to_owned()) {
                    continue;
                }
                asks.extend(
                    file.dependency
                        .iter()
                        .map(|d| MessageRequest::FileByFilename(d.clone())),
                );
                self.protos.push(file);
            }
            asks.retain(|ask| match ask {
                MessageRequest::FileByFilename(name) => !self.names.contains(name),
                _ => true,
            });
        }
        Ok(Ok(()))
    }
}
