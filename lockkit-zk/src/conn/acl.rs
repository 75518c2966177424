//! The ACLs of the nodes a session creates: open to every session without
//! credentials, [`SECURED`] with them.

use zookeeper_client::{Acl, Acls, Permission};

/// The ACL of every node a session with digest credentials creates: all
/// rights for sessions with the creator's credentials (`auth` stands for the
/// creating session's authenticated ids), read for everyone, so others can
/// list and watch the queue but not delete a lock node (DELETE on its
/// parent), change its data (WRITE) or queue under the name (CREATE).
pub(super) static SECURED: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// Open nodes without credentials, [`SECURED`] with them.
pub(super) fn acls(secured: bool) -> Acls<'static> {
    if secured {
        Acls::new(&SECURED)
    } else {
        Acls::anyone_all()
    }
}
