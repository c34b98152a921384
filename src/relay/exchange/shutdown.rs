//! The gateway's shutdown as an exchange waits on it: on every wait, several times per token of
//! a stream.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::sync::watch;

/// Resolves once the shutdown grace period is over (never, if the sender is gone). One
/// registration for the whole exchange, polled again only for a new waker: a registration's
/// poll takes its notifier's lock (shared with other exchanges), where checking the watch's
/// version is one atomic load. A send bumps the version before it wakes the registered waker,
/// so the poll that wake-up brings sees it.
pub struct ShutdownWait {
    peek: watch::Receiver<bool>,
    registration: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    registered_with: Option<Waker>,
    over: bool,
}

impl ShutdownWait {
    pub fn new(shutdown: &watch::Sender<bool>) -> ShutdownWait {
        let mut rx = shutdown.subscribe();
        ShutdownWait {
            peek: shutdown.subscribe(),
            registration: Box::pin(async move { stopped(&mut rx).await }),
            registered_with: None,
            over: false,
        }
    }
}

impl Future for ShutdownWait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        // `Err`: the sender is gone, and with it any shutdown.
        if this.over || (this.peek.has_changed().unwrap_or(false) && *this.peek.borrow()) {
            this.over = true;
            return Poll::Ready(());
        }
        if this
            .registered_with
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        let polled = this.registration.as_mut().poll(cx);
        this.registered_with = Some(cx.waker().clone());
        this.over = polled.is_ready();
        polled
    }
}

/// Resolves once the shutdown grace period is over (never, if the sender is gone).
pub(in crate::relay) async fn stopped(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(wait: &mut ShutdownWait, waker: &Waker) -> Poll<()> {
        Pin::new(wait).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn polled_again_with_the_same_waker_it_is_woken_by_the_shutdown_and_sees_it() {
        let (tx, _rx) = watch::channel(false);
        let mut wait = ShutdownWait::new(&tx);
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(Arc::clone(&counter));
        for _ in 0..3 {
            assert!(poll(&mut wait, &waker).is_pending());
        }
        tx.send_replace(true);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken once");
        assert!(poll(&mut wait, &waker).is_ready());
        assert!(poll(&mut wait, &waker).is_ready(), "and stays over");
    }

    #[test]
    fn a_new_waker_is_registered_and_woken() {
        let (tx, _rx) = watch::channel(false);
        let mut wait = ShutdownWait::new(&tx);
        let (first, second) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        assert!(poll(&mut wait, &Waker::from(Arc::clone(&first))).is_pending());
        assert!(poll(&mut wait, &Waker::from(Arc::clone(&second))).is_pending());
        tx.send_replace(true);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn over_before_it_was_made_or_never_once_the_sender_is_gone() {
        let (tx, _rx) = watch::channel(true);
        let waker = Waker::from(Arc::new(Counter::default()));
        assert!(poll(&mut ShutdownWait::new(&tx), &waker).is_ready());
        let (tx, _rx) = watch::channel(false);
        let mut wait = ShutdownWait::new(&tx);
        assert!(poll(&mut wait, &waker).is_pending());
        drop(tx);
        assert!(poll(&mut wait, &waker).is_pending());
    }
}
