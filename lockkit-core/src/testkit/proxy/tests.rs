//! The fault proxy's tests against a loopback echo server.

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

/// Whether `s` was closed: end of stream or an error (reset), promptly.
async fn closed(s: &mut TcpStream) -> io::Result<usize> {
    let mut one = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), s.read(&mut one))
        .await
        .expect("closed promptly")
}

#[tokio::test]
async fn reset_all_cuts_open_connections_and_accepts_new_ones() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut a).await.unwrap(), b"ping");
    assert_eq!(roundtrip(&mut b).await.unwrap(), b"ping");
    assert_eq!(proxy.reset_all(), 2);
    for s in [&mut a, &mut b] {
        let r = closed(s).await;
        assert!(
            matches!(&r, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "reset, not a clean close: {r:?}"
        );
    }
    // The path stays up: a new connection works, and a later reset does
    // not need another call to let it live.
    assert_eq!(proxy.fault(), Fault::Pass);
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut fresh).await.unwrap(), b"ping");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(roundtrip(&mut fresh).await.unwrap(), b"ping");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proxy.open_connections() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reset connections still counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn drop_discards_bytes_and_closes_the_connections_that_lost_some() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut lossy = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut quiet = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut lossy).await.unwrap(), b"ping");
    assert_eq!(roundtrip(&mut quiet).await.unwrap(), b"ping");
    proxy.set(Fault::Drop);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), roundtrip(&mut lossy))
            .await
            .is_err(),
        "no answer while bytes are dropped"
    );
    // New connections are accepted (and lose their bytes too).
    let mut during = TcpStream::connect(proxy.addr()).await.unwrap();
    during.write_all(b"lost").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proxy.dropped_bytes() < 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy did not read the bytes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(proxy.dropped_bytes(), 8);
    proxy.set(Fault::Pass);
    // The dropped ping is never delivered: the connection ends cleanly.
    assert_eq!(closed(&mut lossy).await.unwrap(), 0, "a FIN, not the dropped bytes");
    assert_eq!(closed(&mut during).await.unwrap(), 0);
    assert_eq!(
        roundtrip(&mut quiet).await.unwrap(),
        b"ping",
        "a connection that lost nothing carries on"
    );
    let mut healed = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut healed).await.unwrap(), b"ping");
}

/// Requests reach the server, replies are lost; healing ends the
/// connections that lost one.
#[tokio::test]
async fn lose_replies_delivers_requests_only() {
    // A server that counts the bytes it got and echoes them.
    let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let upstream = l.local_addr().unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let counted = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    counted.fetch_add(n, Ordering::SeqCst);
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut s).await.unwrap(), b"ping");
    proxy.set(Fault::LoseReplies);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), roundtrip(&mut s))
            .await
            .is_err(),
        "the reply is lost"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.load(Ordering::SeqCst) < 8 || proxy.dropped_bytes() < 4 {
        assert!(tokio::time::Instant::now() < deadline, "the request did not arrive");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.set(Fault::Pass);
    assert_eq!(closed(&mut s).await.unwrap(), 0, "a FIN after healing");
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(roundtrip(&mut fresh).await.unwrap(), b"ping");
}

#[tokio::test]
async fn down_while_dropping_resets() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    proxy.set(Fault::Drop);
    s.write_all(b"lost").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proxy.dropped_bytes() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy did not read the bytes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.set(Fault::Down);
    let r = closed(&mut s).await;
    assert!(
        matches!(&r, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
}

#[tokio::test]
async fn latency_delays_chunks_in_parallel() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    let d = Duration::from_millis(100);
    proxy.set(Fault::Latency(d));
    let started = tokio::time::Instant::now();
    assert_eq!(roundtrip(&mut s).await.unwrap(), b"ping");
    assert!(started.elapsed() >= 2 * d, "{:?}", started.elapsed());
    // Ten pings in flight at once take about one round trip, not ten.
    let started = tokio::time::Instant::now();
    for _ in 0..10 {
        s.write_all(b"ping").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut back = [0u8; 40];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back[..], b"ping".repeat(10).as_slice());
    let took = started.elapsed();
    assert!(took >= 2 * d, "{took:?}");
    assert!(took < 10 * d, "chunks delayed one after another: {took:?}");
}
