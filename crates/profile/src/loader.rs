//! The dynamic loader's phases in a profile: `loader_spans` rows written
//! with a batch and read back checked, and the run's note on what the
//! loader trace could see. One check serves both directions, so the
//! writer never stores a span the reader would refuse.

use crate::{
    Error, FileId, LoaderPhase, LoaderSpan, Profile, Result, RunId, check, damaged, file_of_run,
    resolve_file,
};
use rusqlite::types::Value;
use rusqlite::{Transaction, params};
use std::collections::HashSet;

/// A `loader_spans` row as stored, before [`checked_span`] checks it.
struct SpanRow {
    seq: i64,
    pid: i64,
    phase: String,
    object: Option<String>,
    file_id: Option<i64>,
    t_begin_ns: i64,
    t_end_ns: Option<i64>,
    base: Option<i64>,
    target: Option<i64>,
    detail: Option<String>,
    /// Read untyped: a hand-edited REAL or TEXT must be refused by row,
    /// not reported as a damaged file.
    result: Value,
    lookups: Option<i64>,
    depth: i64,
    probe_hits: Option<i64>,
}

const SPAN_COLUMNS: &str = "seq, pid, phase, object, file_id, t_begin_ns, t_end_ns, base, target,
    detail, result, lookups, depth, probe_hits";

fn span_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SpanRow> {
    Ok(SpanRow {
        seq: row.get(0)?,
        pid: row.get(1)?,
        phase: row.get(2)?,
        object: row.get(3)?,
        file_id: row.get(4)?,
        t_begin_ns: row.get(5)?,
        t_end_ns: row.get(6)?,
        base: row.get(7)?,
        target: row.get(8)?,
        detail: row.get(9)?,
        result: row.get(10)?,
        lookups: row.get(11)?,
        depth: row.get(12)?,
        probe_hits: row.get(13)?,
    })
}

/// The span a row describes, or what is wrong with it.
fn checked_span(
    row: &SpanRow,
    run_files: &HashSet<FileId>,
) -> std::result::Result<LoaderSpan, String> {
    let phase = LoaderPhase::parse(&row.phase)
        .ok_or_else(|| format!("unknown loader phase {:?}", row.phase))?;
    if let Some(end) = row.t_end_ns
        && end < row.t_begin_ns
    {
        return Err(format!(
            "t_end_ns {end} is before t_begin_ns {}",
            row.t_begin_ns
        ));
    }
    let result = match &row.result {
        Value::Null => None,
        Value::Integer(v) => Some(*v),
        Value::Real(v) => return Err(format!("result {v} is not a 64-bit integer")),
        Value::Text(v) => return Err(format!("result {v:?} is not a 64-bit integer")),
        Value::Blob(_) => return Err("result is a blob, not a 64-bit integer".into()),
    };
    Ok(LoaderSpan {
        pid: check::pid("pid", row.pid)?,
        phase,
        object: row.object.clone(),
        file_id: row
            .file_id
            .map(|id| file_of_run(id, run_files))
            .transpose()?,
        t_begin_ns: row.t_begin_ns,
        t_end_ns: row.t_end_ns,
        base: check::non_negative_opt("base", row.base)?,
        target: check::non_negative_opt("target", row.target)?,
        detail: row.detail.clone(),
        result,
        lookups: check::non_negative_opt("lookups", row.lookups)?,
        depth: check::u32_value("depth", row.depth)?,
        probe_hits: check::non_negative_opt("probe_hits", row.probe_hits)?,
    })
}

/// An optional u64 the row stores as INTEGER (see [`check::stored_u64`]).
fn stored_u64(name: &str, value: Option<u64>) -> std::result::Result<Option<i64>, String> {
    value.map(|v| check::stored_u64(name, v)).transpose()
}

/// Inserts a batch's spans after the run's earlier ones, numbered in order
/// of `t_begin_ns` (stable, so ties keep the batch's order). A negative
/// file id names one of `written` (the batch's files); every file id must
/// end up in `run_files`.
pub(crate) fn insert_spans(
    profile_path: &std::path::Path,
    tx: &Transaction<'_>,
    run: RunId,
    spans: &[LoaderSpan],
    written: &[FileId],
    run_files: &HashSet<FileId>,
) -> Result<()> {
    if spans.is_empty() {
        return Ok(());
    }
    let fail = |source| damaged(profile_path, source);
    let next_seq: i64 = tx
        .query_row(
            "SELECT coalesce(max(seq) + 1, 0) FROM loader_spans WHERE run_id = ?1",
            [run],
            |row| row.get(0),
        )
        .map_err(fail)?;
    let mut in_time_order: Vec<&LoaderSpan> = spans.iter().collect();
    in_time_order.sort_by_key(|span| span.t_begin_ns);
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO loader_spans (run_id, seq, pid, phase, object, file_id, t_begin_ns,
                t_end_ns, base, target, detail, result, lookups, depth, probe_hits)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )
        .map_err(fail)?;
    for (seq, span) in (next_seq..).zip(in_time_order) {
        let file_id = span
            .file_id
            .map(|id| resolve_file(profile_path, run, id, written, run_files))
            .transpose()?;
        let refuse = |detail: String| Error::Invalid {
            path: profile_path.to_path_buf(),
            detail: format!(
                "run {run}: loader span {} at t_begin_ns {} of task {}: {detail}",
                span.phase.as_str(),
                span.t_begin_ns,
                span.pid
            ),
        };
        let row = SpanRow {
            seq,
            pid: span.pid.into(),
            phase: span.phase.as_str().into(),
            object: span.object.clone(),
            file_id,
            t_begin_ns: span.t_begin_ns,
            t_end_ns: span.t_end_ns,
            base: stored_u64("base", span.base).map_err(refuse)?,
            target: stored_u64("target", span.target).map_err(refuse)?,
            detail: span.detail.clone(),
            result: span.result.map_or(Value::Null, Value::Integer),
            lookups: stored_u64("lookups", span.lookups).map_err(refuse)?,
            depth: span.depth.into(),
            probe_hits: stored_u64("probe_hits", span.probe_hits).map_err(refuse)?,
        };
        // What the reader would refuse is refused here, before it is stored.
        checked_span(&row, run_files).map_err(refuse)?;
        insert
            .execute(params![
                run,
                row.seq,
                row.pid,
                row.phase,
                row.object,
                row.file_id,
                row.t_begin_ns,
                row.t_end_ns,
                row.base,
                row.target,
                row.detail,
                row.result,
                row.lookups,
                row.depth,
                row.probe_hits,
            ])
            .map_err(fail)?;
    }
    Ok(())
}

impl Profile {
    /// Records what the loader trace of a run could and could not see
    /// (which debug file gave ld.so's probes, or why phases are missing).
    /// A run without it was recorded without tracing the loader.
    pub fn set_run_loader(&mut self, run: RunId, loader: &str) -> Result<()> {
        self.update_run(run, "UPDATE runs SET loader = ?2 WHERE id = ?1", &loader)
    }

    /// Records the calibrated cost of one loader probe hit, in ns, for a
    /// run whose loader was traced: what the analysis takes off each span
    /// per hit it holds.
    pub fn set_run_loader_hit_ns(&mut self, run: RunId, hit_ns: u64) -> Result<()> {
        let hit_ns = i64::try_from(hit_ns).map_err(|_| Error::Invalid {
            path: self.path.clone(),
            detail: format!("run {run}: loader_hit_ns {hit_ns} does not fit 63 bits"),
        })?;
        self.update_run(
            run,
            "UPDATE runs SET loader_hit_ns = ?2 WHERE id = ?1",
            &hit_ns,
        )
    }

    /// Runs one `UPDATE runs ... WHERE id = ?1` with `value` as ?2; a run
    /// that does not exist is an error rather than a silent no-op.
    fn update_run(&mut self, run: RunId, sql: &str, value: &dyn rusqlite::ToSql) -> Result<()> {
        let changed = self
            .conn
            .execute(sql, params![run, value])
            .map_err(|source| self.classify(source))?;
        if changed == 0 {
            return Err(Error::NoSuchRun {
                path: self.path.clone(),
                run,
                hint: String::new(),
            });
        }
        Ok(())
    }

    /// The run's calibrated cost of one loader probe hit in ns; None when
    /// the loader was not traced or the cost could not be measured.
    pub fn run_loader_hit_ns(&self, run: RunId) -> Result<Option<u64>> {
        let rows = self.query("SELECT loader_hit_ns FROM runs WHERE id = ?1", run, |row| {
            row.get::<_, Option<i64>>(0)
        })?;
        let Some(value) = rows.into_iter().next() else {
            return Err(Error::NoSuchRun {
                path: self.path.clone(),
                run,
                hint: String::new(),
            });
        };
        check::non_negative_opt("loader_hit_ns", value)
            .map_err(|detail| self.bad_row(run, "runs", format!("id {run}"), detail))
    }

    /// A run's loader spans in order of `t_begin_ns` (ties in the order
    /// they were written).
    pub fn loader_spans(&self, run: RunId) -> Result<Vec<LoaderSpan>> {
        let run_files = self.file_ids(run)?;
        let rows = self.query(
            &format!("SELECT {SPAN_COLUMNS} FROM loader_spans WHERE run_id = ?1 ORDER BY seq"),
            run,
            span_row,
        )?;
        let mut spans = rows
            .into_iter()
            .map(|row| {
                checked_span(&row, &run_files).map_err(|detail| {
                    self.bad_row(run, "loader_spans", format!("seq {}", row.seq), detail)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // In seq order already unless batches came out of time order; a
        // stable sort of sorted spans is one pass.
        spans.sort_by_key(|span| span.t_begin_ns);
        Ok(spans)
    }
}
