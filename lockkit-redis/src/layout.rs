//! The key layout: the names of a lock's keys and channels ([`Keys`]).
//!
//! For a prefix `P` (default `lockkit:`) and a lock name `N`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{TAG}:N` | string, with the lease as its expiry | the hold: `2\|TOKEN\|COUNT\|W\|SHARES\|OWNER` — `W` is `w` once a client queued for this hold; `SHARES` one `ID:AT,` per share of the count: the attempt id of the acquisition that made it, and where that acquisition's line entry stood before the grant moved it (`1`: none; for an undo). `2\|q`: free, but clients queue (the line's head's turn) |
//! | `P{TAG}fence` | string | the fencing counter of every name with this `TAG` |
//! | `P{TAG}q:N` | sorted set | the clients (processes) waiting for `N`, by the server time (µs) they joined: oldest first |
//! | `Pnode` | hash | the restart guard's marker, when it is on: `q` the end of the quarantine set when it was written, `e` a bound of every lease end the server granted (server time, ms); see `scripts::guard` |
//! | `P{TAG}t:N` | string, expires after 10 s; gone once the name is taken | `ID\|MS`: the waiting client last told its turn on the free name, and when (server time, ms) |
//!
//! Semaphores and read-write locks keep their names apart from the mutex's
//! (and from each other's) by a family letter `F` after the tag: `s` for a
//! semaphore, `r` for a read-write lock (its read and write holds are one
//! lock). Their scripts are `lua/holds.lua` and `lua/kinds_*.lua`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{TAG}F:N` | hash; also the name's channel | its holds: a hold id `X` is a permit's token, `w` the writer, `r` + owner a reader; `o\|X` owner, `t\|X` token, `a\|X` the attempt ids of its shares (16 hex digits each, one after another), `g\|X` its grant number (for the order); `a:ID` the hold of attempt `ID`; `n` a semaphore's permit count, `lw` a read-write lock's last write token (the key then never expires: readers carry it), `g` the grant counter |
//! | `P{TAG}eF:N` | sorted set, with the last lease as its expiry | the lease end of each hold id (server time, ms): a hold whose end passed is gone, and is purged by the next script |
//! | `P{TAG}qF:N` | sorted set | the line, as the mutex's queue, by the place its entries joined: a client waiting for a permit or to read is its id, a client waiting to write is its id and `:w` (readers and writers in one line; a client waiting for both stands in it twice) |
//! | `P{TAG}tF:N` | hash | the entries of the line told their turn whose client has not tried since: entry -> server time (ms) told |
//!
//! Their tokens come from the same counter as the mutex's. The line lets
//! entries in by `lockkit_core::raw::admitted` (a semaphore of N: the
//! first N − held; a read-write lock: the readers before the first waiting
//! writer, or that writer alone once nobody holds). A change that lets
//! entries in (a hold that goes, a grant that leaves permits or lets
//! readers follow, a client leaving the line) tells their clients only, on
//! their own channels, and the first entry after them, which drops them
//! after the fallback delay should they not come; a client whose channel
//! has no listener left (its process died) is dropped at once.
//!
//! The leading `2` is the key layout's version. A mutex's hold was a hash
//! before (layout 1): each layout's scripts refuse the other's keys (a
//! value of another layout, or a key of another type), so two lockkit
//! versions of different layouts sharing a prefix never both grant a name
//! — the newer one reports [`LayoutError`](crate::LayoutError). A free name
//! with no key has nobody waiting for it: a plain `SET NX` takes it (with
//! the token drawn in the same script), and only a key that exists (a
//! hold, or `2|q`: a release that left clients in line hands the name to
//! them) leads to the line's rules.
//!
//! For a mutex, a release is published, with the id of the waiting client whose turn
//! it is (the queue's head), on the own channels of the head and of the
//! next in line only (`P{TAG}wID:N` for waiter `ID`, in the lock's slot):
//! the head retries at once, the next only if nobody took the lock within
//! a fallback delay — so a hand-off costs the same few commands and
//! messages however many processes wait. A release nobody queued for
//! goes to everybody on the channel named like the lock key. Fair (the default), a free name is taken only by the
//! head (or by anybody when nobody queued): a client that just released
//! queues behind the others, and the head leaves the queue when it takes
//! the lock (or goes to its back, when more of its waiters wait). A head
//! that let its turn pass — dead, or gone — is dropped by the next fair
//! attempt after the fallback delay, which then tells the new head; a head
//! (or next) whose own channel has no listener left — its process died and
//! the server closed its connection — is dropped by the release at once,
//! and the one after it told instead. A client joins the
//! queue in the same script call that finds the lock busy, and marks the
//! hold (`w`) there; a hold taken while the queue exists is marked from the
//! start. A release of an unmarked hold has nobody to tell and publishes
//! nothing (two commands instead of four).
//! `TAG` is three hex digits of the FNV-1a hash of `N` (4096 buckets), so the
//! lock key, its counter and its channel hash to one cluster slot whatever
//! `N` contains — braces, NUL, newlines, any UTF-8 are stored as they are,
//! after the tag. A fixed number of counters (instead of one per name) keeps
//! memory bounded when names are ever-new (`order:<id>`); tokens still grow
//! per name, since each name always draws from the same counter.

use lockkit_core::LockKind;

/// The byte that sets a kind's keys apart from the mutex's (`None`: the
/// mutex).
fn family(kind: LockKind) -> Option<u8> {
    match kind {
        LockKind::Mutex => None,
        LockKind::Permit { .. } => Some(b's'),
        _ => Some(b'r'),
    }
}

/// Number of hash-tag buckets, and so of fencing counters per prefix.
const TAG_BUCKETS: u32 = 4096;

/// Builds the keys of lock names under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: Vec<u8>,
}

/// FNV-1a, 32 bits. Part of the key format: changing it would let two
/// versions of lockkit hold the same name at once.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// The hash tag of a name, braces included: `{a3f}`.
    pub fn tag(name: &str) -> [u8; 5] {
        let bucket = fnv1a32(name.as_bytes()) % TAG_BUCKETS;
        let hex = |n: u32| b"0123456789abcdef"[(n & 0xf) as usize];
        [b'{', hex(bucket >> 8), hex(bucket >> 4), hex(bucket), b'}']
    }

    /// `P{TAG}:NAME`, also the name of the release channel.
    pub fn lock(&self, name: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 6 + name.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&Self::tag(name));
        k.push(b':');
        k.extend_from_slice(name.as_bytes());
        k
    }

    /// A `SCAN MATCH` pattern for the lock keys of names starting with
    /// `name_prefix` (glob characters escaped).
    pub fn scan_pattern(&self, name_prefix: &str) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.prefix.len() + name_prefix.len() + 8);
        let escape = |p: &mut Vec<u8>, bytes: &[u8]| {
            for b in bytes {
                if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                    p.push(b'\\');
                }
                p.push(*b);
            }
        };
        escape(&mut p, &self.prefix);
        p.extend_from_slice(b"{???}:");
        escape(&mut p, name_prefix.as_bytes());
        p.push(b'*');
        p
    }

    /// The name a lock key belongs to, if it is one of this prefix's lock
    /// keys and its name is UTF-8.
    pub fn name_of(&self, key: &[u8]) -> Option<String> {
        let rest = key.strip_prefix(self.prefix.as_slice())?;
        let name = rest
            .get(6..)
            .filter(|_| rest.first() == Some(&b'{') && rest.get(4..6) == Some(b"}:"))?;
        let name = String::from_utf8(name.to_vec()).ok()?;
        (self.lock(&name) == key).then_some(name)
    }

    /// `P{TAG}q:NAME`: the waiting clients.
    pub fn queue(&self, name: &str) -> Vec<u8> {
        let mut k = self.lock(name);
        k.splice(self.prefix.len() + 5..self.prefix.len() + 5, [b'q']);
        k
    }

    /// `P{TAG}t:NAME`, the waiting client last told its turn on `name`'s
    /// mutex and when (see the layout table).
    pub fn turn(&self, name: &str) -> Vec<u8> {
        let mut k = self.lock(name);
        k.splice(self.prefix.len() + 5..self.prefix.len() + 5, [b't']);
        k
    }

    /// The queue key of a lock key (see [`queue`](Self::queue)).
    pub fn queue_of_lock(&self, lock_key: &[u8]) -> Vec<u8> {
        let mut k = lock_key.to_vec();
        k.insert(self.prefix.len() + 5, b'q');
        k
    }

    /// Where a waiting client's own channel differs from the lock key: the
    /// byte after `P{TAG}` (the scripts insert `w` and the client's id
    /// there).
    pub fn waiter_mark(&self) -> usize {
        self.prefix.len() + 5
    }

    /// `P{TAG}wID:NAME`, the channel of waiting client `waiter` on the lock
    /// whose key (and broadcast channel) is `lock_key`: where a release
    /// tells that client its turn has come.
    pub fn waiter_channel(&self, lock_key: &[u8], waiter: &str) -> Vec<u8> {
        let mark = self.waiter_mark().min(lock_key.len());
        let mut c = Vec::with_capacity(lock_key.len() + 1 + waiter.len());
        c.extend_from_slice(&lock_key[..mark]);
        c.push(b'w');
        c.extend_from_slice(waiter.as_bytes());
        c.extend_from_slice(&lock_key[mark..]);
        c
    }

    /// The lock key of a channel of waiting client `waiter` (see
    /// [`waiter_channel`](Self::waiter_channel)), if it is one.
    pub fn lock_of_waiter_channel(&self, channel: &[u8], waiter: &str) -> Option<Vec<u8>> {
        let mark = self.waiter_mark();
        let end = mark + 1 + waiter.len();
        let own = channel.get(mark..end)?;
        (own[0] == b'w' && &own[1..] == waiter.as_bytes()).then(|| [&channel[..mark], &channel[end..]].concat())
    }

    /// The key of `name`'s holds of `kind`, also its broadcast channel:
    /// the lock key for the mutex, `P{TAG}s:NAME` for a semaphore,
    /// `P{TAG}r:NAME` for a read-write lock.
    pub fn holds(&self, name: &str, kind: LockKind) -> Vec<u8> {
        match family(kind) {
            Some(f) => self.marked(&self.lock(name), f),
            None => self.lock(name),
        }
    }

    /// The lease ends of the holds whose key is `holds` (semaphores and
    /// read-write locks): `P{TAG}es:NAME`, `P{TAG}er:NAME`.
    pub fn expiries(&self, holds: &[u8]) -> Vec<u8> {
        self.marked(holds, b'e')
    }

    /// The clients of the line whose holds key is `holds` that were told
    /// their turn and have not tried since: `P{TAG}tF:NAME`.
    pub fn told(&self, holds: &[u8]) -> Vec<u8> {
        self.marked(holds, b't')
    }

    /// Whether `key` is a read-write lock's holds key.
    pub fn is_rw(&self, key: &[u8]) -> bool {
        key.get(self.waiter_mark()) == Some(&b'r')
    }

    /// Whether `key` is the holds key of a semaphore or a read-write lock
    /// (not a mutex's lock key).
    pub fn is_family(&self, key: &[u8]) -> bool {
        matches!(key.get(self.waiter_mark()), Some(b's' | b'r'))
    }

    /// `key` with `mark` inserted after `P{TAG}`.
    fn marked(&self, key: &[u8], mark: u8) -> Vec<u8> {
        let mut k = key.to_vec();
        k.insert(self.waiter_mark().min(k.len()), mark);
        k
    }

    /// `Pnode`: the restart guard's marker (see `scripts::guard`); no lock
    /// key is named like it (theirs go on with a `{` after the prefix).
    pub fn marker(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"node");
        k
    }

    /// `P{TAG}fence`.
    pub fn counter(&self, name: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 10);
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&Self::tag(name));
        k.extend_from_slice(b"fence");
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_standard_one() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn key_layout_is_stable() {
        let k = Keys::new("lockkit:");
        assert_eq!(k.lock("a"), b"lockkit:{92c}:a");
        assert_eq!(k.counter("a"), b"lockkit:{92c}fence");
        assert_eq!(k.queue("a"), b"lockkit:{92c}q:a");
        assert_eq!(k.queue_of_lock(&k.lock("a")), k.queue("a"));
        assert_eq!(k.turn("a"), b"lockkit:{92c}t:a");
        assert_eq!(k.lock("foobar"), b"lockkit:{968}:foobar");
        // Braces and NUL in a name stay after the tag and change nothing.
        let odd = "x{y}z\0{";
        let key = k.lock(odd);
        assert!(key.starts_with(b"lockkit:{"));
        assert_eq!(&key[8..13], &Keys::tag(odd));
        assert!(key.ends_with(odd.as_bytes()));
        assert_eq!(Keys::new("").lock("a"), b"{92c}:a");
        assert_eq!(k.name_of(&k.lock(odd)).as_deref(), Some(odd));
        assert_eq!(k.name_of(b"lockkit:{92c}:b"), None, "wrong tag for the name");
        assert_eq!(k.name_of(&k.counter("a")), None);
        assert_eq!(k.name_of(&k.queue("a")), None);
        assert_eq!(k.name_of(&k.turn("a")), None);
        assert_eq!(k.scan_pattern("a*[b]"), b"lockkit:{???}:a\\*\\[b\\]*");
        let sem = k.holds("a", LockKind::Permit { permits: 2 });
        assert_eq!(sem, b"lockkit:{92c}s:a");
        assert_eq!(k.expiries(&sem), b"lockkit:{92c}es:a");
        assert_eq!(k.queue_of_lock(&sem), b"lockkit:{92c}qs:a");
        let rw = k.holds("a", LockKind::Read);
        assert_eq!(rw, k.holds("a", LockKind::Write));
        assert_eq!(rw, b"lockkit:{92c}r:a");
        assert_eq!(k.told(&sem), b"lockkit:{92c}ts:a");
        assert!(k.is_rw(&rw) && !k.is_rw(&sem) && !k.is_rw(&k.lock("r")));
        assert!(k.is_family(&rw) && k.is_family(&sem) && !k.is_family(&k.lock("s")));
        assert_eq!(k.holds("a", LockKind::Mutex), k.lock("a"));
        assert_eq!(k.name_of(&sem), None, "list stays with the mutex");
    }

    #[test]
    fn waiter_channels_sit_in_the_lock_slot_and_map_back() {
        let k = Keys::new("lockkit:");
        let id = "00c0ffee00c0ffee";
        let own = k.waiter_channel(&k.lock("a"), id);
        assert_eq!(own, b"lockkit:{92c}w00c0ffee00c0ffee:a");
        assert_eq!(k.lock_of_waiter_channel(&own, id), Some(k.lock("a")));
        // Another client's channel, the lock channel itself, and a name that
        // looks like a waiter channel are not this client's.
        assert_eq!(k.lock_of_waiter_channel(&own, "1111111111111111"), None);
        assert_eq!(k.lock_of_waiter_channel(&k.lock("a"), id), None);
        let lookalike = k.lock("w00c0ffee00c0ffee:a");
        assert_eq!(k.lock_of_waiter_channel(&lookalike, id), None);
        assert_eq!(k.name_of(&own), None, "a waiter channel is no lock key");
    }
}
