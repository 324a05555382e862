//! The pure parts of raygate's command line: each command takes file text (or objects read by
//! [`crate::client::live`]) and returns output text or an error line. `main.rs` only parses flags, reads files and prints.

mod admit;
pub use admit::{AdmitReport, ClusterQueueRow, WorkloadRow, admit, admit_table, read_snapshot};
pub mod drain;
mod podsets;
/// `drain run` over a NodeRollout: the spec from the flags, create, follow, pause on Ctrl-C.
pub mod rollout;
/// `raygate rollout get|pause|resume NAME`: the view, the resume counter, the exit codes.
pub mod rollout_verbs;
pub mod status;
/// `raygate status rayservices [-A]`: one line per opted-in RayService.
pub mod status_list;

pub use podsets::{PodSetRow, PodSetsReport, podsets, podsets_table};

use serde::Serialize;

use crate::manifest::ManifestError;
use crate::podsets::PodSetError;

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Json,
    Yaml,
    Table,
    /// The objects the result is about, one `kind.group/name` line each, as `kubectl get -o
    /// name` prints them.
    Name,
}

/// What a command prints: its data (`json`, `yaml`), a table for a person, and the objects it
/// is about for a script (`name`).
pub trait View: Serialize {
    fn table(&self) -> String;
    /// `kind.group/name` per object (`kind/name` for core kinds; no namespace, as kubectl).
    fn names(&self) -> Vec<String>;
}

/// `kind.group/name` of `ns/name` or `name` (the namespace dropped, as `kubectl get -o name`).
pub fn object_name(kind_group: &str, key: &str) -> String {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    format!("{kind_group}/{name}")
}

/// The output format of `podsets` and `admit` without `-o`: a table on a terminal, JSON when
/// the output goes to a pipe or a file (scripts keep the data).
pub fn default_output(stdout_is_terminal: bool) -> Output {
    if stdout_is_terminal {
        Output::Table
    } else {
        Output::Json
    }
}

/// Why a command failed on its input (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("document {index}: {source}")]
    PodSets { index: usize, source: PodSetError },
    #[error("output: {0}")]
    Render(String),
}

/// Renders a report in the chosen format.
pub fn render<T: View>(value: &T, output: Output) -> Result<String, InputError> {
    match output {
        Output::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| InputError::Render(e.to_string())),
        Output::Yaml => {
            crate::manifest::to_yaml(value).map_err(|e| InputError::Render(e.to_string()))
        }
        Output::Table => Ok(value.table()),
        Output::Name => Ok(value
            .names()
            .into_iter()
            .map(|n| n + "\n")
            .collect::<String>()),
    }
}

#[cfg(test)]
mod default_output_tests {
    use super::{Output, default_output};

    #[test]
    fn without_o_a_terminal_gets_a_table_and_a_pipe_json() {
        assert_eq!(default_output(true), Output::Table);
        assert_eq!(default_output(false), Output::Json);
    }
}
