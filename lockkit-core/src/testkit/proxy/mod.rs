//! [`FaultProxy`]: a TCP proxy on loopback that injects network faults
//! between a client and a real server — latency, a blackhole, dropped
//! bytes, a one-shot reset of every connection, or a hard down (every
//! connection reset, new ones refused).
//!
//! Faults are switched with [`FaultProxy::set`] and take effect on open
//! connections at once; [`FaultProxy::reset_all`] is the one-shot "the
//! middlebox restarted" fault that leaves the path up.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Keep connections open but forward nothing until the fault changes
    /// (like packets dropped on the path and retransmitted: held bytes flow
    /// after it heals).
    Blackhole,
    /// Keep connections open (and accept new ones) but discard every byte
    /// read (and any a blackhole or latency still holds): unlike [`Blackhole`](Fault::Blackhole), nothing is delivered
    /// after the fault heals. A connection that lost bytes can no longer
    /// carry its protocol, so when the fault changes to anything but
    /// `Down` the proxy closes it with a FIN on both sides (like a stateful
    /// middlebox that lost the flow and a peer that noticed); connections
    /// that lost nothing carry on. To the client: no answer while it lasts,
    /// then a clean end of stream.
    Drop,
    /// Deliver every request to the server but discard its replies: the
    /// command runs, its answer is lost — what a client sees when the
    /// connection breaks after the server acted and before the reply
    /// arrived. A connection that lost a reply is closed with a FIN on both
    /// sides when the fault changes (as after [`Drop`](Fault::Drop)), so
    /// the client's next command goes on a new connection: the re-sent
    /// command runs a second time.
    LoseReplies,
    /// Reset every open connection and refuse new ones.
    Down,
}

impl Fault {
    /// Whether bytes going in this direction are discarded.
    fn discards(self, to_server: bool) -> bool {
        match self {
            Fault::Drop => true,
            Fault::LoseReplies => !to_server,
            _ => false,
        }
    }
}

/// A proxy in front of one upstream server. Dropping it stops it and closes
/// every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    resets: watch::Sender<u64>,
    open: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::Pass);
        let (resets, resets_rx) = watch::channel(0u64);
        let open = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            fault_rx,
            resets_rx,
            open.clone(),
            dropped.clone(),
        ));
        Ok(FaultProxy {
            addr,
            fault,
            resets,
            open,
            dropped,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the fault; takes effect on open connections at once.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// The fault in effect.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// Resets (RST) every connection open now, on both sides, and keeps
    /// accepting new ones under the current fault: a one-shot cut, like a
    /// restarted middlebox. Returns how many connections were open.
    pub fn reset_all(&self) -> usize {
        let open = self.open_connections();
        self.resets.send_modify(|n| *n += 1);
        open
    }

    /// Connections currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Bytes discarded under [`Fault::Drop`] so far, both directions.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.fault.send_replace(Fault::Down);
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    fault: watch::Receiver<Fault>,
    resets: watch::Receiver<u64>,
    open: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        if *fault.borrow() == Fault::Down {
            reset(client);
            continue;
        }
        // Subscribed now: a reset_all after this accept cuts this connection.
        let mut resets = resets.clone();
        resets.mark_unchanged();
        let (fault, open, dropped) = (fault.clone(), open.clone(), dropped.clone());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                reset(client);
                return;
            };
            open.fetch_add(1, Ordering::SeqCst);
            relay(client, server, fault, resets, &dropped).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// How a relayed connection ends.
enum End {
    /// One side closed or failed: close the other one normally.
    Closed,
    /// Bytes were dropped and the fault healed: close both with a FIN.
    Desynced,
    /// Down or [`FaultProxy::reset_all`]: reset both.
    Reset,
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    fault: watch::Receiver<Fault>,
    mut resets: watch::Receiver<u64>,
    total_dropped: &AtomicU64,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let dropped: Losses<'_> = (AtomicBool::new(false), total_dropped);
    let (mut down, mut healed) = (fault.clone(), fault.clone());
    let end = tokio::select! {
        e = pump(&mut cr, &mut sw, fault.clone(), &dropped, true) => e,
        e = pump(&mut sr, &mut cw, fault, &dropped, false) => e,
        _ = resets.changed() => End::Reset,
        _ = down.wait_for(|f| *f == Fault::Down) => End::Reset,
        // Re-checked on every fault change; `pump` covers a drop that
        // raced with the change.
        _ = healed.wait_for(|f| !matches!(f, Fault::Drop | Fault::LoseReplies | Fault::Down) && dropped.0.load(Ordering::SeqCst)) => End::Desynced,
    };
    match end {
        End::Reset => {
            if let (Ok(c), Ok(s)) = (cr.reunite(cw), sr.reunite(sw)) {
                reset(c);
                reset(s);
            }
        }
        End::Closed | End::Desynced => {
            // Dropping the halves closes both sides with a FIN.
        }
    }
}

/// Closes with RST rather than FIN, like a peer that vanished.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Whether a connection lost bytes, and the proxy's count of them.
type Losses<'a> = (AtomicBool, &'a AtomicU64);

/// Copies `from` to `to` under the current fault. A reader stamps each chunk
/// with its arrival and a writer delivers it (so under latency chunks are
/// delayed in parallel, like packets on a slow path, not one after another);
/// bytes read before `from` closed are delivered before `to` is closed.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    fault: watch::Receiver<Fault>,
    losses: &Losses<'_>,
    to_server: bool,
) -> End {
    let (tx, rx) = mpsc::channel(64);
    let writer = deliver(rx, to, fault.clone(), losses, to_server);
    tokio::pin!(writer);
    let end = tokio::select! {
        end = receive(from, tx, fault, losses, to_server) => end,
        end = &mut writer => return end,
    };
    match end {
        End::Closed => writer.await,
        other => other,
    }
}

/// Marks a connection as having lost `n` bytes; what it does next.
fn lose(n: usize, fault: &watch::Receiver<Fault>, (dropped, total): &Losses<'_>) -> Option<End> {
    dropped.store(true, Ordering::SeqCst);
    total.fetch_add(n as u64, Ordering::SeqCst);
    // The fault may have healed between the look and the mark, unseen by
    // the relay's watcher.
    match *fault.borrow() {
        Fault::Drop | Fault::LoseReplies => None,
        Fault::Down => Some(End::Reset),
        _ => Some(End::Desynced),
    }
}

/// Reads chunks and queues them with their arrival time (dropping them under
/// [`Fault::Drop`]).
async fn receive(
    from: &mut OwnedReadHalf,
    tx: mpsc::Sender<(Instant, Vec<u8>)>,
    fault: watch::Receiver<Fault>,
    losses: &Losses<'_>,
    to_server: bool,
) -> End {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return End::Closed,
            Ok(n) => n,
        };
        let current = *fault.borrow();
        match current {
            Fault::Down => return End::Reset,
            f if f.discards(to_server) => {
                if let Some(end) = lose(n, &fault, losses) {
                    return end;
                }
            }
            _ => {
                if tx.send((Instant::now(), buf[..n].to_vec())).await.is_err() {
                    return End::Closed;
                }
            }
        }
    }
}

/// Writes queued chunks when the fault lets them through.
async fn deliver(
    mut rx: mpsc::Receiver<(Instant, Vec<u8>)>,
    to: &mut OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    losses: &Losses<'_>,
    to_server: bool,
) -> End {
    'chunks: while let Some((arrived, chunk)) = rx.recv().await {
        loop {
            let current = *fault.borrow_and_update();
            match current {
                f if f.discards(to_server) => match lose(chunk.len(), &fault, losses) {
                    None => continue 'chunks,
                    Some(end) => return end,
                },
                // (Drop always discards: handled above.)
                Fault::Pass | Fault::LoseReplies | Fault::Drop => break,
                Fault::Latency(d) => {
                    tokio::time::sleep_until((arrived + d).into()).await;
                    break;
                }
                Fault::Blackhole => {
                    if fault.changed().await.is_err() {
                        return End::Closed;
                    }
                }
                Fault::Down => return End::Reset,
            }
        }
        if to.write_all(&chunk).await.is_err() {
            return End::Closed;
        }
    }
    End::Closed
}

#[cfg(test)]
mod tests;
