//! Semaphores and read-write locks: acquiring a permit or a read or write
//! hold (`acquire`), the holds once granted (`hold`), and the line's rules
//! that both follow (`line`).

mod acquire;
mod hold;
mod line;
