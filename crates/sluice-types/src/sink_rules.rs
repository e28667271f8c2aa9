//! The routing rules of a changefeed's message-queue sink (`[[sink.dispatchers]]` of the
//! changefeed TOML, TiCDC's format), as the changefeed's configuration stores them. Plain data:
//! the Kafka sink (`sluice_sink::kafka::route`) checks and applies them.

use serde::{Deserialize, Serialize};

/// One `[[sink.dispatchers]]` rule of a changefeed, as TiCDC spells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DispatchRule {
    /// `db.table` patterns with `*` (the changefeed filter's syntax).
    pub matcher: Vec<String>,
    /// A topic expression: `{schema}`, `{table}` and literal text, e.g. `cdc_{schema}_{table}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// `default`, `table`, `index-value`, `ts` or `columns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The columns of the `columns` dispatcher.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
}
