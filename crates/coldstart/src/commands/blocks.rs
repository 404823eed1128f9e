//! `coldstart trace --blocks`: one block-level trace of a program's start
//! (coldstart_record::blocks), written to the profile as a block run, with a
//! short summary.

use crate::args::TraceArgs;
use crate::output;
use anyhow::Context;
use coldstart_profile::{BlockFile, Profile};
use coldstart_record::blocks::{
    BlockEnd, BlockTrace, BlockTraceOptions, trace_blocks, write_block_run,
};
use coldstart_system::launch::Identity;
use serde::Serialize;
use std::process::ExitCode;

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let identity =
        Identity::invoking_user(args.run_as.as_root).context("cannot look up the invoking user")?;
    let interrupted = super::interrupt_flag()?;
    let options = BlockTraceOptions {
        argv: args.program.command.clone(),
        identity: identity.clone(),
        env: Vec::new(),
        timeout: Some(args.readiness.timeout()?),
        stdout_to_stderr: args.json,
        discover: args
            .discover
            .iter()
            .map(|p| {
                std::fs::canonicalize(p).with_context(|| format!("--discover {}", p.display()))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let program = args
        .program
        .command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Opened first: a profile that cannot be written is said before the
    // program runs.
    let existed = args.output.exists();
    let mut profile = Profile::create_or_open(&args.output)?;
    let spinner = output::spinner();
    spinner.set_message("tracing blocks");
    let trace = trace_blocks(&options, &interrupted);
    spinner.finish_and_clear();
    let trace = trace.with_context(|| format!("tracing the blocks of {program}"))?;
    let id = write_block_run(&mut profile, &trace, &options)
        .with_context(|| format!("writing the block trace to {}", args.output.display()))?;
    let files = profile.block_files(id)?;
    let blocks_ran = trace.hits.len();
    if !existed && identity.switches() {
        coldstart_profile::give_to(&args.output, identity.uid, identity.gid);
    }
    let summary = Summary::new(args, id, &trace, &files, blocks_ran);
    if args.json {
        output::print_json(&summary)?;
    } else {
        output::print_text(&summary.render())?;
    }
    Ok(match trace.end {
        BlockEnd::Interrupted => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// What `trace --blocks` prints.
#[derive(Serialize)]
struct Summary {
    profile: String,
    block_run: i64,
    command: Vec<String>,
    end_reason: &'static str,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    duration_ms: f64,
    processes: usize,
    blocks_ran: usize,
    traps: u64,
    files: Vec<FileSummary>,
}

#[derive(Serialize)]
struct FileSummary {
    path: String,
    traced: bool,
    blocks_armed: u64,
    blocks_ran: usize,
    bytes_ran: u64,
    functions_ran: usize,
    problem: Option<String>,
}

impl Summary {
    fn new(
        args: &TraceArgs,
        id: i64,
        trace: &BlockTrace,
        files: &[BlockFile],
        blocks_ran: usize,
    ) -> Summary {
        let files = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let hits: Vec<_> = trace.hits.iter().filter(|h| h.file == i).collect();
                let mut functions: Vec<u32> = hits.iter().map(|h| h.block.function).collect();
                functions.sort_unstable();
                functions.dedup();
                FileSummary {
                    path: f.path.display().to_string(),
                    traced: f.has_map,
                    blocks_armed: f.armed,
                    blocks_ran: hits.len(),
                    bytes_ran: hits
                        .iter()
                        .filter_map(|h| trace.block(h))
                        .map(|b| b.size)
                        .sum(),
                    functions_ran: functions.len(),
                    problem: f.problem.clone(),
                }
            })
            .collect();
        Summary {
            profile: args.output.display().to_string(),
            block_run: id,
            command: args
                .program
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            end_reason: match trace.end {
                BlockEnd::Exited => "exited",
                BlockEnd::Timeout => "timeout",
                BlockEnd::Interrupted => "interrupted",
            },
            exit_code: trace.exit_code,
            exit_signal: trace.exit_signal,
            duration_ms: trace.duration_ns as f64 / 1e6,
            processes: trace.processes.len(),
            blocks_ran,
            traps: trace.traps,
            files,
        }
    }

    fn render(&self) -> String {
        let ending = match (self.exit_code, self.exit_signal) {
            (_, Some(signal)) if self.end_reason == "exited" => {
                format!("killed by signal {signal}")
            }
            (Some(code), _) if self.end_reason == "exited" => format!("exited, exit code {code}"),
            _ => self.end_reason.to_string(),
        };
        let mut out = format!(
            "block trace {} of {} ({ending}",
            self.block_run,
            self.command.join(" "),
        );
        out.push_str(&format!(
            ") written to {}: {} blocks ran in {} process(es), {:.0} ms under the tracer\n",
            self.profile, self.blocks_ran, self.processes, self.duration_ms
        ));
        let traced: Vec<&FileSummary> = self.files.iter().filter(|f| f.traced).collect();
        if traced.is_empty() {
            out.push_str(
                "no file the program mapped has a block map: build it with clang \
                 -fbasic-block-address-map (LLVM 19 or later; -fbasic-block-sections=labels \
                 before), and trace that build\n",
            );
        }
        for f in &traced {
            out.push_str(&format!(
                "  {}: {} of {} blocks ran ({} in {} functions)\n",
                f.path,
                f.blocks_ran,
                f.blocks_armed,
                coldstart_binary::human_bytes(f.bytes_ran),
                f.functions_ran
            ));
        }
        let untraced = self.files.len() - traced.len();
        if untraced > 0 {
            out.push_str(&format!(
                "  {untraced} other mapped file(s) have no block map and were not traced\n"
            ));
        }
        for f in self.files.iter().filter(|f| f.problem.is_some()) {
            out.push_str(&format!(
                "  warning: {}: {}\n",
                f.path,
                f.problem.as_deref().unwrap_or_default()
            ));
        }
        out
    }
}
