//! TLS: the address of a node over TLS, and the certificate files the URL
//! names.

use lockkit_core::LockError;
use redis::ConnectionAddr;

use crate::config::Node;
#[cfg(feature = "tls")]
use crate::config::RedisConfig;

#[cfg(feature = "tls")]
pub(super) fn tls_addr(node: &Node, insecure: bool) -> Result<ConnectionAddr, LockError> {
    // One process-wide rustls provider; keep one that is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(ConnectionAddr::TcpTls {
        host: node.host.clone(),
        port: node.port,
        insecure,
        tls_params: None,
    })
}

#[cfg(not(feature = "tls"))]
pub(super) fn tls_addr(_: &Node, _: bool) -> Result<ConnectionAddr, LockError> {
    Err(LockError::config(
        "url scheme",
        "TLS needs the `tls` cargo feature of lockkit-redis, which is not enabled",
    ))
}

/// The CA and client certificate files named in the URL, read now.
#[cfg(feature = "tls")]
pub(crate) fn tls_certificates(cfg: &RedisConfig) -> Result<Option<redis::TlsCertificates>, LockError> {
    if cfg.tls_ca.is_none() && cfg.tls_client.is_none() {
        return Ok(None);
    }
    let read = |param: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| LockError::config(format!("query parameter {param}"), format!("{}: {e}", path.display())))
    };
    Ok(Some(redis::TlsCertificates {
        root_cert: cfg.tls_ca.as_deref().map(|p| read("tls_ca", p)).transpose()?,
        client_tls: match &cfg.tls_client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read("tls_cert", cert)?,
                client_key: read("tls_key", key)?,
            }),
            None => None,
        },
    }))
}
