//! `rdma-rpc call`: one call of any shape, requests in and replies out as proto3 JSON.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use rpc_core::Status;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::args::CallArgs;
use crate::connect::Connection;
use crate::dynamic::{decode, next_reply, path_of, streaming, unary};
use crate::fail::{local, Fail};
use crate::schema::Schema;
use crate::{headers, json};

pub(crate) async fn run(args: CallArgs) -> Result<(), Fail> {
    let connection = Connection::new(&args.target)?;
    let metadata = headers::parse(&args.options.headers)?;
    let schema = Schema::load(&args.schema, &connection, None).await?;
    let method = schema.method(&args.method)?;
    let path = path_of(&method);
    let timeout = args.options.timeout;
    let (input, output) = (method.input(), method.output());
    let mut channel = connection.channel().await?;
    if !method.is_client_streaming() {
        let request = one_request(&method, args.json)?;
        if !method.is_server_streaming() {
            let reply = unary(&mut channel, path, metadata, timeout, request).await?;
            return print(&decode(&output, &reply.payload)?);
        }
        let requests = futures_util::stream::iter([Ok(request)]);
        let reply = streaming(&mut channel, path, metadata, timeout, requests).await?;
        return print_replies(reply.messages, &output, &InputError::default()).await;
    }
    let bad_input = InputError::default();
    let reply = match args.json {
        Some(text) => {
            let requests = json::parse_all(&input, &text)?.into_iter().map(Ok);
            let requests = futures_util::stream::iter(requests);
            streaming(&mut channel, path, metadata, timeout, requests).await?
        }
        None => {
            let requests = stdin_requests(input, bad_input.clone());
            // The call may fail as it opens, because its first request did not parse.
            let opened = streaming(&mut channel, path, metadata, timeout, requests).await;
            opened.map_err(|status| bad_input.take().unwrap_or(Fail::Status(status)))?
        }
    };
    print_replies(reply.messages, &output, &bad_input).await
}

/// The request of a method that takes one: the argument, or all of standard input.
fn one_request(
    method: &MethodDescriptor,
    argument: Option<String>,
) -> Result<DynamicMessage, Fail> {
    let text = match argument {
        Some(text) => text,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| local(format!("reading the request from standard input: {e}")))?;
            text
        }
    };
    json::parse(&method.input(), &text, "the request")
}

/// Prints each reply as it comes; the status that ends the stream is the result,
/// unless the input went wrong first (that is what the user must fix).
async fn print_replies(
    mut replies: rpc_core::stream::BoxInbound,
    output: &MessageDescriptor,
    bad_input: &InputError,
) -> Result<(), Fail> {
    loop {
        let next = next_reply(&mut replies).await;
        if let Some(fail) = bad_input.take() {
            return Err(fail);
        }
        match next {
            None => return Ok(()),
            Some(Ok(payload)) => print(&decode(output, &payload)?)?,
            Some(Err(status)) => return Err(status.into()),
        }
    }
}

fn print(message: &DynamicMessage) -> Result<(), Fail> {
    let line = json::print(message)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| local(format!("writing to standard output: {e}")))
}

/// Where a request read from standard input that did not parse is kept, so the
/// command reports it rather than the call's cancellation.
#[derive(Clone, Default)]
struct InputError(Arc<Mutex<Option<Fail>>>);

impl InputError {
    fn set(&self, fail: Fail) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(fail);
    }

    fn take(&self) -> Option<Fail> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Standard input, one JSON request per line, each sent as soon as it is read (so a
/// bidirectional call can answer one before the next is typed). A line that does
/// not parse ends the requests with an error (the call is cancelled) after saving
/// it in `bad_input`.
fn stdin_requests(
    input: MessageDescriptor,
    bad_input: InputError,
) -> impl futures_util::Stream<Item = Result<DynamicMessage, Status>> + Send + 'static {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut n = 0;
        loop {
            let line = match lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return,
                Err(e) => {
                    bad_input.set(local(format!("reading standard input: {e}")));
                    let _ = tx
                        .send(Err(Status::cancelled("standard input failed")))
                        .await;
                    return;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            n += 1;
            match json::parse(&input, &line, &format!("request {n}")) {
                Ok(message) => {
                    if tx.send(Ok(message)).await.is_err() {
                        return;
                    }
                }
                Err(fail) => {
                    bad_input.set(fail);
                    let _ = tx
                        .send(Err(Status::cancelled("a request did not parse")))
                        .await;
                    return;
                }
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}
