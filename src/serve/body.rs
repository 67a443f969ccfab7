//! A request body with a deadline for its last byte (`server.body_timeout`).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// A request body not read whole within `server.body_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs_f64())]
pub struct BodyTimedOut(pub Duration);

/// Whether reading a body failed because it came too slowly.
pub fn timed_out(mut e: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        match e.source() {
            Some(next) => e = next,
            None => return false,
        }
    }
}

/// A request body with a deadline for its last byte. The timer is set only
/// if the body is not all there when first read.
pub(super) struct Deadline {
    inner: Incoming,
    deadline: Instant,
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    pub(super) fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            deadline: Instant::now() + limit,
            limit,
            sleep: None,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
