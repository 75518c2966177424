//! ZooKeeper floor: create an ephemeral node, delete it.

use async_trait::async_trait;
use lockkit::raw::ConnectUrl;
use lockkit_zk::{ZkBackend, ZkConfig};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions};

use super::cycle::Floor;
use crate::error::BenchError;

const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());

/// A session of its own, rooted at the URL's chroot.
pub struct ZkFloor {
    client: Client,
}

impl ZkFloor {
    /// Makes sure the chroot exists (by connecting the backend once), then
    /// opens a session there.
    pub async fn connect(url: &mut ConnectUrl) -> Result<Self, BenchError> {
        let config = ZkConfig::from_url(url)?;
        drop(ZkBackend::connect(config.clone()).await?);
        let chroot = if config.chroot == "/" { "" } else { &config.chroot };
        let client = Client::connect(&format!("{}{chroot}", config.connect_string())).await?;
        Ok(ZkFloor { client })
    }
}

#[async_trait]
impl Floor for ZkFloor {
    async fn cycle(&self, name: &str) -> Result<(), BenchError> {
        // Lock names have slashes; a floor node is one flat child.
        let path = format!("/floor-{}", name.replace('/', "-"));
        self.client.create(&path, b"", &EPHEMERAL).await?;
        self.client.delete(&path, None).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), BenchError> {
        self.client.check_stat("/").await?;
        Ok(())
    }
}
