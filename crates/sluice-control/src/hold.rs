//! Hold points: switches that make a node keep a piece of work waiting at a named place. They are
//! an input of the dispatcher manager, so the simulator and the server (behind
//! `--enable-debug-holds`) switch the very same checks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HoldPoint {
    /// A span dispatcher requested by add, move or split is accepted, then does not start.
    CreateDispatcher,
    /// Dispatchers never finish closing.
    CloseDispatcher,
    /// The node does not answer a new maintainer's bootstrap request.
    BootstrapResponse,
    /// Sinks accept writes but flush acknowledgements are not taken into account.
    SinkFlush,
    /// The chosen writer of a blocking DDL does not write it.
    DdlBeforeWrite,
    /// The blocking DDL is written but the writer does not report it.
    DdlAfterWrite,
    /// Dispatchers told to pass a blocking DDL do not pass it.
    DdlBeforePass,
    /// Dispatchers passed the blocking DDL but do not report it.
    DdlAfterPass,
}

impl HoldPoint {
    pub const ALL: [HoldPoint; 8] = [
        HoldPoint::CreateDispatcher,
        HoldPoint::CloseDispatcher,
        HoldPoint::BootstrapResponse,
        HoldPoint::SinkFlush,
        HoldPoint::DdlBeforeWrite,
        HoldPoint::DdlAfterWrite,
        HoldPoint::DdlBeforePass,
        HoldPoint::DdlAfterPass,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HoldPoint::CreateDispatcher => "create_dispatcher",
            HoldPoint::CloseDispatcher => "close_dispatcher",
            HoldPoint::BootstrapResponse => "bootstrap_response",
            HoldPoint::SinkFlush => "sink_flush",
            HoldPoint::DdlBeforeWrite => "ddl_before_write",
            HoldPoint::DdlAfterWrite => "ddl_after_write",
            HoldPoint::DdlBeforePass => "ddl_before_pass",
            HoldPoint::DdlAfterPass => "ddl_after_pass",
        }
    }
}

impl fmt::Display for HoldPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HoldPoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HoldPoint::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown hold point `{s}`"))
    }
}

/// The hold points switched on for one node.
#[derive(Clone, Debug, Default)]
pub struct Holds(BTreeSet<HoldPoint>);

impl Holds {
    pub fn set(&mut self, point: HoldPoint, on: bool) {
        if on {
            self.0.insert(point);
        } else {
            self.0.remove(&point);
        }
    }
    pub fn is_on(&self, point: HoldPoint) -> bool {
        self.0.contains(&point)
    }
}
