//! Group commit for single schedule requests: requests that arrive while
//! a transaction is being committed are inserted together in the next one
//! (`Store::insert_batch`, with the repeated-key rule of `insert_once`), so that many concurrent `POST /messages` share
//! one commit instead of each waiting for its own. A request alone is
//! inserted at once; nothing waits for a batch to fill.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::store::{BatchItem, InsertOutcome, Store, StoreError, StoreResult};

type Request = (BatchItem, oneshot::Sender<StoreResult<InsertOutcome>>);

pub struct Coalescer {
    tx: mpsc::Sender<Request>,
}

impl Coalescer {
    /// `workers` transactions may be in flight at once, each with at most
    /// `max_batch` messages. At shutdown the workers insert what is queued and
    /// stop (and with them their hold on the store); later requests answer
    /// that the service is shutting down.
    pub fn start(
        store: Arc<dyn Store>,
        workers: usize,
        max_batch: usize,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(max_batch * workers.max(1) * 2);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..workers.max(1) {
            tasks.spawn(work(
                store.clone(),
                rx.clone(),
                max_batch.max(1),
                shutdown.clone(),
            ));
        }
        Self { tx }
    }

    pub async fn insert(&self, item: BatchItem) -> StoreResult<InsertOutcome> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((item, reply))
            .await
            .map_err(|_| StoreError::ShuttingDown)?;
        answer.await.map_err(|_| StoreError::ShuttingDown)?
    }
}

async fn work(
    store: Arc<dyn Store>,
    rx: Arc<Mutex<mpsc::Receiver<Request>>>,
    max_batch: usize,
    shutdown: CancellationToken,
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut rx = rx.lock().await;
            tokio::select! {
                r = rx.recv() => match r {
                    Some(r) => batch.push(r),
                    None => return,
                },
                // Queued requests are still taken below; then the worker stops.
                _ = shutdown.cancelled() => {
                    if rx.is_empty() {
                        rx.close();
                        return;
                    }
                }
            }
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
        }
        let (items, replies): (Vec<BatchItem>, Vec<_>) = batch.into_iter().unzip();
        match super::idempotency::insert_once(store.as_ref(), items).await {
            Ok(outcomes) => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Shared(e.clone())));
                }
            }
        }
    }
}
