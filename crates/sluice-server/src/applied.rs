//! Reading the downstream's record of applied DDLs (`Sink::applied_ddls`) for the control plane:
//! a bootstrapping maintainer's `LoadApplied` and a starting dispatcher's `LoadFloor`.
//!
//! Each read runs in a task of its own and answers through the sink report channel, so a slow
//! downstream never stalls the shell's loop. Invariants: every read is bounded by
//! [`APPLIED_READ_TIMEOUT`] and a failure comes back as an error the state machine shows and
//! retries (never a silent wait); errors are scrubbed of secrets; an answer for a maintainer or
//! dispatcher that is gone by then is dropped by the state machine.

use crate::mask::scrub;
use crate::sinkwork::{SinkRegistry, SinkReport};
use sluice_control::io::{AppliedDdl, SchemaSnapshot};
use sluice_control::maintainer::replay::table_floor;
use sluice_control::Input;
use sluice_types::{ChangefeedId, DispatcherId, Epoch, TableId, Ts};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a read of the sink's DDL record may take before it counts as failed (and is asked
/// again by the maintainer or dispatcher that needs it).
pub const APPLIED_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The DDLs above `after` the sink at `uri` recorded for `cf`.
async fn read_applied(
    registry: &SinkRegistry,
    cf: &ChangefeedId,
    uri: &str,
    after: Ts,
) -> Result<Vec<AppliedDdl>, String> {
    let read = async {
        match registry.get(cf, uri).await {
            Ok(sink) => sink.applied_ddls(after).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let result = match tokio::time::timeout(APPLIED_READ_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "the sink did not answer within {APPLIED_READ_TIMEOUT:?}"
        )),
    };
    let result = result
        .map(|list| {
            list.into_iter()
                .map(|r| AppliedDdl {
                    commit_ts: r.commit_ts,
                    finished: r.finished,
                })
                .collect()
        })
        .map_err(|e| scrub(&e));
    if let Err(e) = &result {
        tracing::warn!(changefeed = %cf, "reading the DDLs the sink applied: {e}");
    }
    result
}

fn report(cf: ChangefeedId, id: DispatcherId, input: Input) -> SinkReport {
    SinkReport {
        input: Some(input),
        cf,
        id,
        done_rows: 0,
        done_bytes: 0,
        written_rows: 0,
        row_lags: Vec::new(),
        finished: false,
    }
}

/// A maintainer's `LoadApplied`: answered as `Input::Applied`.
pub fn spawn_load_applied(
    registry: Arc<SinkRegistry>,
    tx: mpsc::UnboundedSender<SinkReport>,
    cf: ChangefeedId,
    epoch: Epoch,
    uri: String,
    after: Ts,
) {
    tokio::spawn(async move {
        let result = read_applied(&registry, &cf, &uri, after).await;
        let id = DispatcherId {
            epoch: epoch.0,
            seq: 0,
        };
        let input = Input::Applied {
            cf: cf.clone(),
            epoch,
            result,
        };
        let _ = tx.send(report(cf, id, input));
    });
}

/// A dispatcher's `LoadFloor`: the sink's record bounded by `snapshot` (the schema history at
/// the dispatcher's start), answered as `Input::Floor`.
pub fn spawn_load_floor(
    registry: Arc<SinkRegistry>,
    tx: mpsc::UnboundedSender<SinkReport>,
    cf: ChangefeedId,
    id: DispatcherId,
    uri: String,
    snapshot: SchemaSnapshot,
    table: TableId,
) {
    tokio::spawn(async move {
        let result = read_applied(&registry, &cf, &uri, snapshot.at_ts)
            .await
            .map(|applied| table_floor(&snapshot, &applied, table));
        let input = Input::Floor {
            cf: cf.clone(),
            id,
            result,
        };
        let _ = tx.send(report(cf, id, input));
    });
}
