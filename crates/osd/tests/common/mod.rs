//! What the tests driving one `OsdCore` through an in-memory `OsdIo` share.

/// The value of a future that an in-memory store completes at once.
pub fn ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("an in-memory store operation did not complete"),
    }
}
