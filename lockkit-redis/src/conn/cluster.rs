//! Redis Cluster: opening the cluster client's connections, and finding
//! the primaries (for `list`).

use lockkit_core::LockError;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ConnectionInfo, ProtocolVersion, Value};

use super::client::{connect_error, connection_info};
#[cfg(feature = "tls")]
use super::tls::tls_certificates;
use crate::config::RedisConfig;
#[cfg(feature = "tls")]
use crate::config::Tls;
use crate::error::Fault;
use crate::wait::{PubSubConn, Waiters};

/// Opens the command and pub/sub connections of a cluster.
pub(super) async fn open(
    config: &RedisConfig,
    kind: &'static str,
    waiters: &Waiters,
) -> Result<ClusterConnection, LockError> {
    let (ct, rt) = (config.connect_timeout, config.response_timeout);
    let seeds = config
        .nodes
        .iter()
        .map(|n| connection_info(config, n))
        .collect::<Result<Vec<_>, _>>()?;
    let builder = |seeds: Vec<ConnectionInfo>| {
        let mut b = ClusterClientBuilder::new(seeds)
            .use_protocol(ProtocolVersion::RESP3)
            .connection_timeout(ct)
            .response_timeout(rt)
            .retries(3);
        if let Some(u) = &config.username {
            b = b.username(u);
        }
        if let Some(p) = &config.password {
            b = b.password(p);
        }
        #[cfg(feature = "tls")]
        if config.tls != Tls::Off {
            b = b.tls(if config.tls == Tls::Insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            });
            if let Ok(Some(certs)) = tls_certificates(config) {
                b = b.certs(certs);
            }
        }
        b
    };
    #[cfg(feature = "tls")]
    tls_certificates(config)?;
    let client = builder(seeds.clone()).build().map_err(|e| connect_error(kind, e))?;
    let conn = client
        .get_async_connection()
        .await
        .map_err(|e| connect_error(kind, e))?;
    let pubsub_client = builder(seeds)
        .push_sender(waiters.push_handler(0))
        .build()
        .map_err(|e| connect_error(kind, e))?;
    let pubsub = pubsub_client
        .get_async_connection()
        .await
        .map_err(|e| connect_error(kind, e))?;
    waiters.set_connections(vec![PubSubConn::Cluster(pubsub)]);
    Ok(conn)
}

/// The primaries of a cluster, from `CLUSTER SLOTS`.
pub(crate) async fn cluster_primaries(conn: &ClusterConnection) -> Result<Vec<(String, u16)>, Fault> {
    let reply = conn
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    let mut primaries = Vec::new();
    if let Value::Array(ranges) = &reply {
        for range in ranges {
            if let Value::Array(parts) = range
                && let Some(Value::Array(node)) = parts.get(2)
                && let [host, Value::Int(port), ..] = node.as_slice()
            {
                let host = match host {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => continue,
                };
                let entry = (host, u16::try_from(*port).unwrap_or(0));
                if !primaries.contains(&entry) {
                    primaries.push(entry);
                }
            }
        }
    }
    if primaries.is_empty() {
        return Err(crate::error::UnexpectedReply(format!("CLUSTER SLOTS: {reply:?}")).into());
    }
    Ok(primaries)
}
