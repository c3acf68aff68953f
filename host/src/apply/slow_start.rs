//! Many writes of one pass, sent in batches that double: 1, 2, 4, …
//!
//! Sent one after another, a DataJob's five Pods take five round trips,
//! and the scheduler meets them spread among other DataJobs' Pods; sent
//! together, they take one and start together. But a write the API server
//! refuses (a quota, an admission webhook) would be refused for every one
//! of a thousand children: the first batch is one write, each batch that
//! went through doubles the next, and the first refusal ends the pass
//! after its batch. Kubernetes' ReplicaSet and Job controllers create
//! their Pods so ("slow start").

use std::future::Future;

/// What a batched run came to: what each write that went through
/// returned, in the order of its items, and the first error (in that
/// order), after which no batch was started.
pub struct Batched<R, E> {
    /// What each write that went through returned.
    pub done: Vec<R>,
    /// The first refusal, if one came.
    pub error: Option<E>,
}

/// Runs `write` on every item in batches of 1, 2, 4, … at once, until one
/// fails; the items of a failed batch that went through are in `done`.
pub async fn in_batches<T, R, E, F, Fut>(items: Vec<T>, write: F) -> Batched<R, E>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    let mut done = Vec::with_capacity(items.len());
    let mut rest = items.into_iter();
    let mut size = 1;
    loop {
        let batch: Vec<T> = rest.by_ref().take(size).collect();
        if batch.is_empty() {
            return Batched { done, error: None };
        }
        let outcomes = futures::future::join_all(batch.into_iter().map(&write)).await;
        let mut error = None;
        for outcome in outcomes {
            match outcome {
                Ok(result) => done.push(result),
                Err(refused) => {
                    error.get_or_insert(refused);
                }
            }
        }
        if error.is_some() {
            return Batched { done, error };
        }
        size *= 2;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn batches_double_until_every_item_is_written() {
        let batches = Mutex::new(Vec::<Vec<u32>>::new());
        let in_flight = Mutex::new(Vec::new());
        let result: Batched<(u32, u32), ()> = in_batches((0..10).collect(), |item| {
            in_flight.lock().unwrap().push(item);
            let (batches, in_flight) = (&batches, &in_flight);
            async move {
                tokio::task::yield_now().await;
                // The first of a batch to finish records the whole batch.
                let mut flying = in_flight.lock().unwrap();
                if !flying.is_empty() {
                    batches.lock().unwrap().push(std::mem::take(&mut *flying));
                }
                Ok((item, item * 10))
            }
        })
        .await;
        assert!(result.error.is_none());
        assert_eq!(
            result.done,
            (0..10).map(|i| (i, i * 10)).collect::<Vec<_>>(),
            "every item, in order"
        );
        assert_eq!(
            batches.into_inner().unwrap(),
            [vec![0], vec![1, 2], vec![3, 4, 5, 6], vec![7, 8, 9]],
            "1, 2, 4, then the rest, each batch at once"
        );
    }

    #[tokio::test]
    async fn a_refusal_ends_the_run_after_its_batch() {
        let tried = Mutex::new(Vec::new());
        let result = in_batches((0..10).collect(), |item: u32| {
            tried.lock().unwrap().push(item);
            async move {
                if item == 4 || item == 6 {
                    Err(format!("refused {item}"))
                } else {
                    Ok(item)
                }
            }
        })
        .await;
        assert_eq!(
            result.error.as_deref(),
            Some("refused 4"),
            "the first refusal in order"
        );
        assert_eq!(
            result.done,
            [0, 1, 2, 3, 5],
            "the rest of the failed batch went through"
        );
        assert_eq!(
            tried.into_inner().unwrap(),
            (0..7).collect::<Vec<_>>(),
            "no batch after the one that failed"
        );
    }
}
