//! The demo's shared balance: a file that accepts a write only with a fencing
//! token higher than the highest it has seen (Kleppmann's fenced storage).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The new balance was stored.
    Accepted,
    /// The token was not above the highest seen: a stale holder's write.
    Refused,
}

/// A balance and the highest token seen, in one file.
#[derive(Debug, Clone)]
pub struct FencedStore {
    path: PathBuf,
}

/// The store's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Money left.
    pub balance: u64,
    /// Highest fencing token a write carried.
    pub last_token: u64,
}

impl FencedStore {
    /// Creates (or resets) the store with `balance`.
    pub fn create(path: &Path, balance: u64) -> std::io::Result<Self> {
        let store = FencedStore { path: path.to_owned() };
        let mut f = File::create(path)?;
        write!(f, "{balance} 0")?;
        f.sync_all()?;
        Ok(store)
    }

    /// Opens an existing store.
    pub fn open(path: &Path) -> Self {
        FencedStore { path: path.to_owned() }
    }

    fn parse(text: &str) -> std::io::Result<Snapshot> {
        let mut it = text.split_whitespace().map(str::parse::<u64>);
        match (it.next(), it.next()) {
            (Some(Ok(balance)), Some(Ok(last_token))) => Ok(Snapshot { balance, last_token }),
            _ => Err(std::io::Error::other(format!("corrupt demo store: {text:?}"))),
        }
    }

    /// Reads the balance.
    pub fn read(&self) -> std::io::Result<Snapshot> {
        let f = File::open(&self.path)?;
        f.lock_shared()?;
        let mut text = String::new();
        (&f).read_to_string(&mut text)?;
        Self::parse(&text)
    }

    /// Stores `balance`, if `token` is above every token seen (a write
    /// without a token — the `--no-lock` run — is always accepted).
    /// Atomic with respect to other writers: the file is locked meanwhile.
    pub fn write(&self, balance: u64, token: Option<u64>) -> std::io::Result<WriteOutcome> {
        let mut f = OpenOptions::new().read(true).write(true).open(&self.path)?;
        f.lock()?;
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        let current = Self::parse(&text)?;
        let last_token = match token {
            Some(t) if t <= current.last_token => return Ok(WriteOutcome::Refused),
            Some(t) => t,
            None => current.last_token,
        };
        f.seek(SeekFrom::Start(0))?;
        f.set_len(0)?;
        write!(f, "{balance} {last_token}")?;
        Ok(WriteOutcome::Accepted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_stale_tokens() {
        let dir = std::env::temp_dir().join(format!("lockkit-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = FencedStore::create(&dir.join("s"), 100).unwrap();
        assert_eq!(store.write(90, Some(5)).unwrap(), WriteOutcome::Accepted);
        assert_eq!(store.write(80, Some(5)).unwrap(), WriteOutcome::Refused);
        assert_eq!(store.write(80, Some(3)).unwrap(), WriteOutcome::Refused);
        assert_eq!(
            store.read().unwrap(),
            Snapshot {
                balance: 90,
                last_token: 5
            }
        );
        assert_eq!(store.write(70, None).unwrap(), WriteOutcome::Accepted);
        assert_eq!(
            store.read().unwrap(),
            Snapshot {
                balance: 70,
                last_token: 5
            }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
