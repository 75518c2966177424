//! How locks map onto znodes: the per-name parent, the contenders' child
//! nodes, and the data a child carries.
//!
//! ```text
//! <chroot>/lock-<encoded name>                      container node, one per name
//! <chroot>/lock-<encoded name>/<owner tag>-<attempt>-<sequence>
//!                                                   ephemeral-sequential child, one per contender
//! ```
//!
//! A name is percent-encoded into a single path segment: ASCII letters and
//! digits and `-_:@+=,~` stay as they are, every other byte becomes `%XX`, so
//! `/`, `.`, `..`, NUL and characters ZooKeeper refuses never reach a path,
//! and [`decode_name`] gives the exact name back. The `lock-` prefix keeps a
//! lock called `zookeeper` away from the reserved `/zookeeper` node when the
//! chroot is `/`.
//!
//! A child's name starts with a tag of its owner id (a stable 64-bit hash),
//! so a contender sees from one listing whether the holder may be its own
//! owner (re-entry) without reading every node; the data decides. Then comes
//! the attempt id of the `lock`/`try_lock` call, so a create whose answer was
//! lost with the connection can be found again by listing the parent.
//!
//! ```text
//! <chroot>/lock-<encoded name>/share-<owner tag>-<session id>
//!                                                   ephemeral, one per session sharing a hold
//! ```
//!
//! Every kind of lock of a name queues under that one parent — a name is
//! one lock whatever the kind — and semaphores' and read-write locks'
//! contenders mark their kind after the attempt id ([`Mark`]). One line
//! in sequence order across kinds decides ([`admits`]):
//!
//! ```text
//! <chroot>/lock-<encoded name>/<owner tag>-<attempt>-p<permits>-<sequence>   a permit (or its waiter)
//! <chroot>/lock-<encoded name>/<owner tag>-<attempt>-r-<sequence>            a reader
//! <chroot>/lock-<encoded name>/<owner tag>-<attempt>-w-<sequence>            a writer
//! <chroot>/rwlock-<encoded name>         persistent node without children: its data is the
//!                                        read-write lock's last write token
//! ```
//!
//! The write record lives apart from the parent because the parent is a
//! container the server deletes once its last child goes, and readers
//! must carry the last write token also after that.
//!
//! Lockkit versions that queued semaphores and read-write locks under
//! parents of their own (`semaphore-<name>`, and the children of
//! `rwlock-<name>`) do not see these lines: their semaphores and
//! read-write locks are other locks than these, and their mutexes skip
//! marked contenders in the name's parent. Nothing in the layout refuses
//! the mix, so while such a version runs against the same chroot, a name
//! it uses as anything but a mutex must not be used by this one. Mutexes
//! alone queue as before and interoperate.
//!
//! A *share node* carries one session's share of a hold whose contender
//! node belongs to another session (a process with the same owner id): it
//! is not in the queue, but the hold stands while it exists.
//!
//! A node's data names its owner and the attempt ids of the shares it
//! carries (its part of the hold count is their number); a share node also
//! carries the hold's token.

use std::fmt::Write as _;

use lockkit_core::LockKind;
use lockkit_core::raw::is_attempt_id;

/// The prefix of every lock's parent node.
const PARENT_PREFIX: &str = "lock-";
/// The prefix of every read-write lock's write record (see
/// [`write_record_path`]).
const RWLOCK_PREFIX: &str = "rwlock-";

/// The version tag of the node data format.
const DATA_VERSION: &str = "lockkit/2";

/// Bytes that stay as they are in an encoded name.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_:@+=,~".contains(&b)
}

/// The parent node's path segment for a lock name: `lock-` and the name,
/// percent-encoded.
pub fn encode_name(name: &str) -> String {
    encode_with(PARENT_PREFIX, name)
}

/// `prefix` and `name`, percent-encoded.
fn encode_with(prefix: &str, name: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + name.len());
    out.push_str(prefix);
    for &b in name.as_bytes() {
        if is_plain(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The lock name of a parent node's path segment, if it is one of ours.
pub fn decode_name(segment: &str) -> Option<String> {
    let rest = segment.strip_prefix(PARENT_PREFIX)?;
    let mut bytes = Vec::with_capacity(rest.len());
    let mut it = rest.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hi = hex_digit(it.next()?)?;
            let lo = hex_digit(it.next()?)?;
            bytes.push(hi << 4 | lo);
        } else if is_plain(b) {
            bytes.push(b);
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// The path of the parent node of `name`, relative to the chroot.
pub fn parent_path(name: &str) -> String {
    format!("/{}", encode_name(name))
}

/// The path of the read-write lock's last write token for the name whose
/// parent is `parent` (see [`parent_path`]): a persistent node of its own,
/// beside the parent.
pub fn write_record_path(parent: &str) -> String {
    let segment = parent.trim_start_matches('/');
    let encoded = segment.strip_prefix(PARENT_PREFIX).unwrap_or(segment);
    format!("/{RWLOCK_PREFIX}{encoded}")
}

/// What a contender node asks for, in its name after the attempt id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A mutex contender (no mark: the names of earlier lockkit versions).
    Mutex,
    /// A permit of a semaphore of this many permits.
    Permit(u32),
    /// A reader of a read-write lock.
    Read,
    /// A writer of a read-write lock.
    Write,
}

impl Mark {
    /// The mark of a request of `kind`.
    pub fn of(kind: LockKind) -> Mark {
        match kind {
            LockKind::Permit { permits } => Mark::Permit(permits),
            LockKind::Read => Mark::Read,
            LockKind::Write => Mark::Write,
            _ => Mark::Mutex,
        }
    }

    /// What comes between the attempt id and the sequence number.
    fn infix(self) -> String {
        match self {
            Mark::Mutex => String::new(),
            Mark::Permit(n) => format!("p{n}-"),
            Mark::Read => "r-".to_owned(),
            Mark::Write => "w-".to_owned(),
        }
    }

    /// The mark and the sequence number of the end of a child's name.
    fn split(rest: &str) -> Option<(Mark, &str)> {
        let Some((mark, seq)) = rest.split_once('-') else {
            return Some((Mark::Mutex, rest));
        };
        let mark = match mark {
            "r" => Mark::Read,
            "w" => Mark::Write,
            _ => Mark::Permit(mark.strip_prefix('p')?.parse().ok()?),
        };
        Some((mark, seq))
    }

    /// The kind of lock a contender of this mark asks for.
    pub fn kind(self) -> LockKind {
        match self {
            Mark::Mutex => LockKind::Mutex,
            Mark::Permit(permits) => LockKind::Permit { permits },
            Mark::Read => LockKind::Read,
            Mark::Write => LockKind::Write,
        }
    }

    /// Whether `other` is a contender of the same kind of lock (a reader
    /// and a writer are: they share the read-write lock).
    pub fn same_space(self, other: Mark) -> bool {
        match self {
            Mark::Mutex => other == Mark::Mutex,
            Mark::Permit(_) => matches!(other, Mark::Permit(_)),
            Mark::Read | Mark::Write => matches!(other, Mark::Read | Mark::Write),
        }
    }
}

/// A stable tag of an owner id for child names: FNV-1a, 64 bits. Stable
/// across processes and Rust versions (unlike `DefaultHasher`), since
/// processes sharing an owner id must compute the same tag.
pub fn owner_tag(owner: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in owner.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The path to create (ZooKeeper appends the sequence number) for one
/// contender's attempt (its attempt id, as lockkit-core makes it) of the
/// kind `mark`.
pub fn child_prefix(parent: &str, owner_tag: u64, attempt: &str, mark: Mark) -> String {
    format!("{parent}/{}{}", child_stem(owner_tag, attempt), mark.infix())
}

/// The part of a child's name before its sequence number.
pub fn child_stem(owner_tag: u64, attempt: &str) -> String {
    format!("{owner_tag:016x}-{attempt}-")
}

/// One contender, parsed from its child node's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The child's name (last path segment).
    pub name: String,
    /// Its owner's tag.
    pub owner_tag: u64,
    /// Its sequence number: the queue order.
    pub seq: i64,
    /// What it asks for.
    pub mark: Mark,
}

impl Child {
    /// Parses a child name; `None` for nodes that are not lockkit contenders.
    pub fn parse(name: &str) -> Option<Child> {
        let mut parts = name.splitn(3, '-');
        let (tag, attempt, rest) = (parts.next()?, parts.next()?, parts.next()?);
        let (mark, seq) = Mark::split(rest)?;
        if tag.len() != 16 || attempt.len() != 16 || seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        u64::from_str_radix(attempt, 16).ok()?;
        Some(Child {
            name: name.to_owned(),
            owner_tag: u64::from_str_radix(tag, 16).ok()?,
            seq: seq.parse().ok()?,
            mark,
        })
    }

    /// The child's path under `parent`.
    pub fn path(&self, parent: &str) -> String {
        format!("{parent}/{}", self.name)
    }
}

/// The contenders among a parent's children, every kind, in queue order.
pub fn queue(children: &[String]) -> Vec<Child> {
    let mut queue: Vec<Child> = children.iter().filter_map(|c| Child::parse(c)).collect();
    queue.sort_by_key(|c| c.seq);
    queue
}

/// Whether a contender asking for `mark` at `i` of a line, behind the
/// contenders asking for `ahead`, comes to hold by the line's rule, from
/// the names alone: a mutex or a writer when first; a permit of N when
/// only permits come before it, fewer than N; a reader when only readers
/// come before it. What the names do not show — share nodes of a mutex's
/// hold that keep everyone out, a reader granted beside its owner's write
/// hold, a writer waiting for such a reader — the callers that know it add
/// (see `kinds::line`).
pub fn admits(mark: Mark, i: usize, mut ahead: impl Iterator<Item = Mark>) -> bool {
    match mark {
        Mark::Mutex | Mark::Write => i == 0,
        Mark::Permit(n) => i < n as usize && ahead.all(|m| matches!(m, Mark::Permit(_))),
        Mark::Read => ahead.all(|m| m == Mark::Read),
    }
}

/// The prefix of share nodes' names. Not a contender's name: [`Child::parse`]
/// (and so [`queue`]) skips them.
const SHARE_PREFIX: &str = "share-";

/// The name of the share node of the session `session` of an owner with
/// tag `owner_tag`: one per session and hold, so that the server itself
/// refuses a second one.
pub fn share_name(owner_tag: u64, session: i64) -> String {
    format!("{SHARE_PREFIX}{owner_tag:016x}-{session:016x}")
}

/// One share node, parsed from its name: a session's share of a hold that
/// another session's node carries too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The node's name (last path segment).
    pub name: String,
    /// Its owner's tag.
    pub owner_tag: u64,
}

impl Share {
    /// Parses a share node's name; `None` for any other node.
    pub fn parse(name: &str) -> Option<Share> {
        let rest = name.strip_prefix(SHARE_PREFIX)?;
        let (tag, session) = rest.split_once('-')?;
        if tag.len() != 16 || session.len() != 16 || !session.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Share {
            name: name.to_owned(),
            owner_tag: u64::from_str_radix(tag, 16).ok()?,
        })
    }

    /// The node's path under `parent`.
    pub fn path(&self, parent: &str) -> String {
        format!("{parent}/{}", self.name)
    }
}

/// The share nodes among a parent's children, in name order.
pub fn shares(children: &[String]) -> Vec<Share> {
    let mut shares: Vec<Share> = children.iter().filter_map(|c| Share::parse(c)).collect();
    shares.sort_by(|a, b| a.name.cmp(&b.name));
    shares
}

/// The prefix of a read-write lock's *beside markers*: one ephemeral node
/// `beside-<reader node name>` per reader granted beside its owner's write
/// hold, made in the same `multi` that records the write token in the
/// reader's data. Not a contender's name ([`Child::parse`] skips it), so a
/// listing alone says which readers hold beside a writer: a writer that
/// comes first reads no other node to know whom it waits for.
const BESIDE_PREFIX: &str = "beside-";

/// The name of the beside marker of the reader node `reader`.
pub fn beside_name(reader: &str) -> String {
    format!("{BESIDE_PREFIX}{reader}")
}

/// The reader nodes that beside markers among `children` name.
pub fn besides(children: &[String]) -> Vec<&str> {
    children.iter().filter_map(|c| c.strip_prefix(BESIDE_PREFIX)).collect()
}

/// What a lock node holds: its owner, one attempt id per share of the hold
/// it carries (the node's part of the hold count is their number), and on a
/// share node the hold's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeData {
    /// The owner id.
    pub owner: String,
    /// The hold's fencing token, on a share node (a contender node's token
    /// is its own creation zxid: `None`).
    pub token: Option<i64>,
    /// The attempt ids of the acquisitions whose shares this node carries,
    /// oldest first; never empty.
    pub attempts: Vec<String>,
}

impl NodeData {
    /// The data of a contender node that `owner` holds with one attempt.
    pub fn contender(owner: &str, attempt: &str) -> Self {
        NodeData {
            owner: owner.to_owned(),
            token: None,
            attempts: vec![attempt.to_owned()],
        }
    }

    /// How many shares of the hold this node carries.
    pub fn count(&self) -> u32 {
        u32::try_from(self.attempts.len()).unwrap_or(u32::MAX)
    }

    /// Whether this node carries `attempt`'s share.
    pub fn has(&self, attempt: &str) -> bool {
        self.attempts.iter().any(|a| a == attempt)
    }

    /// The fencing token of the hold this node is part of, given the node's
    /// creation zxid.
    pub fn hold_token(&self, czxid: i64) -> i64 {
        self.token.unwrap_or(czxid)
    }

    /// The node data as stored.
    pub fn encode(&self) -> Vec<u8> {
        let token = self.token.map_or_else(|| "-".to_owned(), |t| t.to_string());
        format!("{DATA_VERSION}\n{token}\n{}\n{}", self.attempts.join(" "), self.owner).into_bytes()
    }

    /// Parses node data; `None` if it is not lockkit's (or of an older
    /// lockkit, whose nodes carried a bare count).
    pub fn decode(data: &[u8]) -> Option<NodeData> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.splitn(4, '\n');
        if lines.next()? != DATA_VERSION {
            return None;
        }
        let token = match lines.next()? {
            "-" => None,
            t => Some(t.parse().ok()?),
        };
        let attempts: Vec<String> = lines.next()?.split(' ').map(str::to_owned).collect();
        if !attempts.iter().all(|a| is_attempt_id(a)) {
            return None;
        }
        let owner = lines.next()?.to_owned();
        (!owner.is_empty()).then_some(NodeData { owner, token, attempts })
    }
}

/// The last write token in a read-write lock parent's data (0: never
/// written).
pub fn parse_last_write(data: &[u8]) -> i64 {
    std::str::from_utf8(data).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The last segment of a node's path.
pub(crate) fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_into_one_valid_segment() {
        let names = [
            "a",
            "order:42",
            "a/b/c",
            "/leading",
            ".",
            "..",
            "nul\0byte",
            "ünïcødé 锁 🔒",
            "%2F",
            "zookeeper",
            "space and\ttab\nnewline",
            &"锁".repeat(85),
            &"\u{ffff}\u{d7ff}\u{e000}".repeat(20),
        ];
        for name in names {
            let seg = encode_name(name);
            assert!(seg.starts_with("lock-"), "{seg}");
            assert!(seg.bytes().all(|b| b.is_ascii_graphic() && b != b'/'), "{seg}");
            assert!(seg != "." && seg != "..");
            assert_eq!(decode_name(&seg).as_deref(), Some(name));
        }
        assert_eq!(encode_name("order:42"), "lock-order:42");
        assert_eq!(encode_name("a/b"), "lock-a%2Fb");
        assert_eq!(encode_name(".."), "lock-%2E%2E");
        assert_ne!(encode_name("a"), encode_name("A"));
        assert_eq!(decode_name("other"), None);
        assert_eq!(decode_name("lock-%2"), None);
        assert_eq!(decode_name("lock-%FF"), None, "not UTF-8");
        assert_eq!(decode_name("lock-a.b"), None, "not an encoding we produce");
    }

    #[test]
    fn children_sort_by_sequence_and_skip_strangers() {
        let tag = owner_tag("me");
        let a = format!("{}0000000010", child_stem(tag, "0000000000000001"));
        let b = format!("{}0000000002", child_stem(7, "0000000000000002"));
        let c = format!("{}2147483648", child_stem(7, "0000000000000003"));
        let children = vec![a.clone(), "garbage".into(), c.clone(), b.clone(), "x-y-1".into()];
        let q = queue(&children);
        let names: Vec<&str> = q.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [b.as_str(), a.as_str(), c.as_str()]);
        assert_eq!(q[1].owner_tag, tag);
        assert_eq!(q[2].seq, 2_147_483_648);
        assert_eq!(q[0].path("/lock-x"), format!("/lock-x/{b}"));
    }

    #[test]
    fn share_nodes_are_not_contenders() {
        let name = share_name(owner_tag("me"), 0x1234);
        assert_eq!(name, format!("share-{:016x}-0000000000001234", owner_tag("me")));
        assert_eq!(Child::parse(&name), None);
        let children = vec![name.clone(), format!("{}0000000001", child_stem(7, "0000000000000001"))];
        assert_eq!(queue(&children).len(), 1);
        let found = shares(&children);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].name.as_str(), found[0].owner_tag),
            (name.as_str(), owner_tag("me"))
        );
        assert_eq!(Share::parse("share-x-y"), None);
        assert_eq!(found[0].path("/lock-x"), format!("/lock-x/{name}"));
    }

    #[test]
    fn beside_markers_are_not_contenders() {
        let reader = format!("{}r-0000000003", child_stem(7, "0000000000000001"));
        let marker = beside_name(&reader);
        assert_eq!(Child::parse(&marker), None);
        assert_eq!(Share::parse(&marker), None);
        let children = vec![marker, reader.clone()];
        assert_eq!(besides(&children), [reader.as_str()]);
        assert_eq!(queue(&children).len(), 1);
    }

    #[test]
    fn one_line_for_every_kind() {
        let name = |seq: i64, infix: &str| format!("{}{infix}{seq:010}", child_stem(7, &format!("{seq:016x}")));
        let children = vec![name(3, "r-"), name(1, "p2-"), name(2, ""), name(4, "w-")];
        let marks: Vec<Mark> = queue(&children).iter().map(|c| c.mark).collect();
        assert_eq!(marks, [Mark::Permit(2), Mark::Mutex, Mark::Read, Mark::Write]);
        let admitted = |marks: &[Mark]| -> Vec<bool> {
            (0..marks.len())
                .map(|i| admits(marks[i], i, marks[..i].iter().copied()))
                .collect()
        };
        assert_eq!(admitted(&marks), [true, false, false, false]);
        let (p, r) = (Mark::Permit(2), Mark::Read);
        assert_eq!(admitted(&[p, p, p]), [true, true, false]);
        assert_eq!(admitted(&[r, r, Mark::Write, r]), [true, true, false, false]);
        assert_eq!(admitted(&[r, p]), [true, false]);
        assert_eq!(write_record_path(&parent_path("a/b")), "/rwlock-a%2Fb");
    }

    #[test]
    fn owner_tags_are_stable() {
        // FNV-1a test vectors: processes built by any compiler agree.
        assert_eq!(owner_tag(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(owner_tag("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(owner_tag("trade-center-1"), owner_tag("trade-center-2"));
    }

    #[test]
    fn node_data() {
        let attempts = vec!["0123456789abcdef".to_owned(), "fedcba9876543210".to_owned()];
        let data = NodeData {
            owner: "trade center\t1".into(),
            token: None,
            attempts: attempts.clone(),
        };
        assert_eq!(NodeData::decode(&data.encode()), Some(data.clone()));
        assert_eq!(data.count(), 2);
        assert!(data.has("fedcba9876543210") && !data.has("0000000000000000"));
        assert_eq!(data.hold_token(7), 7);
        let share = NodeData {
            token: Some(42),
            ..data
        };
        assert_eq!(NodeData::decode(&share.encode()), Some(share.clone()));
        assert_eq!(share.hold_token(7), 42);
        assert_eq!(NodeData::decode(b""), None);
        assert_eq!(NodeData::decode(b"lockkit/1\n1\nme"), None, "an older lockkit's node");
        assert_eq!(NodeData::decode(b"lockkit/2\n-\n\nme"), None, "no share");
        assert_eq!(NodeData::decode(b"lockkit/2\n-\n0123456789abcdef\n"), None, "no owner");
        assert_eq!(
            NodeData::decode(b"lockkit/2\nx\n0123456789abcdef\nme"),
            None,
            "bad token"
        );
        assert_eq!(
            NodeData::decode(b"lockkit/2\n-\n0123456789ABCDEF\nme"),
            None,
            "bad attempt"
        );
        assert!(NodeData::decode(b"lockkit/2\n-\n0123456789abcdef\nme").is_some());
    }
}
