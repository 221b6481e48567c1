//! Logging that a flood cannot turn into a flood of log lines.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::transport::lock;

/// Lets one event through per `every`, and counts the ones it held back, so that
/// the line that gets through can say how many were left out.
#[derive(Debug)]
pub(crate) struct RateLimit {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimit {
    pub(crate) const fn new(every: Duration) -> Self {
        RateLimit {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(held back since the last one let through)` if this event may be logged.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        let mut st = lock(&self.state);
        match st.0 {
            Some(last) if now.duration_since(last) < self.every => {
                st.1 += 1;
                None
            }
            _ => {
                st.0 = Some(now);
                Some(std::mem::take(&mut st.1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_one_through_per_period_and_counts_the_rest() {
        let r = RateLimit::new(Duration::from_secs(3600));
        assert_eq!(r.allow(), Some(0));
        assert_eq!(r.allow(), None);
        assert_eq!(r.allow(), None);
        let r0 = RateLimit::new(Duration::ZERO);
        assert_eq!(r0.allow(), Some(0));
        assert_eq!(r0.allow(), Some(0));
    }
}
