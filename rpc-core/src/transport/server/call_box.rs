//! The box a call's future runs in, kept for the next call when the future ends
//! without waiting.
//!
//! A call started inline (see `handler::start_inline`) must be pinned before it is
//! polled, since it may wait and then continue on a task of its own. Most calls
//! finish in that first poll, and their box was then allocated and freed for one
//! poll: one `malloc` and one `free` per call. Instead the emptied box stays with
//! the thread and takes the next call of the same type in place (`Pin::set`: the
//! finished future is dropped where it lies, the next one written into its room).

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A call's future in its box (empty once it is spent).
pub(crate) struct CallBox<F>(Pin<Box<Option<F>>>);

thread_local! {
    /// This thread's spare box: an `Option<CallBox<F>>` for the type of future that
    /// first left one here (a server runs one type of call future per path).
    static SPARE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

impl<F: Future<Output = ()> + 'static> CallBox<F> {
    /// `fut` in this thread's spare box if it has one for `F`, else in a new one.
    pub(crate) fn new(fut: F) -> CallBox<F> {
        let spare = SPARE.with(|s| {
            s.borrow_mut()
                .as_mut()?
                .downcast_mut::<Option<CallBox<F>>>()?
                .take()
        });
        match spare {
            Some(mut b) => {
                b.0.set(Some(fut));
                b
            }
            None => CallBox(Box::pin(Some(fut))),
        }
    }

    /// Drops the future in place and keeps the box for the thread's next call (if
    /// the thread keeps none of another type).
    pub(crate) fn recycle(mut self) {
        self.0.set(None);
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            match s.as_mut() {
                None => *s = Some(Box::new(Some(self))),
                Some(spare) => {
                    if let Some(slot) = spare.downcast_mut::<Option<CallBox<F>>>() {
                        *slot = Some(self);
                    }
                }
            }
        });
    }
}

impl<F: Future<Output = ()>> Future for CallBox<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut().0.as_mut().as_pin_mut() {
            Some(fut) => fut.poll(cx),
            None => Poll::Ready(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// One type of future, as a server's calls are.
    async fn call(held: Option<Arc<()>>) {
        let _keep = held;
    }

    #[test]
    fn a_spent_box_takes_the_next_call_and_drops_the_last_in_place() {
        let first = Arc::new(());
        let b = CallBox::new(call(Some(first.clone())));
        let at = &*b.0 as *const Option<_>;
        b.recycle();
        // The spent future's captures are dropped, not kept with the box.
        assert_eq!(Arc::strong_count(&first), 1);
        let again = CallBox::new(call(None));
        assert_eq!(&*again.0 as *const Option<_>, at, "the same box again");
        // Taken: another call meanwhile gets a box of its own.
        let other = CallBox::new(call(None));
        assert_ne!(&*other.0 as *const Option<_>, at);
    }
}
