//! Encoding a stream's next large message before its call has credit for it.
//!
//! A writer whose message went by reference may poll its producer for the next
//! and encode it while the reader still reads the last one: on one host, encoding
//! 1 MiB takes about a third of a message's time, and in series with the Read it
//! held a lone 1 MiB stream to one message at a time (1.2x tonic's rate; 1.5x
//! with the next one encoded ahead). With other streams on the connection their
//! messages already fill that time, and encoding ahead cost 16 streams of 1 MiB
//! 10-25 % of their rate, even when only one of them at a time did it (measured,
//! cause not found). So only a connection's lone stream encodes ahead.

/// Whether a writer may encode its next message ahead of its call's credit, on a
/// connection with `streams` streaming calls (its own included).
pub(crate) fn encode_ahead(streams: usize) -> bool {
    streams == 1
}
