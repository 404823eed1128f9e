//! What `coldstart status` shows: per program, what the service does with
//! it and what its starts measured. Read from the state directory alone,
//! so it answers whether the service runs or not. docs/serve.md documents
//! every field of the JSON form.

use crate::admit::{DEFAULT_MAX_PLAN_BYTES, admit};
use crate::state::{EndedBy, Outcome, ProgramState, State, StateError};
use crate::verdict::{self, Gain};
use serde::Serialize;

/// The whole status.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub state_dir: String,
    /// Whether a `coldstart serve` holds the state directory now.
    pub running: bool,
    pub programs: Vec<ProgramStatus>,
    /// Programs whose records could not be read, with why.
    pub unreadable: Vec<String>,
}

/// One program.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramStatus {
    pub id: String,
    pub exe: String,
    /// The argument class of the starts it is for (the option names their
    /// arguments give, sorted; "" for starts without options); None for
    /// every start of the executable.
    pub class: Option<String>,
    /// "serving", "learning", "off", "stale" or "refused".
    pub state: String,
    /// Why it is off, stale or refused.
    pub why: Option<String>,
    /// Bytes the plan reads; None when the plan cannot be read.
    pub plan_bytes: Option<u64>,
    pub plan_files: Option<usize>,
    /// Where the plan came from: the file installed, or the traced starts
    /// it was learned from.
    pub plan_from: String,
    /// Starts seen, and of them served, held out, opted out, not served
    /// and learned from (traced while the program had no plan).
    pub starts_seen: usize,
    pub starts_served: usize,
    pub starts_held_out: usize,
    pub starts_opted_out: usize,
    pub starts_not_served: usize,
    pub starts_learning: usize,
    /// Starts traced to learn or refine the plan (learning ones included).
    pub starts_traced: usize,
    /// Median time to the end of a cold served / held-out start, ms.
    pub median_end_ms_served: Option<f64>,
    pub median_end_ms_held_out: Option<f64>,
    /// Median delay from the exec to the replay's first request in a cold
    /// served start, us.
    pub median_first_request_us: Option<f64>,
    /// Starts decided while their exec was under way, from what it was
    /// given, rather than once it completed.
    pub starts_decided_at_exec: usize,
    /// Served against held-out cold starts.
    pub gain: Gain,
}

/// Reads the status of the state directory `dir`.
pub fn status(dir: &std::path::Path) -> Result<Status, StateError> {
    let state = State::at(dir);
    let mut programs = Vec::new();
    let mut unreadable = Vec::new();
    for id in state.program_ids()? {
        let program = match state.program(&id) {
            Ok(program) => program,
            Err(e) => {
                unreadable.push(e.to_string());
                continue;
            }
        };
        // Refused as the service refuses it (at the default cap).
        let plan = state.plan(&id).and_then(|mut plan| {
            admit(&mut plan, DEFAULT_MAX_PLAN_BYTES)
                .map(|_| plan)
                .map_err(|problem| StateError::Invalid {
                    path: state.plan_path(&id),
                    problem,
                })
        });
        let starts = state.starts(&id).unwrap_or_else(|e| {
            unreadable.push(e.to_string());
            Vec::new()
        });
        let count = |outcome: Outcome| starts.iter().filter(|s| s.outcome == outcome).count();
        let cold_ends = |outcome: Outcome| -> Vec<f64> {
            starts
                .iter()
                .filter(|s| {
                    s.outcome == outcome
                        && s.resident_share < verdict::COLD_BELOW
                        && matches!(s.ended_by, EndedBy::Quiet | EndedBy::Exited)
                })
                .map(|s| s.end_ms)
                .collect()
        };
        // Cold starts only: a start that found most of the plan cached
        // asks first for the first extent that was not, later on.
        let first: Vec<f64> = starts
            .iter()
            .filter(|s| s.resident_share < verdict::COLD_BELOW)
            .filter_map(|s| s.first_request_us)
            .collect();
        let state_name = match (&plan, program.state) {
            (Err(_), ProgramState::Serving) => "refused".to_string(),
            (_, s) => s.as_str().to_string(),
        };
        let why = match &plan {
            Err(e) if program.state == ProgramState::Serving => Some(e.to_string()),
            _ => program.why.clone(),
        };
        programs.push(ProgramStatus {
            id,
            exe: program.exe.display().to_string(),
            class: program.class.clone(),
            state: state_name,
            why,
            plan_bytes: plan.as_ref().ok().map(|p| p.bytes()),
            plan_files: plan.as_ref().ok().map(|p| p.files.len()),
            plan_from: program.plan_from.clone(),
            starts_seen: starts.len(),
            starts_served: count(Outcome::Served),
            starts_held_out: count(Outcome::HeldOut),
            starts_opted_out: count(Outcome::OptedOut),
            starts_not_served: count(Outcome::MemoryShort) + count(Outcome::Busy),
            starts_learning: count(Outcome::Learning),
            starts_traced: starts.iter().filter(|s| s.traced).count(),
            median_end_ms_served: median(cold_ends(Outcome::Served)),
            median_end_ms_held_out: median(cold_ends(Outcome::HeldOut)),
            median_first_request_us: median(first),
            starts_decided_at_exec: starts.iter().filter(|s| s.decided_at_exec).count(),
            gain: verdict::gain(&starts),
        });
    }
    Ok(Status {
        state_dir: dir.display().to_string(),
        running: state.is_served(),
        programs,
        unreadable,
    })
}

fn median(values: Vec<f64>) -> Option<f64> {
    (!values.is_empty()).then(|| coldstart_bench::stats::median(&values))
}
