//! Group commit: requests that arrive while a transaction is being
//! committed go together into the next one, so that many concurrent
//! requests share one commit instead of each waiting for its own. A request
//! alone goes at once; nothing waits for a batch to fill. Single schedule
//! requests (`Store::insert_batch`, with the repeated-key rule of
//! `insert_once`) and publishes (`EventStore::publish_events`) each have one.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::store::{
    BatchItem, InsertOutcome, PublishItem, Published, Render, Store, StoreError, StoreResult,
};

/// What a batch is done with: one answer per item, in order.
type Apply<I, O> = Arc<dyn Fn(Vec<I>) -> BoxFuture<'static, StoreResult<Vec<O>>> + Send + Sync>;

type Request<I, O> = (I, oneshot::Sender<StoreResult<O>>);

pub struct Coalescer<I, O> {
    tx: mpsc::Sender<Request<I, O>>,
}

impl<I: Send + 'static, O: Send + 'static> Coalescer<I, O> {
    /// `workers` transactions may be in flight at once, each with at most
    /// `max_batch` items. At shutdown the workers finish what is queued and
    /// stop (and with them their hold on the store); later requests answer
    /// that the service is shutting down.
    fn start(
        apply: Apply<I, O>,
        workers: usize,
        max_batch: usize,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(max_batch * workers.max(1) * 2);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..workers.max(1) {
            tasks.spawn(work(
                apply.clone(),
                rx.clone(),
                max_batch.max(1),
                shutdown.clone(),
            ));
        }
        Self { tx }
    }

    pub async fn submit(&self, item: I) -> StoreResult<O> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((item, reply))
            .await
            .map_err(|_| StoreError::ShuttingDown)?;
        answer.await.map_err(|_| StoreError::ShuttingDown)?
    }
}

/// The group commits of one instance.
pub struct GroupCommits {
    pub inserts: Coalescer<BatchItem, InsertOutcome>,
    pub publishes: Coalescer<PublishItem, Published>,
}

impl GroupCommits {
    /// Two transactions of each at a time: what arrives meanwhile goes into
    /// the next one, so that under load each commits more. With four, 32
    /// concurrent schedule requests went about five to a transaction and
    /// PostgreSQL's time per message was what held them back (the ingest
    /// scenario: 8,100–8,400/s with four, 8,900–10,400/s with two).
    /// `render` makes the answer a publish's idempotency key keeps.
    pub fn start(
        store: Arc<dyn Store>,
        render: &'static Render,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let for_inserts = store.clone();
        let inserts = Coalescer::start(
            Arc::new(move |items: Vec<BatchItem>| {
                let store = for_inserts.clone();
                Box::pin(
                    async move { super::idempotency::insert_once(store.as_ref(), items).await },
                )
            }),
            2,
            256,
            tasks,
            shutdown.clone(),
        );
        let publishes = Coalescer::start(
            Arc::new(move |items: Vec<PublishItem>| {
                let store = store.clone();
                Box::pin(async move { store.publish_events(&items, render).await })
            }),
            2,
            64,
            tasks,
            shutdown,
        );
        Self { inserts, publishes }
    }
}

async fn work<I, O>(
    apply: Apply<I, O>,
    rx: Arc<Mutex<mpsc::Receiver<Request<I, O>>>>,
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
        let (items, replies): (Vec<I>, Vec<_>) = batch.into_iter().unzip();
        match apply(items).await {
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
