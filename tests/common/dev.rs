//! `policyhost dev` in the background, as a developer runs it in a second
//! terminal: started, awaited until it says it runs, stopped when dropped.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::process::Spawned;

/// How long `policyhost dev` may take to start serving.
const START_PATIENCE: Duration = Duration::from_secs(120);

/// Starts `command`, a `policyhost dev` invocation, and returns once it
/// prints that it runs (`running; Ctrl-C to stop`): its cluster is up, its
/// kubeconfig written and its operator started. Its stdout is read to the
/// end in the background; the caller sets its stderr.
///
/// # Panics
///
/// When it exits before, or does not get there within two minutes.
pub fn serving(command: &mut Command) -> Spawned {
    serving_saying(command).0
}

/// [`serving`], and the lines it printed until then.
pub fn serving_saying(command: &mut Command) -> (Spawned, Vec<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("start policyhost dev");
    let stdout = child.stdout.take().expect("stdout");
    let dev = Spawned::new(child, "policyhost dev");
    let (ready, running) = mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("running;") {
                let _ = ready.send(std::mem::take(&mut said));
            } else {
                said.push(line);
            }
        }
    });
    match running.recv_timeout(START_PATIENCE) {
        Ok(said) => (dev, said),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("`{command:?}` exited before it served")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("`{command:?}` did not serve within {START_PATIENCE:?}")
        }
    }
}
