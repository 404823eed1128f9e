//! What the layout room reads and writes: startup traces of one binary, as
//! lists of the symbols each run used, and the order a strategy makes of them.
//! Plain serde structs, so the CLI can fill them from the profile database
//! (function-level traces) or from page-level traces.

use serde::{Deserialize, Serialize};

/// Code or data: each gets its own list in an [`Order`], because linkers
/// place them in different output sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Function,
    Data,
}

/// One symbol a traced start used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedSymbol {
    /// The name as the binary's symbol table spells it (mangled).
    pub raw_name: String,
    pub kind: Kind,
    /// When the run first used it: any number that grows with time (a
    /// sequence number, a timestamp, a rank). Only the order matters.
    pub first_seq: u64,
    /// Calls during the start; `None` when the trace cannot count them
    /// (page-level traces see a page once, not each call).
    pub calls: Option<u64>,
    /// Bytes in the binary.
    pub size: u64,
}

/// The symbols one run of the program used during its start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    pub symbols: Vec<TracedSymbol>,
}

impl Trace {
    pub fn new(symbols: Vec<TracedSymbol>) -> Trace {
        Trace { symbols }
    }
}

/// Symbols in the order to lay them out: functions first, then data, each
/// list in the order its strategy chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub strategy: crate::Strategy,
    /// Traces the order was made from.
    pub traces: usize,
    pub entries: Vec<OrderEntry>,
    /// Things the user should know about how the order was made (say, a
    /// strategy falling back for symbols without call counts).
    pub warnings: Vec<String>,
}

impl Order {
    /// The functions, in order.
    pub fn functions(&self) -> impl Iterator<Item = &OrderEntry> + '_ {
        self.entries.iter().filter(|e| e.kind == Kind::Function)
    }

    /// The data symbols, in order.
    pub fn data(&self) -> impl Iterator<Item = &OrderEntry> + '_ {
        self.entries.iter().filter(|e| e.kind == Kind::Data)
    }

    /// Bytes of every symbol in the order: all that the traces used.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

/// One symbol of an [`Order`], with what the traces said about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEntry {
    pub raw_name: String,
    pub kind: Kind,
    /// The largest size any trace gave.
    pub size: u64,
    /// Traces that used it.
    pub used_by: usize,
    /// Median over all traces of its rank among the symbols of its kind in
    /// each trace (0 = used first); a trace that did not use it counts its
    /// symbol count, i.e. "after everything it used".
    pub median_rank: u64,
    /// Calls summed over the traces that count calls; `None` when none did.
    pub calls: Option<u64>,
}
