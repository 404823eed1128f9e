//! GNU ld (bfd). From 2.43 on, --section-ordering-file takes a fragment of
//! a SECTIONS command (`.text : { *(.text.f) }`) whose input section
//! statements go before those of the output section already in the script.
//! Older versions have no such option, so the emitter writes a whole linker
//! script for -T: ld's own default script for this kind of link (what
//! `ld --verbose` prints) with the ordered statements first in each output
//! section. Either way, the first statement that matches an input section
//! places it, so listed sections come first and in order.

use super::sections::{OUTPUT_ORDER, Placed, output_section};
use super::{Linker, Reason, header};
use crate::error::{Error, Result};
use crate::model::Order;
use std::path::Path;
use std::process::Command;

/// The GNU ld a link will run, as far as writing an order for it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdTarget {
    /// Major and minor version.
    pub version: (u32, u32),
    /// ld's default script for this link (`ld --verbose` with the link's
    /// `-shared`/`-pie`/`-z` options, between the `=====` lines). Needed
    /// before 2.43; ignored from 2.43 on.
    pub default_script: Option<String>,
}

impl BfdTarget {
    /// The first version with --section-ordering-file.
    pub const ORDERING_FILE_SINCE: (u32, u32) = (2, 43);

    /// Asks `ld` its version and, if it has no --section-ordering-file, its
    /// default script for a link with `mode_args` (those of the real link
    /// that choose the script: `-shared` or `-pie`, `-z now`, `-z relro`,
    /// `-z separate-code`, `-m EMULATION`).
    pub fn probe(ld: &Path, mode_args: &[&str]) -> Result<BfdTarget> {
        let version = run(ld, &["--version"])?;
        let mut target = BfdTarget::from_outputs(&version, None)?;
        if !target.has_ordering_file() {
            let mut args = vec!["--verbose"];
            args.extend_from_slice(mode_args);
            target.default_script = Some(default_script(&run(ld, &args)?)?);
        }
        Ok(target)
    }

    /// Builds a target from what `ld --version` and `ld --verbose` printed.
    pub fn from_outputs(version_output: &str, verbose_output: Option<&str>) -> Result<BfdTarget> {
        Ok(BfdTarget {
            version: parse_version(version_output)?,
            default_script: verbose_output.map(default_script).transpose()?,
        })
    }

    pub fn has_ordering_file(&self) -> bool {
        self.version >= BfdTarget::ORDERING_FILE_SINCE
    }
}

fn run(ld: &Path, args: &[&str]) -> Result<String> {
    let command = format!("{} {}", ld.display(), args.join(" "));
    let output = Command::new(ld)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| Error::Tool {
            command: command.clone(),
            detail: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::Tool {
            command,
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// "GNU ld (GNU Binutils for Debian) 2.40" or "GNU ld version 2.30-79.el8"
/// gives (2, 40) or (2, 30).
fn parse_version(output: &str) -> Result<(u32, u32)> {
    let first = output.lines().next().unwrap_or_default().trim();
    let not_bfd = || Error::Tool {
        command: "ld --version".to_string(),
        detail: format!("`{first}` is not GNU ld (bfd); use --linker gold or lld for those"),
    };
    if !first.starts_with("GNU ld") {
        return Err(not_bfd());
    }
    let token = first
        .split_whitespace()
        .rfind(|t| t.starts_with(|c: char| c.is_ascii_digit()))
        .ok_or_else(not_bfd)?;
    let mut parts = token.split(|c: char| !c.is_ascii_digit());
    let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (number(), number()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(not_bfd()),
    }
}

/// The script `ld --verbose` prints between two lines of `=`.
fn default_script(verbose: &str) -> Result<String> {
    let rule = |line: &str| line.len() >= 10 && line.bytes().all(|b| b == b'=');
    let mut lines = verbose.lines();
    if !lines.by_ref().any(rule) {
        return Err(Error::Script {
            detail: "`ld --verbose` printed no script between lines of `=`".to_string(),
        });
    }
    let mut script = String::new();
    for line in lines {
        if rule(line) {
            return Ok(script);
        }
        script.push_str(line);
        script.push('\n');
    }
    Err(Error::Script {
        detail: "the script `ld --verbose` printed has no closing line of `=`".to_string(),
    })
}

pub(crate) struct Written {
    pub text: String,
    pub usage: String,
    pub refused: Vec<(String, Reason)>,
}

pub(crate) fn write(symbols: &[Placed<'_>], order: &Order, target: &BfdTarget) -> Result<Written> {
    let (major, minor) = target.version;
    // Before 2.43 the statements go into ld's default script, which has
    // the usual output sections, or some of them on unusual targets.
    let script = if target.has_ordering_file() {
        None
    } else {
        let script = target.default_script.as_deref().ok_or_else(|| Error::Script {
            detail: format!(
                "GNU ld {major}.{minor} has no --section-ordering-file (it came in 2.43) and no \
                 default script was given; probe the linker with the link's -shared/-pie options"
            ),
        })?;
        Some((script, insertion_points(script, &OUTPUT_ORDER)))
    };
    let exists = |output: &str| {
        script
            .as_ref()
            .is_none_or(|(_, points)| points.iter().any(|(o, _)| *o == output))
    };

    // Statements per output section, each symbol's sections of one output
    // section in one statement.
    let mut statements: Vec<(&str, Vec<String>)> =
        OUTPUT_ORDER.iter().map(|&o| (o, Vec::new())).collect();
    let mut refused = Vec::new();
    let mut placed = 0;
    for symbol in symbols {
        let mut by_output: Vec<(&str, Vec<&str>)> = Vec::new();
        let mut unplaceable = None;
        for section in &symbol.sections {
            match output_section(section).filter(|o| exists(o)) {
                Some(output) => match by_output.iter_mut().find(|(o, _)| *o == output) {
                    Some((_, names)) => names.push(section),
                    None => by_output.push((output, vec![section])),
                },
                // A guess for an output section this script lacks names
                // nothing that can exist; a real section must have a place.
                None if symbol.guessed => {}
                None => unplaceable = Some(section.clone()),
            }
        }
        // Every guess was for an output section the script lacks.
        if by_output.is_empty() && unplaceable.is_none() {
            unplaceable = symbol.sections.first().cloned();
        }
        if let Some(section) = unplaceable {
            refused.push((
                symbol.entry.raw_name.clone(),
                Reason::NoOutputSection { section },
            ));
            continue;
        }
        placed += 1;
        for (output, names) in by_output {
            if let Some((_, list)) = statements.iter_mut().find(|(o, _)| *o == output) {
                list.push(format!("*({})", names.join(" ")));
            }
        }
    }
    statements.retain(|(_, list)| !list.is_empty());

    let Some((script, points)) = script else {
        let usage = "-Wl,--section-ordering-file=FILE".to_string();
        let mut text = header("/*", Linker::Bfd, &usage, order, placed);
        text.push_str(" */\n");
        for (output, list) in &statements {
            text.push_str(&format!("{output} : {{\n"));
            for statement in list {
                text.push_str(&format!("  {statement}\n"));
            }
            text.push_str("}\n");
        }
        return Ok(Written {
            text,
            usage,
            refused,
        });
    };
    let usage = format!(
        "-Wl,-T,FILE (replaces GNU ld {major}.{minor}'s default script; made for one kind of \
         link: probe again for -shared, -pie or other -z options)"
    );
    let mut text = header("/*", Linker::Bfd, &usage, order, placed);
    text.push_str(" */\n");
    text.push_str(&splice(script, &points, &statements));
    Ok(Written {
        text,
        usage,
        refused,
    })
}

/// `script` with each list of statements put first inside its output
/// section's braces; `points` are where those open.
fn splice(script: &str, points: &[(&str, usize)], statements: &[(&str, Vec<String>)]) -> String {
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (output, list) in statements {
        let Some(&(_, at)) = points.iter().find(|(o, _)| o == output) else {
            continue;
        };
        let mut block = String::from("\n    /* coldstart: ordered input sections, first */\n");
        for statement in list {
            block.push_str(&format!("    {statement}\n"));
        }
        block.push_str("    /* coldstart: end of ordered input sections */\n");
        inserts.push((at, block));
    }
    inserts.sort_by_key(|(at, _)| *at);
    let mut out =
        String::with_capacity(script.len() + inserts.iter().map(|(_, b)| b.len()).sum::<usize>());
    let mut from = 0;
    for (at, block) in inserts {
        out.push_str(&script[from..at]);
        out.push_str(&block);
        from = at;
    }
    out.push_str(&script[from..]);
    out
}

/// For each wanted output section, the byte just after the `{` that opens
/// its body. Output section statements are the ones that start a
/// statement directly inside SECTIONS; comments and strings are skipped, so
/// `SIZEOF (.got.plt)` or a name in a comment is never taken for one.
fn insertion_points<'a>(script: &str, wanted: &[&'a str]) -> Vec<(&'a str, usize)> {
    let bytes = script.as_bytes();
    let mut points = Vec::new();
    let mut depth = 0u32;
    let mut statement_start = true;
    let mut pending: Option<&'a str> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if bytes[i..].starts_with(b"/*") {
            i = script[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |end| i + 2 + end + 2);
            continue;
        }
        match b {
            b'"' => {
                i = script[i + 1..]
                    .find('"')
                    .map_or(bytes.len(), |end| i + 1 + end + 1);
                statement_start = false;
                continue;
            }
            b'{' => {
                depth += 1;
                if let Some(output) = pending.take()
                    && depth == 2
                {
                    points.push((output, i + 1));
                }
                statement_start = true;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                statement_start = true;
            }
            b';' => statement_start = true,
            b if b.is_ascii_whitespace() => {}
            _ => {
                let end = script[i..]
                    .find(|c: char| c.is_ascii_whitespace() || ":{}();=,\"".contains(c))
                    .map_or(bytes.len(), |n| i + n.max(1));
                let token = &script[i..end];
                if depth == 1
                    && statement_start
                    && let Some(&output) = wanted.iter().find(|&&w| w == token)
                    && !points.iter().any(|(o, _)| *o == output)
                {
                    pending = Some(output);
                }
                statement_start = false;
                i = end;
                continue;
            }
        }
        i += 1;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::tests::SCRIPT;

    #[test]
    fn versions_of_several_distributions() {
        assert_eq!(
            parse_version("GNU ld (GNU Binutils for Debian) 2.40\nCopyright").ok(),
            Some((2, 40))
        );
        assert_eq!(
            parse_version("GNU ld version 2.30-79.el8").ok(),
            Some((2, 30))
        );
        assert_eq!(
            parse_version("GNU ld (GNU Binutils) 2.43.1").ok(),
            Some((2, 43))
        );
        let gold = parse_version("GNU gold (GNU Binutils for Debian 2.40) 1.16");
        assert!(format!("{}", gold.expect_err("gold")).contains("is not GNU ld (bfd)"));
        assert!(parse_version("LLD 19.1.7 (compatible with GNU linkers)").is_err());
    }

    #[test]
    fn the_default_script_is_cut_from_verbose_output() {
        let verbose = "GNU ld 2.40\n  Supported emulations:\n   elf_x86_64\nusing internal linker script:\n\
            ==================================================\nSECTIONS\n{\n}\n\
            ==================================================\n";
        assert_eq!(
            default_script(verbose).ok().as_deref(),
            Some("SECTIONS\n{\n}\n")
        );
        assert!(default_script("no script here\n").is_err());
        assert!(default_script("==========\nSECTIONS {}\n").is_err());
    }

    #[test]
    fn insertion_points_skip_comments_and_expressions() {
        let points = insertion_points(SCRIPT, &[".text", ".rodata", ".data", ".bss"]);
        let text_at = SCRIPT
            .find(".text :\n  {")
            .map(|i| i + ".text :\n  {".len());
        let rodata_at = SCRIPT.find(".rodata : {").map(|i| i + ".rodata : {".len());
        let data_at = SCRIPT
            .find(".data :\n  {")
            .map(|i| i + ".data :\n  {".len());
        assert_eq!(
            points,
            vec![
                (".text", text_at.expect("text")),
                (".rodata", rodata_at.expect("rodata")),
                (".data", data_at.expect("data"))
            ]
        );
    }

    #[test]
    fn splicing_puts_the_statements_first() {
        let statements = vec![
            (
                ".text",
                vec!["*(.text.b)".to_string(), "*(.text.a)".to_string()],
            ),
            (".data", vec!["*(.data.x)".to_string()]),
        ];
        let points = insertion_points(SCRIPT, &OUTPUT_ORDER);
        let spliced = splice(SCRIPT, &points, &statements);
        assert!(spliced.contains(
            ".text :\n  {\n    /* coldstart: ordered input sections, first */\n    *(.text.b)\n    \
             *(.text.a)\n    /* coldstart: end of ordered input sections */\n\n    *(.text .text.*)"
        ));
        assert!(spliced.contains(
            ".data :\n  {\n    /* coldstart: ordered input sections, first */\n    *(.data.x)\n"
        ));
        // Nothing of the script is lost or moved.
        let text_block = "\n    /* coldstart: ordered input sections, first */\n    *(.text.b)\n    \
             *(.text.a)\n    /* coldstart: end of ordered input sections */\n";
        let data_block = "\n    /* coldstart: ordered input sections, first */\n    *(.data.x)\n    \
             /* coldstart: end of ordered input sections */\n";
        assert_eq!(
            spliced.replace(text_block, "").replace(data_block, ""),
            SCRIPT
        );
    }
}
