//! Identifiers. All of them are plain ordered values so that control-plane state can live in
//! `BTreeMap`s and iterate deterministically.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A commit timestamp: totally orders upstream transactions. `0` means "nothing yet".
pub type Ts = u64;

/// Simulated or real monotonic time in milliseconds, as given to the state machines.
pub type Millis = u64;

macro_rules! string_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub String);
        impl $name {
            pub fn new(s: impl Into<String>) -> Self { Self(s.into()) }
            pub fn as_str(&self) -> &str { &self.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "{}", self.0) }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(&self.0) }
        }
        impl From<&str> for $name {
            fn from(s: &str) -> Self { Self(s.to_string()) }
        }
    };
}

string_id!(
    /// A node (a `sluice server` process; TiCDC calls it a capture).
    NodeId
);
string_id!(
    /// A changefeed: one replication task from the upstream to one sink.
    ChangefeedId
);

/// An upstream table. Ids are a pure function of the schema history, so every node agrees.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TableId(pub u64);

impl fmt::Debug for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}
impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The maintainer epoch: bumped with compare-and-swap in the meta store before every placement
/// of a maintainer. Every scheduling message carries it; receivers drop older epochs.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch(pub u64);

impl fmt::Debug for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// A dispatcher id: unique across maintainer generations because it embeds the epoch of the
/// maintainer that minted it. Dispatchers are still reconciled by span, never by this id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DispatcherId {
    pub epoch: u64,
    pub seq: u64,
}

impl fmt::Debug for DispatcherId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}.{}", self.epoch, self.seq)
    }
}
impl fmt::Display for DispatcherId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.epoch, self.seq)
    }
}
