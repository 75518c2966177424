//! `mysql://`, `mariadb://` and `postgres://` URLs name one of two
//! backends by their `mode` parameter: the lock table (`lockkit-sql`, the
//! default) or session locks (`mode=session`, `lockkit-sql-session`). Both
//! read the same [`SqlConfig`], so the URL is parsed once, here.

use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::{BackendSchemes, ConnectUrl, LockBackend};
use lockkit_sql::{Mode, SqlBackend, SqlConfig};
use lockkit_sql_session::SessionBackend;

/// MySQL's and MariaDB's schemes, either mode.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL: BackendSchemes = BackendSchemes {
    names: lockkit_sql::MYSQL_SCHEMES.names,
    connect: |url| Box::pin(connect(url)),
};

/// Postgres's schemes, either mode.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: BackendSchemes = BackendSchemes {
    names: lockkit_sql::POSTGRES_SCHEMES.names,
    connect: |url| Box::pin(connect(url)),
};

/// Connects the backend the URL's `mode` names.
async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = SqlConfig::from_url(url)?;
    url.finish()?;
    Ok(match config.mode {
        Mode::Session => Arc::new(SessionBackend::connect(config).await?),
        _ => Arc::new(SqlBackend::connect(config).await?),
    })
}
