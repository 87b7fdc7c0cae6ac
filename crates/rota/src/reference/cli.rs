//! The command-line reference, generated from the clap types: `docs/reference/cli.md` and one
//! man page per command in `packaging/man/` (shipped in the Debian package).
//!
//! The Markdown is a small walk of its own rather than clap-markdown's: that crate leaves out
//! the environment variables, and `/etc/default/rota-agent` is configured through them.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use super::markdown::{escape, pipes};
use super::{assert_current, check_or_write, repo_root, updating};
use crate::cli::Cli;

/// The Markdown reference of every command that is not hidden, parents before children.
fn markdown(cli: &Command) -> String {
    let mut out = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from rota's clap types by crates/rota/src/reference/cli.rs; do not edit. -->\n\n\
         Every command of `rota`, with its flags as `rota <command> --help` shows them. A flag's \
         environment variable, where it has one, sets it when the flag is not given (for \
         `rota agent` under systemd: in `/etc/default/rota-agent`). Durations take `500ms`, \
         `30s`, `10m`, `1h30m`.\n",
    );
    let mut root = cli.clone();
    root.build();
    write_command(&mut out, &root, "rota");
    out
}

fn write_command(out: &mut String, cmd: &Command, path: &str) {
    let _ = write!(out, "\n## `{path}`\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = write!(out, "{}\n\n", escape(about.to_string().trim()));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage: ");
    let _ = write!(out, "```text\n{usage}\n```\n");
    let subcommands: Vec<&Command> = documented(cmd).collect();
    if !subcommands.is_empty() {
        out.push_str("\n| command | what it does |\n|---|---|\n");
        for sub in &subcommands {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let anchor = format!("{path} {}", sub.get_name()).replace(' ', "-");
            let _ = writeln!(
                out,
                "| [`{}`](#{anchor}) | {} |",
                sub.get_name(),
                cell(&escape(&about))
            );
        }
    }
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && (path == "rota" || !a.is_global_set()))
        .filter(|a| {
            !matches!(
                a.get_action(),
                ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
            )
        })
        .collect();
    if !args.is_empty() {
        out.push_str("\n| flag (env) | default | meaning |\n|---|---|---|\n");
        for arg in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                flag(arg),
                default(arg),
                meaning(arg)
            );
        }
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = write!(out, "\n{}\n", after.to_string().trim());
    }
    for sub in subcommands {
        write_command(out, sub, &format!("{path} {}", sub.get_name()));
    }
}

/// The subcommands to document: not hidden, and not the `help` that clap adds to a built
/// command (`rota help agent` is `rota agent --help`).
fn documented(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// `--name VALUE` (`ENV`), `-s`, or a positional `<NAME>`, with "repeatable" where it is.
fn flag(arg: &Arg) -> String {
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect();
    let names = match arg.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        None if !choices.is_empty() => choices.join("|"),
        None => arg.get_id().to_string().to_uppercase(),
    };
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let mut text = match arg.get_long() {
        Some(long) if takes_value => format!("`--{long} {names}`"),
        Some(long) => format!("`--{long}`"),
        None if arg.is_positional() => format!("`<{names}>`"),
        None => String::new(),
    };
    if let Some(short) = arg.get_short() {
        text = format!("`-{short}`, {text}");
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        text.push_str(" (repeatable)");
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(text, " (`{}`)", env.to_string_lossy());
    }
    if arg.is_required_set() {
        text.push_str(", required");
    }
    text
}

fn default(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() || matches!(arg.get_action(), ArgAction::SetTrue) {
        return String::new();
    }
    values
        .iter()
        .map(|v| {
            if v.is_empty() {
                "(empty)".to_owned()
            } else {
                format!("`{}`", cell(v))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn meaning(arg: &Arg) -> String {
    let text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(help) => format!("`{}`: {help}", v.get_name()),
            None => format!("`{}`", v.get_name()),
        })
        .collect();
    let mut text = escape(text.trim());
    if !values.is_empty() && !matches!(arg.get_action(), ArgAction::SetTrue) {
        if !text.ends_with('.') {
            text.push('.');
        }
        let _ = write!(text, " One of: {}.", values.join("; "));
    }
    cell(&text)
}

/// One table cell: paragraphs joined with a line break, pipes escaped.
fn cell(text: &str) -> String {
    let text = text
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br>");
    pipes(&text)
}

/// Every man page, file name and roff text: `rota.1`, `rota-agent.1`, `rota-mop-submit.1`….
fn man_pages(cli: &Command) -> Vec<(String, Vec<u8>)> {
    let mut root = cli.clone();
    root.build();
    let mut pages = Vec::new();
    collect_man_pages(&root, &mut pages);
    pages
}

/// A built command's subcommands carry their display name, `rota-mop-submit`, which names the
/// page and its file.
fn collect_man_pages(cmd: &Command, pages: &mut Vec<(String, Vec<u8>)>) {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut roff = Vec::new();
    man.render(&mut roff).expect("render into memory");
    pages.push((man.get_filename(), roff));
    for sub in documented(cmd) {
        collect_man_pages(sub, pages);
    }
}

#[test]
fn the_cli_reference_and_man_pages_are_current() {
    let cli = Cli::command();
    let root = repo_root();
    let mut stale = Vec::new();
    stale.extend(check_or_write(
        &root.join("docs/reference/cli.md"),
        markdown(&cli).as_bytes(),
    ));
    let man = root.join("packaging/man");
    if updating() {
        std::fs::create_dir_all(&man).expect("mkdir packaging/man");
    }
    let pages = man_pages(&cli);
    for (name, roff) in &pages {
        stale.extend(check_or_write(&man.join(name), roff));
    }
    // A page of a command that no longer exists is stale too.
    let names: Vec<&String> = pages.iter().map(|(n, _)| n).collect();
    for entry in std::fs::read_dir(&man).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !names.contains(&&name) {
            if updating() {
                std::fs::remove_file(entry.path()).expect("remove a stale man page");
            } else {
                stale.push(entry.path().display().to_string());
            }
        }
    }
    assert_current("the generated command-line reference", &stale);
}
