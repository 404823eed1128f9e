//! Writing results: JSON or text to stdout, buffered, with a closed pipe
//! (`coldstart inspect x | head`) treated as a normal end, and progress
//! bars that only appear on a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::io::{IsTerminal, Write};

pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

pub fn print_text(text: &str) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        let io = cause
            .downcast_ref::<std::io::Error>()
            .map(|e| e.kind())
            .or_else(|| {
                cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(|e| e.io_error_kind())
            });
        io == Some(std::io::ErrorKind::BrokenPipe)
    })
}

/// A progress bar on stderr with a message before the bar.
pub fn progress(total: u64, message: &str) -> ProgressBar {
    let bar = progress_with(total, "{msg:>12} [{bar:40}] {pos}/{len} {elapsed}");
    bar.set_message(message.to_string());
    bar
}

/// A progress bar on stderr drawn by an indicatif template, hidden when
/// stderr is not a terminal; on one it ticks, so {elapsed} keeps counting
/// through a long step.
pub fn progress_with(total: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if std::io::stderr().is_terminal() {
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}

/// A status line on stderr, so stdout stays clean for --json.
pub fn step(text: &str) {
    eprintln!("{text}");
}

/// A line on stderr above `bar`: through the bar while it is drawn, else
/// straight to stderr (a hidden bar's println prints nothing, which would
/// lose every warning when stderr is a file or a pipe).
pub fn say(bar: &ProgressBar, text: String) {
    if bar.is_hidden() {
        eprintln!("{text}");
    } else {
        bar.println(text);
    }
}

/// A spinner with a message on stderr, hidden when stderr is not a terminal.
pub fn spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if std::io::stderr().is_terminal() {
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// "run 3", or "runs 3, 4 and 5".
pub fn runs_text(runs: &[i64]) -> String {
    match runs {
        [run] => format!("run {run}"),
        [rest @ .., last] => format!(
            "runs {} and {last}",
            rest.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        [] => "runs (none)".to_string(),
    }
}
