//! A request message already encoded: sent as its bytes, so a run whose request does
//! not vary encodes it once, and each call only shares the buffer.

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

/// The bytes of one encoded message, as a `prost::Message` the transport encodes
/// (copies) straight into its send slot. Only sent, never received.
#[derive(Clone, Debug, Default)]
pub(crate) struct Encoded(pub(crate) Bytes);

impl Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}
