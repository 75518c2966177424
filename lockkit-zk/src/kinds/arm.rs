//! Arming a waiting contender's watches (see [`Watch`]), pipelined, and
//! waiting for the first of their events.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use zookeeper_client::{Client, OneshotWatcher, WatchedEvent};

use super::plan::Watch;
use crate::layout::{Child, queue};
use crate::result::ZkResult;

/// An arming of one watch: its watcher, or `None` when what it waits
/// for has happened already (look again).
type Arming<'a> = Pin<Box<dyn Future<Output = ZkResult<Option<OneshotWatcher>>> + Send + 'a>>;

/// Arms `watches` of nodes under `parent`, pipelined: `None` when one of
/// them has happened already (a node claimed, the parent's children changed
/// since `seen` was listed: a children watch armed after the change would
/// not fire for it), look again. A node gone already: `NoNode`.
pub(super) async fn arm(
    client: &Client,
    parent: &str,
    watches: &[Watch],
    seen: &[Child],
) -> ZkResult<Option<Vec<OneshotWatcher>>> {
    let arming: Vec<Arming<'_>> = watches
        .iter()
        .map(|w| -> Arming<'_> {
            match w {
                Watch::Gone(n) => {
                    let armed = client.get_and_watch_children(&format!("{parent}/{n}"));
                    Box::pin(async move { Ok(Some(armed.await?.2)) })
                }
                Watch::Claim(n) => {
                    let armed = client.get_and_watch_data(&format!("{parent}/{n}"));
                    Box::pin(async move {
                        let (_, stat, watcher) = armed.await?;
                        Ok((stat.version == 0).then_some(watcher))
                    })
                }
                Watch::Children => {
                    let armed = client.list_and_watch_children(parent);
                    Box::pin(async move {
                        let (children, watcher) = armed.await?;
                        let now = queue(&children);
                        let same = now.len() == seen.len() && now.iter().zip(seen).all(|(a, b)| a.name == b.name);
                        Ok(same.then_some(watcher))
                    })
                }
            }
        })
        .collect();
    let mut watchers = Vec::with_capacity(watches.len());
    let mut happened = false;
    for armed in arming {
        match armed.await? {
            Some(w) => watchers.push(w),
            None => happened = true,
        }
    }
    Ok((!happened).then_some(watchers))
}

/// The first event of any of `watchers`.
pub(super) async fn any_event(watchers: Vec<OneshotWatcher>) -> WatchedEvent {
    let mut events: Vec<Pin<Box<dyn Future<Output = WatchedEvent> + Send>>> =
        watchers.into_iter().map(|w| Box::pin(w.changed()) as _).collect();
    std::future::poll_fn(|cx| {
        for event in &mut events {
            if let Poll::Ready(e) = event.as_mut().poll(cx) {
                return Poll::Ready(e);
            }
        }
        Poll::Pending
    })
    .await
}
