//! A connection's credit window as the server engine moves it: one token at a time,
//! on answers it sends anyway (see [`crate::engine::wire`], "Windows granted out of
//! the shared pool"). The driver decides where the window should go
//! ([`CreditWindow::set_target`]) after reserving receives for it; the engine only
//! stamps the answers and keeps the count.

use crate::engine::wire::CreditAdjust;

/// The smallest window: one call in flight and the token kept for `CANCEL` frames.
pub const MIN_WINDOW: u32 = 2;

/// One connection's window, as the server sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditWindow {
    /// The client's window once it has read every answer sent so far.
    window: u32,
    /// Where the driver wants the window to go.
    target: u32,
    /// Largest window the client can take (what it asked for, at most the server's cap).
    max: u32,
    /// Receives the driver reserved for this connection in its shared pool; kept at
    /// least [`CreditWindow::committed`] by the driver.
    pub reserved: u32,
    /// Whether the window moves at all (both sides offered `CREDIT_WINDOWS`).
    dynamic: bool,
    /// A `REQ` said `WANT_CREDIT` since the driver last looked.
    wanted: bool,
    /// A frame arrived on the queue pair: the peer has proven its RDMA path.
    proven: bool,
    /// Frames received (wrapping): the driver's policy looks at a settled window
    /// only every so often.
    frames: u8,
}

impl CreditWindow {
    /// A window that stays `n` for good (a peer without `CREDIT_WINDOWS`).
    pub fn fixed(n: u32) -> CreditWindow {
        CreditWindow {
            window: n,
            target: n,
            max: n,
            reserved: n,
            dynamic: false,
            wanted: false,
            proven: false,
            frames: 0,
        }
    }

    /// A window of `start` that may move between [`MIN_WINDOW`] and `max`.
    pub fn dynamic(start: u32, max: u32) -> CreditWindow {
        CreditWindow {
            dynamic: true,
            max: max.max(start),
            ..CreditWindow::fixed(start)
        }
    }

    /// The client's window once it has read every answer sent.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Where the window is going.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// The largest window this connection may have.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Receives the connection may need: the larger of its window and its target.
    pub fn committed(&self) -> u32 {
        self.window.max(self.target)
    }

    /// Whether the window moves.
    pub fn is_dynamic(&self) -> bool {
        self.dynamic
    }

    /// Whether a frame arrived on the queue pair.
    pub fn proven(&self) -> bool {
        self.proven
    }

    /// Sets where the window goes (clamped to [`MIN_WINDOW`]..=max). Raise it only
    /// with receives reserved for [`CreditWindow::committed`].
    pub fn set_target(&mut self, n: u32) {
        if self.dynamic {
            self.target = n.clamp(MIN_WINDOW, self.max);
        }
    }

    /// Whether a `REQ` asked for more since the last call (and forgets it).
    pub fn take_wanted(&mut self) -> bool {
        std::mem::take(&mut self.wanted)
    }

    /// Whether the driver's policy should look at this window now: it moves or was
    /// asked to, revokes have left whose receives go back, it is the first frame,
    /// or one in 16 (a pool that ran low shrinks windows within 16 frames).
    pub fn needs_settle(&self) -> bool {
        self.dynamic && (self.wanted || self.reserved != self.committed() || self.frames & 15 == 1)
    }

    pub(crate) fn on_frame(&mut self, wants_credit: bool) {
        self.frames = self.frames.wrapping_add(1);
        self.proven = true;
        self.wanted |= wants_credit && self.dynamic;
    }

    /// The adjustment the next answer carries, counted as sent: a grant of up to
    /// `most` credits.
    pub(crate) fn next_adjust(&mut self, most: u8) -> CreditAdjust {
        if self.window < self.target {
            let n = (self.target - self.window).min(u32::from(most.max(1)));
            self.window += n;
            CreditAdjust::Grant(n as u8)
        } else if self.window > self.target && self.window > MIN_WINDOW {
            self.window -= 1;
            CreditAdjust::Revoke
        } else {
            CreditAdjust::Keep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_moves_one_answer_at_a_time_and_never_below_the_minimum() {
        let mut w = CreditWindow::dynamic(2, 10);
        w.set_target(4);
        assert_eq!(w.committed(), 4);
        assert_eq!(w.next_adjust(1), CreditAdjust::Grant(1));
        assert_eq!(w.next_adjust(9), CreditAdjust::Grant(1));
        assert_eq!(w.next_adjust(1), CreditAdjust::Keep);
        assert_eq!(w.window(), 4);
        w.set_target(0);
        assert_eq!(w.target(), MIN_WINDOW);
        assert_eq!(w.next_adjust(1), CreditAdjust::Revoke);
        assert_eq!(w.next_adjust(1), CreditAdjust::Revoke);
        assert_eq!(w.next_adjust(1), CreditAdjust::Keep);
        assert_eq!(w.window(), MIN_WINDOW);
        w.set_target(99);
        assert_eq!(w.target(), 10, "never beyond the client's ask");
    }

    #[test]
    fn a_fixed_window_never_moves() {
        let mut w = CreditWindow::fixed(5);
        w.set_target(9);
        w.on_frame(true);
        assert_eq!(w.next_adjust(1), CreditAdjust::Keep);
        assert!(!w.take_wanted());
        assert_eq!(w.window(), 5);
    }
}
