//! `coldstart inspect FILE...`: inspect each file, print tables or JSON.
//! A file that cannot be inspected gets one error line naming it; the others
//! are still reported, and the exit status says something failed.

use crate::args::InspectArgs;
use crate::output;
use coldstart_binary::{InspectOptions, Inspection, image_overlaps, inspect_path};
use coldstart_report::inspect::{InspectView, render, render_overlaps};
use serde::Serialize;
use std::process::ExitCode;

#[derive(Serialize)]
struct FileError {
    path: String,
    error: String,
}

#[derive(Serialize)]
struct Many<'a> {
    files: &'a [Inspection],
    errors: &'a [FileError],
    image_overlaps: Vec<coldstart_binary::ImageOverlap>,
}

pub fn run(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    if !args.page_size.is_power_of_two() {
        anyhow::bail!("--page-size {} is not a power of two", args.page_size);
    }
    let options = InspectOptions {
        page_size: args.page_size,
    };
    let mut inspections = Vec::new();
    let mut errors = Vec::new();
    for path in &args.files {
        match inspect_path(path, &options) {
            Ok(inspection) => inspections.push(inspection),
            Err(err) => {
                eprintln!("coldstart: error: {err}");
                errors.push(FileError {
                    path: path.display().to_string(),
                    error: err.to_string(),
                });
            }
        }
    }
    let overlaps = image_overlaps(&inspections);

    if args.format.json {
        match (args.files.len(), inspections.first()) {
            (1, Some(only)) => output::print_json(only)?,
            (1, None) => {}
            _ => output::print_json(&Many {
                files: &inspections,
                errors: &errors,
                image_overlaps: overlaps,
            })?,
        }
    } else {
        let view = InspectView {
            style: args.format.style(),
            initializers: args.initializers.0,
            all_sections: args.all_sections,
        };
        let mut text = String::new();
        for (i, inspection) in inspections.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&render(inspection, &view));
        }
        text.push_str(&render_overlaps(&overlaps, view.style));
        output::print_text(&text)?;
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
