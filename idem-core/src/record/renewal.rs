//! The lease of a running attempt's record, renewed every third of it while the attempt
//! waits.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::{Host, Record};
use crate::store::RecordStore;
use crate::throttled;

impl<St: RecordStore + Clone, H: Host> Record<St, H> {
    /// `work`, with this record's lease renewed every third of it while `work` waits.
    pub fn renewing<W: Future>(&self, work: W) -> Renewing<W, St, H> {
        Renewing {
            work,
            record: self.clone(),
            renewal: None,
        }
    }

    /// Renews the lease every third of it, for as long as it is polled.
    async fn keep_alive(self) -> Infallible {
        let lease = self.lease();
        // A lease under 3 ms would otherwise renew in a tight loop.
        let period = (lease / 3).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(period).await;
            match self
                .store()
                .renew_record(self.key(), self.owner(), lease)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    throttled::warn!(
                        "idem: a running attempt lost its idempotency record (its lease ran \
                         out); its result will not be stored"
                    );
                    return std::future::pending().await;
                }
                // The next renewal comes before the lease ends, unless the store stays down.
                Err(error) => {
                    throttled::warn!(%error, "idem: could not renew an idempotency record")
                }
            }
        }
    }
}

pin_project! {
    /// The future of [`Record::renewing`]. The renewal (a timer) is made, on the heap,
    /// only once the work has to wait: work that ends at its first poll costs no timer.
    pub struct Renewing<W, St, H> {
        #[pin]
        work: W,
        record: Record<St, H>,
        renewal: Option<Pin<Box<dyn Future<Output = Infallible> + Send>>>,
    }
}

impl<W: Future, St: RecordStore + Clone, H: Host> Future for Renewing<W, St, H> {
    type Output = W::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<W::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.work.poll(cx) {
            return Poll::Ready(output);
        }
        let record = this.record;
        let renewal = this
            .renewal
            .get_or_insert_with(|| Box::pin(record.clone().keep_alive()));
        match renewal.as_mut().poll(cx) {
            Poll::Ready(never) => match never {},
            Poll::Pending => Poll::Pending,
        }
    }
}
