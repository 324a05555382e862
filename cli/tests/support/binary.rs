//! The built `raygate` binary, run as a user runs it.

use std::process::Command;

/// `raygate ARGS`: its exit code, stdout and stderr.
pub fn raygate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_raygate"))
        .args(args)
        .output()
        .expect("the raygate binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
