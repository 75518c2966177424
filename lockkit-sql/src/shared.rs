//! Values that the backends of this process share by a key (a database and
//! table, a SQLite file), each kept weakly: the last backend that drops one
//! forgets it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Values the backends of this process share by a key, held weakly: the
/// last backend that drops one forgets it.
pub(crate) type SharedByKey<T> = OnceLock<Mutex<HashMap<String, Weak<T>>>>;

/// The value `registry` has for `key`, or a new default one, kept there.
pub(crate) fn shared_by_key<T: Default>(registry: &SharedByKey<T>, key: String) -> Arc<T> {
    let mut shared = registry
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    shared.retain(|_, w| w.strong_count() > 0);
    if let Some(v) = shared.get(&key).and_then(Weak::upgrade) {
        return v;
    }
    let v = Arc::<T>::default();
    shared.insert(key, Arc::downgrade(&v));
    v
}
