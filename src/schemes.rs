//! The scheme table: which backend serves a URL's scheme. Each backend crate
//! declares its schemes and its connect ([`BackendSchemes`]); the table is
//! those of the crates this build compiles in (by cargo feature), then the
//! backends of other crates registered at run time ([`register_backend`]).

use std::sync::RwLock;

use lockkit_core::LockError;
use lockkit_core::raw::{BackendSchemes, Connector, is_scheme};

/// One backend crate of lockkit's, by the cargo feature of this crate that
/// compiles it in.
struct BuiltIn {
    feature: &'static str,
    /// The schemes it serves, when compiled in.
    schemes: Option<BackendSchemes>,
    /// Its schemes as this crate knows them without it: only to name the
    /// feature to turn on (the crate's own list is the one served; a test
    /// checks that the two agree).
    names: &'static [&'static str],
}

/// Every backend crate lockkit ships.
const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        feature: "(always on)",
        schemes: Some(lockkit_core::memory::SCHEMES),
        names: &["memory"],
    },
    BuiltIn {
        feature: "sqlite",
        #[cfg(feature = "sqlite")]
        schemes: Some(lockkit_sql::SQLITE_SCHEMES),
        #[cfg(not(feature = "sqlite"))]
        schemes: None,
        names: &["sqlite"],
    },
    BuiltIn {
        feature: "redis",
        #[cfg(feature = "redis")]
        schemes: Some(lockkit_redis::SCHEMES),
        #[cfg(not(feature = "redis"))]
        schemes: None,
        names: &[
            "redis",
            "rediss",
            "redis+sentinel",
            "rediss+sentinel",
            "redis+cluster",
            "rediss+cluster",
            "redlock",
        ],
    },
    BuiltIn {
        feature: "mysql",
        #[cfg(feature = "mysql")]
        schemes: Some(crate::sql_modes::MYSQL),
        #[cfg(not(feature = "mysql"))]
        schemes: None,
        names: &["mysql", "mariadb"],
    },
    BuiltIn {
        feature: "postgres",
        #[cfg(feature = "postgres")]
        schemes: Some(crate::sql_modes::POSTGRES),
        #[cfg(not(feature = "postgres"))]
        schemes: None,
        names: &["postgres", "postgresql"],
    },
    BuiltIn {
        feature: "zookeeper",
        #[cfg(feature = "zookeeper")]
        schemes: Some(lockkit_zk::SCHEMES),
        #[cfg(not(feature = "zookeeper"))]
        schemes: None,
        names: &["zk", "zookeeper"],
    },
];

/// Backends of other crates, by scheme.
static REGISTERED: RwLock<Vec<(&'static str, Connector)>> = RwLock::new(Vec::new());

/// The lockkit backend whose scheme `scheme` is (lowercase), compiled in
/// or not.
fn built_in(scheme: &str) -> Option<&'static BuiltIn> {
    BUILT_IN.iter().find(|b| b.names.contains(&scheme))
}

/// How to connect to a URL of `scheme` (lowercase).
///
/// Errors: [`LockError::FeatureDisabled`] for a backend of lockkit's this
/// build leaves out, [`LockError::InvalidConfig`] for a scheme nobody serves.
pub(crate) fn connector(scheme: &str) -> Result<Connector, LockError> {
    if let Some(b) = built_in(scheme) {
        return match b.schemes {
            Some(s) => Ok(s.connect),
            None => Err(LockError::FeatureDisabled {
                scheme: scheme.to_owned(),
                feature: b.feature,
            }),
        };
    }
    // The read guard ends before `known` reads the table again: a second
    // read while a registration waits for the first would wait forever.
    let found = {
        let table = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(scheme))
            .map(|(_, connect)| *connect)
    };
    match found {
        Some(connect) => Ok(connect),
        None => Err(LockError::config(
            "url scheme",
            format!("unknown scheme {scheme:?}; lockkit knows {}", known().join(", ")),
        )),
    }
}

/// Every scheme this build serves, for messages.
fn known() -> Vec<&'static str> {
    let built_in = BUILT_IN
        .iter()
        .filter_map(|b| b.schemes)
        .flat_map(|s| s.names.iter().copied());
    let table = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    built_in.chain(table.iter().map(|(name, _)| *name)).collect()
}

/// Registers a backend of another crate for the schemes it declares, so
/// that `lockkit::connect("SCHEME://…")` (and the CLI, and the config file)
/// reach it like a built-in one. Call it once at start-up, before the
/// first connect. Fails, registering none of them, when a scheme is not a
/// URL scheme, is one of lockkit's own (compiled in or not), or another
/// crate registered it already.
///
/// ```
/// use std::sync::Arc;
/// use lockkit::raw::BackendSchemes;
/// use lockkit::{memory::MemoryBackend, register_backend};
/// use lockkit::raw::LockBackend;
///
/// const INPROC: BackendSchemes = BackendSchemes {
///     names: &["inproc"],
///     connect: |url| Box::pin(async move { Ok(Arc::new(MemoryBackend::from_url(&url.url)?) as Arc<dyn LockBackend>) }),
/// };
/// register_backend(INPROC).unwrap();
/// assert!(register_backend(INPROC).is_err(), "registered already");
/// ```
pub fn register_backend(schemes: BackendSchemes) -> Result<(), LockError> {
    let mut table = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for (i, &scheme) in schemes.names.iter().enumerate() {
        if !is_scheme(scheme) {
            return Err(LockError::config("scheme", format!("{scheme:?} is not a URL scheme")));
        }
        let lower = scheme.to_ascii_lowercase();
        let taken = table.iter().any(|(name, _)| name.eq_ignore_ascii_case(scheme))
            || schemes.names[..i].iter().any(|n| n.eq_ignore_ascii_case(scheme));
        if taken || built_in(&lower).is_some() {
            return Err(LockError::config("scheme", format!("{scheme:?} is taken")));
        }
    }
    table.extend(schemes.names.iter().map(|&name| (name, schemes.connect)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names this crate keeps for a backend left out are the ones the
    /// backend crate serves (checked for the crates this build has).
    #[test]
    fn each_backends_names_are_the_ones_its_crate_declares() {
        for b in BUILT_IN {
            if let Some(s) = b.schemes {
                assert_eq!(s.names, b.names, "feature {}", b.feature);
            }
        }
        let mut all: Vec<_> = BUILT_IN.iter().flat_map(|b| b.names).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a scheme served twice");
    }

    /// The error for an unknown scheme lists the known ones while
    /// registrations run: it must not read the table twice at once (a
    /// registration queued between the two reads waits for the first, the
    /// second for the registration — the hang seen when the facade's unit
    /// tests ran beside each other on a loaded machine).
    #[test]
    fn an_unknown_scheme_beside_registrations_does_not_hang() {
        const PROBE: BackendSchemes = BackendSchemes {
            names: &["hang-probe"],
            connect: |_| Box::pin(async { Err(LockError::config("url scheme", "never connected")) }),
        };
        let _ = register_backend(PROBE);
        let (done, finished) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let done = done.clone();
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    assert!(connector("no-such-scheme").is_err());
                    // Taken already: refused, but under the write lock.
                    assert!(register_backend(PROBE).is_err());
                }
                let _ = done.send(());
            });
        }
        for _ in 0..2 {
            finished
                .recv_timeout(std::time::Duration::from_secs(120))
                .expect("connector and register_backend hung on the scheme table");
        }
    }

    #[test]
    fn unknown_and_left_out_schemes_are_typed_errors() {
        let unknown = connector("ftp").expect_err("nobody serves ftp");
        assert!(
            matches!(&unknown, LockError::InvalidConfig { part, reason } if part == "url scheme" && reason.contains("memory")),
            "{unknown:?}"
        );
        #[cfg(not(feature = "zookeeper"))]
        assert!(matches!(
            connector("zk"),
            Err(LockError::FeatureDisabled {
                feature: "zookeeper",
                ..
            })
        ));
        #[cfg(feature = "zookeeper")]
        assert!(connector("zookeeper").is_ok());
    }
}
