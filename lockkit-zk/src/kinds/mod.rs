//! Semaphores and read-write locks: acquiring a permit or a read or write
//! hold (`acquire`, with its watches in `arm` and the writes of a grant in
//! `grant`), the holds once granted (`hold`), the line's rules that both
//! follow (`line`), and a contender's next step on it (`plan`).

mod acquire;
mod arm;
mod grant;
mod hold;
mod line;
mod plan;
