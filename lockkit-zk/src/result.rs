//! [`ZkResult`]: the result of a ZooKeeper request, as the crate's
//! ZooKeeper steps return it.

use zookeeper_client::Error as ZkError;

/// A ZooKeeper client result.
pub(crate) type ZkResult<T> = Result<T, ZkError>;
