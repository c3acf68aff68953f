//! Watch streams: replay from a resourceVersion, then live events, filtered by namespace and
//! selectors (an object entering a selector is ADDED, leaving it is DELETED), with
//! bookmarks, streaming initial lists, timeouts, and 410 Gone as an ERROR event.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, sleep_until};

use super::render::{View, error_event};
use crate::faults::FaultControls;
use crate::object::Stored;
use crate::selector::Selectors;
use crate::status::ApiError;
use crate::store::{self, Event, EventKind, ListQuery, Store};

/// How often bookmarks are sent when the client allows them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(2);
/// The server-chosen timeout when the client sets none (kube-apiserver picks 30–60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Synthetic ADDED events for the current state, then changes (rv unset or "0").
    InitialState,
    /// Changes after this resourceVersion.
    From(u64),
    /// Changes from now on, without initial events.
    Now,
}

/// A watch request.
pub(crate) struct Params {
    /// How objects are rendered.
    pub(crate) view: View,
    /// Only this namespace.
    pub(crate) namespace: Option<String>,
    /// Label and field selectors.
    pub(crate) selectors: Selectors,
    /// Where to start.
    pub(crate) start: Start,
    /// `sendInitialEvents=true`: end the initial events with the annotated bookmark.
    pub(crate) initial_end_bookmark: bool,
    /// `allowWatchBookmarks`.
    pub(crate) bookmarks: bool,
    /// `timeoutSeconds`.
    pub(crate) timeout: Option<Duration>,
}

/// Starts a watch and returns its chunked body.
pub(crate) fn start(
    store: Arc<Store>,
    faults: Arc<FaultControls>,
    p: Params,
) -> Result<Body, ApiError> {
    let gr = p
        .view
        .rt
        .stored_as
        .clone()
        .unwrap_or_else(|| p.view.rt.gr.clone());
    let in_scope = {
        let ns = p.namespace.clone();
        move |o: &Stored| ns.as_deref().is_none_or(|n| o.meta.namespace == n)
    };
    let mut initial: Vec<Arc<Stored>> = Vec::new();
    let (replay, rx, mut last_rv, gone) = {
        let mut txn = store.lock();
        let from = match p.start {
            Start::InitialState => {
                let filter = |o: &Stored| in_scope(o) && p.selectors.matches(&o.meta);
                let page = txn
                    .list(&ListQuery {
                        gr: &gr,
                        namespace: p.namespace.as_deref(),
                        at: None,
                        after: None,
                        limit: 0,
                        filter: &filter,
                        count_remaining: false,
                        label_hint: p.selectors.labels.required_pair(),
                    })
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                initial = page.items;
                page.rv
            }
            Start::Now => txn.rv(),
            Start::From(rv) => rv,
        };
        match txn.watch_from(&gr, from) {
            Ok((replay, rx)) => (replay, Some(rx), from, None),
            Err(store::Error::TooOld { requested, oldest }) => (
                Vec::new(),
                None,
                from,
                Some(format!("too old resource version: {requested} ({oldest})")),
            ),
            Err(e) => return Err(ApiError::internal(e.to_string())),
        }
    };
    let (tx, out) = mpsc::channel::<Bytes>(64);
    let view = p.view;
    let timeout = p.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let cut = faults.watch_cut();
    let mut gone_signal = faults.gone_signal();
    gone_signal.borrow_and_update();
    tokio::spawn(async move {
        if let Some(message) = gone {
            let status = ApiError::gone(message).to_status();
            let _ = tx.send(error_event(&status)).await;
            return;
        }
        let Some(mut rx) = rx else { return };
        for o in &initial {
            if tx.send(view.event("ADDED", o)).await.is_err() {
                return;
            }
        }
        if p.initial_end_bookmark && tx.send(view.bookmark(last_rv, true)).await.is_err() {
            return;
        }
        let selectors = p.selectors;
        let deliver = |e: &Event| -> Option<Bytes> {
            if !in_scope(&e.obj) {
                return None;
            }
            let now = selectors.matches(&e.obj.meta);
            let before = e.prev.as_ref().is_some_and(|p| selectors.matches(&p.meta));
            let kind = match e.kind {
                EventKind::Added => now.then_some("ADDED"),
                EventKind::Deleted => (before || now).then_some("DELETED"),
                EventKind::Modified => match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => {
                        // The last state the watcher saw match, at the event's
                        // resourceVersion, as kube-apiserver's watch cache sends it.
                        let prev = e.prev.as_deref().and_then(|p| at_rv(p, e.obj.meta.rv));
                        return Some(view.event("DELETED", prev.as_deref().unwrap_or(&e.obj)));
                    }
                    (false, false) => None,
                },
            };
            kind.map(|k| view.event(k, &e.obj))
        };
        for e in &replay {
            if let Some(line) = deliver(e)
                && tx.send(line).await.is_err()
            {
                return;
            }
            last_rv = e.rv();
        }
        let deadline = Instant::now() + cut.map_or(timeout, |c| c.min(timeout));
        let mut next_bookmark = Instant::now() + BOOKMARK_EVERY;
        loop {
            tokio::select! {
                biased;
                () = tx.closed() => return,
                () = sleep_until(deadline) => return,
                _ = gone_signal.changed() => return,
                r = rx.recv() => match r {
                    Ok(e) => {
                        if e.rv() <= last_rv {
                            continue;
                        }
                        last_rv = e.rv();
                        if let Some(line) = deliver(&e)
                            && tx.send(line).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher too slow to keep up is closed, as kube-apiserver does; the
                    // client resumes from the last resourceVersion it saw.
                    Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
                },
                () = sleep_until(next_bookmark), if p.bookmarks => {
                    next_bookmark = Instant::now() + BOOKMARK_EVERY;
                    // Every event up to the store's current resourceVersion has been received
                    // when the queue is empty after reading it.
                    let rv = store.lock().rv();
                    if rx.is_empty() && rv > last_rv {
                        last_rv = rv;
                    }
                    if tx.send(view.bookmark(last_rv, false)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(out, |mut out| async move {
        out.recv().await.map(|b| (Ok::<_, Infallible>(b), out))
    });
    Ok(Body::from_stream(stream))
}

/// `obj` with its resourceVersion set to `rv`.
fn at_rv(obj: &Stored, rv: u64) -> Option<Arc<Stored>> {
    let mut v = obj.value().ok()?;
    v["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    Stored::from_value(&v).ok()
}
