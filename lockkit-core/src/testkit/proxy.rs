//! [`FaultProxy`]: a TCP proxy on loopback that injects network faults
//! between a client and a real server — latency, a blackhole, or a hard
//! down (every connection reset, new ones refused).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Keep connections open but forward nothing until the fault changes
    /// (like packets dropped on the path; held bytes flow after it heals).
    Blackhole,
    /// Reset every open connection and refuse new ones.
    Down,
}

/// A proxy in front of one upstream server. Dropping it stops it and closes
/// every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    open: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, watch) = watch::channel(Fault::Pass);
        let open = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn(accept_loop(listener, upstream, watch, open.clone()));
        Ok(FaultProxy {
            addr,
            fault,
            open,
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

    /// Connections currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
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
    watch: watch::Receiver<Fault>,
    open: Arc<AtomicUsize>,
) {
    while let Ok((client, _)) = listener.accept().await {
        if *watch.borrow() == Fault::Down {
            reset(client);
            continue;
        }
        let (watch, open) = (watch.clone(), open.clone());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                reset(client);
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            open.fetch_add(1, Ordering::SeqCst);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::select! {
                _ = pump(cr, sw, watch.clone()) => {}
                _ = pump(sr, cw, watch.clone()) => {}
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Closes with RST rather than FIN, like a peer that vanished.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut watch: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = wait_down(&mut watch) => return,
        };
        loop {
            let fault = *watch.borrow_and_update();
            match fault {
                Fault::Pass => break,
                Fault::Latency(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Fault::Blackhole => {
                    if watch.changed().await.is_err() {
                        return;
                    }
                }
                Fault::Down => return,
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Resolves when the proxy goes down (or is dropped), so idle connections
/// are reset at once, not at their next chunk of traffic.
async fn wait_down(watch: &mut watch::Receiver<Fault>) {
    let _ = watch.wait_for(|f| *f == Fault::Down).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream) -> io::Result<Vec<u8>> {
        s.write_all(b"ping").await?;
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await?;
        Ok(b.to_vec())
    }

    #[tokio::test]
    async fn pass_blackhole_down() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s).await.unwrap(), b"ping");
        proxy.set(Fault::Blackhole);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), roundtrip(&mut s))
                .await
                .is_err()
        );
        proxy.set(Fault::Pass);
        // The held ping and its echo flow after healing.
        let mut b = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut b))
            .await
            .unwrap()
            .unwrap();
        proxy.set(Fault::Down);
        // An idle connection is closed at once, without traffic to notice it.
        let mut one = [0u8; 1];
        let idle = tokio::time::timeout(Duration::from_secs(10), s.read(&mut one))
            .await
            .expect("closed promptly");
        assert!(matches!(idle, Ok(0) | Err(_)), "{idle:?}");
        let r = tokio::time::timeout(Duration::from_secs(10), roundtrip(&mut s))
            .await
            .unwrap();
        assert!(r.is_err(), "a downed connection must fail");
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(10), roundtrip(&mut fresh))
                .await
                .unwrap()
                .is_err()
        );
        proxy.set(Fault::Pass);
        let mut healed = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut healed).await.unwrap(), b"ping");
    }
}
