//! The request of each call: the `--data` JSON with its `{{.Placeholder}}`s filled in
//! (ghz's syntax), encoded. A template without a per-call placeholder is encoded
//! once for the whole run.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use prost_reflect::{DynamicMessage, MethodDescriptor};

use super::encoded::Encoded;
use crate::fail::{local, Fail};

/// A piece of the template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    RequestNumber,
    WorkerId,
    TimestampUnix,
    TimestampUnixMilli,
    TimestampUnixNano,
}

/// The parsed `--data`.
#[derive(Debug)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// `data` cut at its `{{.Name}}`s; the method's names are filled in at once.
    pub(crate) fn parse(data: &str, method: &MethodDescriptor) -> Result<Template, Fail> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = data;
        while let Some(open) = rest.find("{{") {
            text.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| local(format!("--data: {{{{ without }}}} in {data:?}")))?;
            let name = after[..close].trim();
            let piece = match name {
                ".RequestNumber" => Piece::RequestNumber,
                ".WorkerID" => Piece::WorkerId,
                ".TimestampUnix" => Piece::TimestampUnix,
                ".TimestampUnixMilli" => Piece::TimestampUnixMilli,
                ".TimestampUnixNano" => Piece::TimestampUnixNano,
                ".MethodName" => Piece::Text(method.name().to_owned()),
                ".ServiceName" => Piece::Text(method.parent_service().full_name().to_owned()),
                other => {
                    return Err(local(format!(
                        "--data: unknown placeholder {{{{{other}}}}} (known: .RequestNumber, \
                         .WorkerID, .TimestampUnix, .TimestampUnixMilli, .TimestampUnixNano, \
                         .MethodName, .ServiceName)"
                    )))
                }
            };
            match piece {
                Piece::Text(t) => text.push_str(&t),
                piece => {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                    pieces.push(piece);
                }
            }
            rest = &after[close + 2..];
        }
        text.push_str(rest);
        pieces.push(Piece::Text(text));
        pieces.retain(|p| *p != Piece::Text(String::new()));
        Ok(Template { pieces })
    }

    /// Whether calls differ (some placeholder is per call).
    fn varies(&self) -> bool {
        self.pieces.iter().any(|p| !matches!(p, Piece::Text(_)))
    }

    fn render(&self, call: u64, worker: usize) -> String {
        let mut out = String::new();
        let now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
        };
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::RequestNumber => out.push_str(&call.to_string()),
                Piece::WorkerId => out.push_str(&worker.to_string()),
                Piece::TimestampUnix => out.push_str(&now().as_secs().to_string()),
                Piece::TimestampUnixMilli => out.push_str(&now().as_millis().to_string()),
                Piece::TimestampUnixNano => out.push_str(&now().as_nanos().to_string()),
            }
        }
        out
    }
}

/// The requests of each call, encoded.
#[derive(Debug)]
pub(crate) struct Requests {
    template: Template,
    method: MethodDescriptor,
    /// The messages of every call, when they do not vary.
    fixed: Option<Vec<Encoded>>,
}

impl Requests {
    /// Checks the template by encoding the first call's requests.
    pub(crate) fn new(template: Template, method: MethodDescriptor) -> Result<Requests, Fail> {
        let mut requests = Requests {
            template,
            method,
            fixed: None,
        };
        let first = requests.messages(0, 0)?;
        if !requests.template.varies() {
            requests.fixed = Some(first);
        }
        Ok(requests)
    }

    /// The one request of call `call` (of a method that takes one).
    pub(crate) fn one(&self, call: u64, worker: usize) -> Result<Encoded, Fail> {
        match &self.fixed {
            Some(fixed) => Ok(fixed[0].clone()),
            None => Ok(self.messages(call, worker)?.swap_remove(0)),
        }
    }

    /// The requests of call `call`: one, or for a client-streaming method each
    /// element of a JSON array.
    pub(crate) fn messages(&self, call: u64, worker: usize) -> Result<Vec<Encoded>, Fail> {
        if let Some(fixed) = &self.fixed {
            return Ok(fixed.clone());
        }
        let text = self.template.render(call, worker);
        let input = self.method.input();
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| local(format!("--data (call {call}) is not JSON: {e}: {text}")))?;
        let values = match value {
            serde_json::Value::Array(values) if self.method.is_client_streaming() => values,
            serde_json::Value::Array(_) => {
                return Err(local(format!(
                    "--data is an array, but {} takes one request",
                    self.method.full_name()
                )))
            }
            value => vec![value],
        };
        values
            .into_iter()
            .map(|value| {
                let message = DynamicMessage::deserialize(input.clone(), value).map_err(|e| {
                    local(format!(
                        "--data (call {call}) is not a valid {} in JSON: {e}",
                        input.full_name()
                    ))
                })?;
                Ok(Encoded(Bytes::from(message.encode_to_vec())))
            })
            .collect()
    }
}
