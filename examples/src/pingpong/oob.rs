//! The out-of-band channel: text lines over TCP, as ibv_rc_pingpong exchanges its
//! `LID:QPN:PSN:GID` destinations.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use rpc_transport::QpEndpoint;

use crate::Result;

/// What the client asks the server to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) size: u32,
    pub(crate) iters: u32,
    pub(crate) warmup: u32,
    pub(crate) window: u32,
    pub(crate) inline: bool,
}

impl Params {
    fn to_line(self) -> String {
        format!(
            "PARAMS {} {} {} {} {}",
            self.size,
            self.iters,
            self.warmup,
            self.window,
            u8::from(self.inline)
        )
    }

    fn from_line(line: &str) -> Result<Params> {
        let bad = || format!("bad parameters line {line:?}");
        let f: Vec<u32> = line
            .strip_prefix("PARAMS ")
            .ok_or_else(bad)?
            .split(' ')
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad())?;
        let [size, iters, warmup, window, inline] = f[..] else {
            return Err(bad().into());
        };
        Ok(Params {
            size,
            iters,
            warmup,
            window,
            inline: inline != 0,
        })
    }
}

/// One connection of the out-of-band channel.
pub(crate) struct Oob {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Oob {
    pub(crate) fn new(stream: TcpStream) -> Result<Oob> {
        stream.set_nodelay(true)?;
        Ok(Oob {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn send(&mut self, line: &str) -> Result<()> {
        writeln!(self.writer, "{line}")?;
        Ok(())
    }

    fn recv(&mut self) -> Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err("peer closed the out-of-band connection".into());
        }
        Ok(line.trim_end().to_string())
    }

    pub(crate) fn send_params(&mut self, p: Params) -> Result<()> {
        self.send(&p.to_line())
    }

    pub(crate) fn recv_params(&mut self) -> Result<Params> {
        Params::from_line(&self.recv()?)
    }

    /// Sends `ep` as `LID:QPN:PSN:GID`.
    pub(crate) fn send_endpoint(&mut self, ep: &QpEndpoint) -> Result<()> {
        self.send(&ep.to_string())
    }

    pub(crate) fn recv_endpoint(&mut self) -> Result<QpEndpoint> {
        Ok(self.recv()?.parse()?)
    }

    /// Sends a one-word marker (phase boundaries).
    pub(crate) fn send_word(&mut self, word: &str) -> Result<()> {
        self.send(word)
    }

    /// Waits for marker `word`.
    pub(crate) fn expect_word(&mut self, word: &str) -> Result<()> {
        let got = self.recv()?;
        if got != word {
            return Err(format!("expected {word:?} from the peer, got {got:?}").into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip() {
        let p = Params {
            size: 64,
            iters: 20_000,
            warmup: 1_000,
            window: 32,
            inline: true,
        };
        assert_eq!(Params::from_line(&p.to_line()).unwrap(), p);
        assert!(Params::from_line("PARAMS 1 2").is_err());
    }
}
