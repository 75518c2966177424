//! `zookeeper-client`'s own lock recipe: `Client::lock` with a Curator
//! prefix (an ephemeral sequential node under the name's directory, a
//! watch on the node before it); the lock client deletes its node when
//! dropped, in the background, which is how its docs release it.

use async_trait::async_trait;
use lockkit_zk::ZkConfig;
use zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix, OwnedLockClient};

use super::locker::{Held, Locker};
use crate::error::BenchError;

/// A session of its own, rooted at the URL's chroot.
pub struct ZkRecipePeer {
    client: Client,
}

impl ZkRecipePeer {
    /// Opens a session on the URL's servers under its chroot (made by
    /// connecting lockkit's backend once, like the floor).
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let mut parsed = lockkit::raw::ConnectUrl::parse(url)?;
        let config = ZkConfig::from_url(&mut parsed)?;
        drop(lockkit_zk::ZkBackend::connect(config.clone()).await?);
        let chroot = if config.chroot == "/" { "" } else { &config.chroot };
        let client = Client::connect(&format!("{}{chroot}", config.connect_string())).await?;
        Ok(ZkRecipePeer { client })
    }
}

struct ZkHeld(OwnedLockClient);

#[async_trait]
impl Held for ZkHeld {
    async fn release(self: Box<Self>) -> Result<(), BenchError> {
        drop(self.0);
        Ok(())
    }
}

#[async_trait]
impl Locker for ZkRecipePeer {
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError> {
        // Lock names have slashes; the recipe's directory is one flat child.
        let dir = format!("/peer-zk-{}", name.replace('/', "-"));
        let options = LockOptions::new(Acls::anyone_all())
            .with_ancestor_options(CreateMode::Persistent.with_acls(Acls::anyone_all()))?;
        let prefix = LockPrefix::new_curator(&dir, "lock-")?;
        let held = self.client.lock(prefix, b"", options).await?;
        Ok(Box::new(ZkHeld(held.into_owned())))
    }
}
