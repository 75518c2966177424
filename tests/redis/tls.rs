//! TLS (`rediss://`) and mutual TLS against a private Redis server with a
//! test CA made by `openssl`.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lockkit::{LockError, LockOptions};
use redis::Server;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate.
fn certificates(dir: &Path) -> PathBuf {
    let dir = dir.join("tls");
    std::fs::create_dir_all(&dir).expect("dir");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=lockkit test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ];
    ca.extend(ec);
    openssl(&dir, &ca);
    for (who, ext) in [
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let (key, csr, pem, extfile) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.pem"),
            format!("{who}.ext"),
        );
        std::fs::write(dir.join(&extfile), ext).expect("ext file");
        let mut req = vec!["req", "-subj", "/CN=lockkit-test", "-keyout", &key, "-out", &csr];
        req.extend(ec);
        openssl(&dir, &req);
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &extfile,
                "-out",
                &pem,
            ],
        );
    }
    dir
}

fn openssl_available(test: &str) -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if lockkit_core::testkit::services_required() {
            panic!("{test}: openssl is not installed and LOCKKIT_REQUIRE_SERVICES=1");
        }
        eprintln!("skipped {test}: openssl is not installed");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_tls_and_mutual_tls() {
    let test = "locks_over_tls_and_mutual_tls";
    if !redis::available(test) || !openssl_available(test) {
        return;
    }
    let certs = certificates(&std::env::temp_dir().join(format!("lockkit-tls-{}", std::process::id())));
    let file = |f: &str| certs.join(f).display().to_string();
    let (tls_port, mtls_port) = (redis::free_port(), redis::free_port());
    let tls_args = |port: u16, auth: &'static str| {
        vec![
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".into(),
            file("server.pem"),
            "--tls-key-file".into(),
            file("server.key"),
            "--tls-ca-cert-file".into(),
            file("ca.pem"),
            "--tls-auth-clients".into(),
            auth.into(),
        ]
    };
    let args = tls_args(tls_port, "no");
    let server = Server::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let margs = tls_args(mtls_port, "yes");
    let mserver = Server::start_with(&margs.iter().map(String::as_str).collect::<Vec<_>>());

    // Verified against the test CA.
    let url = format!("rediss://127.0.0.1:{tls_port}?tls_ca={}", file("ca.pem"));
    let (a, b) = (
        lockkit::connect(&url).await.expect("connect over TLS"),
        lockkit::connect(&url).await.expect("connect"),
    );
    let opts = LockOptions::new().ttl(Duration::from_secs(30));
    let g = a.lock_with("tls", &opts).await.expect("lock over TLS");
    assert!(b.try_lock("tls").await.expect("try_lock").is_none());
    // A waiter is woken by the release over a TLS pub/sub connection.
    let waiter = tokio::spawn({
        let b = b.clone();
        let opts = opts.clone();
        async move { b.lock_with("tls", &opts).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.unlock().await.expect("unlock");
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken promptly")
        .expect("task")
        .expect("lock");
    gb.unlock().await.expect("unlock");
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "1", "only the fencing counter is left");

    // Without the CA the server's certificate is refused; #insecure skips the check.
    let e = lockkit::connect(&format!("rediss://127.0.0.1:{tls_port}?connect_timeout=2s"))
        .await
        .expect_err("an unknown CA is refused");
    assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
    let insecure = lockkit::connect(&format!("rediss://127.0.0.1:{tls_port}#insecure"))
        .await
        .expect("insecure");
    insecure
        .lock("tls")
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    // Plain text to a TLS port does not work either.
    assert!(
        lockkit::connect(&format!("redis://127.0.0.1:{tls_port}?connect_timeout=2s"))
            .await
            .is_err()
    );

    // Mutual TLS: the server wants a client certificate.
    let murl = format!("rediss://127.0.0.1:{mtls_port}?tls_ca={}", file("ca.pem"));
    let e = lockkit::connect(&format!("{murl}&connect_timeout=2s"))
        .await
        .expect_err("no client certificate");
    assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
    let with_cert = format!("{murl}&tls_cert={}&tls_key={}", file("client.pem"), file("client.key"));
    let m = lockkit::connect(&with_cert)
        .await
        .expect("connect with a client certificate");
    m.lock("mtls").await.expect("lock").unlock().await.expect("unlock");
    let e = lockkit::connect(&format!("{murl}&tls_cert=/nonexistent.pem&tls_key=/nonexistent.key"))
        .await
        .expect_err("missing files");
    assert!(
        matches!(e, LockError::InvalidConfig { ref part, .. } if part == "query parameter tls_cert"),
        "{e:?}"
    );
    drop(mserver);
    let _ = std::fs::remove_dir_all(certs.parent().expect("dir"));
}
