//! The policy author's guide, run: every command of the `sh` blocks of
//! `docs/policies.md`, as written and in order (`guide` runs the operator
//! guide); the `sh polyglot` blocks (Python and TypeScript) in a second
//! test, which installs the SDKs from the packages `cargo xtask
//! sdk-packages` built, as the guide says.
//!
//! The commands run from a scratch directory laid out like a checkout
//! (`docs` and `policies` link to the workspace's, `target` to the build's
//! target directory), with the built `policyhost` first on `PATH`; `cargo`
//! commands run in the workspace itself (they write only to the target
//! directory). `policyhost dev` starts in the background, as the guide runs
//! it in a second terminal, and is stopped at the end. `export` sets the
//! environment of the commands after it. A command whose comment says
//! `exit status N` must exit with N, every other one with 0. The README's
//! app-team commands must all be in the guide, so they run here too.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::process::text;
use crate::common::{dev, policyhost_bin, target_dir, workspace};

/// One command of a `sh` block.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    command: String,
    exit: i32,
}

/// The commands of the blocks of a Markdown text whose info string is
/// `info` (e.g. `sh`), without comments.
fn steps(markdown: &str, info: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut in_sh = false;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if let Some(block) = trimmed.strip_prefix("```") {
            in_sh = !in_sh && block == info;
            continue;
        }
        if !in_sh || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (command, comment) = trimmed.split_once(" # ").unwrap_or((trimmed, ""));
        let exit = comment
            .split_once("exit status ")
            .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        steps.push(Step {
            command: command.trim().to_owned(),
            exit,
        });
    }
    steps
}

/// A scratch directory laid out like a checkout.
fn scratch() -> PathBuf {
    let dir = crate::common::scratch().join("policy-guide");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for name in ["docs", "policies"] {
        std::os::unix::fs::symlink(workspace().join(name), dir.join(name)).expect("link");
    }
    std::os::unix::fs::symlink(target_dir(), dir.join("target")).expect("link target");
    dir
}

/// The virtualenv of `cargo xtask polyglot`.
fn polyglot_venv() -> PathBuf {
    target_dir().join("polyglot/venv/bin")
}

/// `sh -c command` in `dir`, with the built `policyhost` first on `PATH`
/// and then `venv` (a virtualenv's `bin`, as an author's activated one).
fn shell(command: &str, dir: &Path, venv: &Path, env: &[(String, String)]) -> Command {
    let bin_dir = policyhost_bin()
        .parent()
        .expect("binary directory")
        .to_path_buf();
    let venv = venv.to_path_buf();
    let path = std::env::join_paths([bin_dir, venv].into_iter().chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("POLICYHOST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)));
    shell
}

#[test]
fn every_command_of_the_policy_guide_runs_as_written() {
    let guide = std::fs::read_to_string(workspace().join("docs/policies.md")).expect("the guide");
    let steps = steps(&guide, "sh");
    assert!(steps.len() >= 10, "{steps:?}");
    let dir = scratch();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut background = None;
    let mut outputs = Vec::new();
    for step in &steps {
        let command = step.command.as_str();
        if let Some(assignment) = command.strip_prefix("export ") {
            let (name, value) = assignment.split_once('=').expect("export NAME=VALUE");
            let value = shell(
                &format!("printf %s \"{value}\""),
                &dir,
                &polyglot_venv(),
                &env,
            )
            .output()
            .expect("expand");
            env.push((
                name.to_owned(),
                String::from_utf8_lossy(&value.stdout).into(),
            ));
            continue;
        }
        if command.starts_with("policyhost dev") {
            let mut dev = shell(&format!("exec {command}"), &dir, &polyglot_venv(), &env);
            background = Some(dev::serving(dev.stderr(Stdio::null())));
            continue;
        }
        let cwd = if command.starts_with("cargo ") {
            workspace()
        } else {
            dir.clone()
        };
        let output = shell(command, &cwd, &polyglot_venv(), &env)
            .output()
            .expect("run sh");
        assert_eq!(
            output.status.code(),
            Some(step.exit),
            "`{command}`:\n{}",
            text(&output)
        );
        outputs.push((command, text(&output)));
    }
    assert!(background.is_some(), "the guide starts `policyhost dev`");

    // Beyond exit statuses: the listings say what the guide says they say.
    let lists: Vec<&String> = outputs
        .iter()
        .filter(|(c, _)| *c == "policyhost policy list")
        .map(|(_, o)| o)
        .collect();
    assert_eq!(lists.len(), 3, "{outputs:?}");
    assert!(lists[0].contains("Serving"), "{}", lists[0]);
    assert_eq!(
        lists[1].matches("Serving").count(),
        2,
        "the serving version and the candidate side by side: {}",
        lists[1]
    );
    assert!(
        lists[2].contains("Rejected") && lists[2].contains("InvalidConfig"),
        "{}",
        lists[2]
    );
    let promoted = outputs
        .iter()
        .find(|(c, _)| c.starts_with("policyhost policy promote"))
        .map(|(_, o)| o)
        .expect("promote");
    assert!(promoted.contains("serving sha256:"), "{promoted}");
    let described = outputs
        .iter()
        .find(|(c, _)| c.starts_with("kubectl describe configmap"))
        .map(|(_, o)| o)
        .expect("describe");
    assert!(
        described.contains("PolicyLoaded") && described.contains("PolicyRejected"),
        "{described}"
    );
    let datajobs = outputs
        .iter()
        .find(|(c, _)| c.starts_with("kubectl get datajobs"))
        .map(|(_, o)| o)
        .expect("get datajobs");
    assert!(datajobs.contains("Succeeded"), "{datajobs}");
    let explained = outputs
        .iter()
        .find(|(c, _)| c.starts_with("policyhost explain"))
        .map(|(_, o)| o)
        .expect("explain");
    assert!(
        explained.contains("decisions recorded, oldest first")
            && explained.contains("created Pod etl-nightly-worker-0"),
        "{explained}"
    );
    drop(background);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Install the SDKs from their packages, test natively, build, and test
/// the components in the host, in Python and in TypeScript, as the guide
/// writes it (the packages `cargo xtask sdk-packages` built; the
/// virtualenv the guide makes, activated).
#[test]
fn the_python_and_typescript_path_of_the_guide_runs_as_written() {
    let guide = std::fs::read_to_string(workspace().join("docs/policies.md")).expect("the guide");
    let steps = steps(&guide, "sh polyglot");
    assert!(steps.len() >= 9, "{steps:?}");
    let packages = target_dir().join("sdk-packages");
    assert!(
        packages.is_dir(),
        "{} is missing: run `cargo xtask sdk-packages` first",
        packages.display()
    );
    let dir = crate::common::scratch().join("policy-guide-polyglot");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    std::os::unix::fs::symlink(workspace().join("policies"), dir.join("policies")).expect("link");
    std::os::unix::fs::symlink(target_dir(), dir.join("target")).expect("link target");
    let venv = dir.join(".venv/bin");
    let mut passed = Vec::new();
    for step in &steps {
        let output = shell(&step.command, &dir, &venv, &[])
            .output()
            .expect("run sh");
        assert_eq!(
            output.status.code(),
            Some(step.exit),
            "`{}`:\n{}",
            step.command,
            text(&output)
        );
        if step.command.starts_with("policyhost policy test") {
            passed.push(text(&output));
        }
        if step.command.starts_with("policyhost policy check") {
            let checked = text(&output);
            assert!(checked.contains("sdk:      python SDK 0.1.0"), "{checked}");
        }
    }
    // The SDKs came from their packages, not from a checkout.
    let installed = venv.join("python");
    let origin = Command::new(&installed)
        .args([
            "-c",
            "import policyhost_sdk; print(policyhost_sdk.__file__)",
        ])
        .output()
        .expect("the virtualenv's python");
    assert!(
        text(&origin).contains(".venv/lib/"),
        "installed into the virtualenv: {}",
        text(&origin)
    );
    assert!(
        dir.join("node_modules/@policyhost/sdk/dist/src/cli.js")
            .is_file()
            && !dir.join("node_modules/@policyhost/sdk").is_symlink(),
        "unpacked from the tarball into node_modules"
    );
    // Both components pass the golden cases the Rust `fanout` passes.
    let golden = std::fs::read_dir(workspace().join("policies/fanout/tests/golden"))
        .expect("golden cases")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
        .count();
    assert_eq!(passed.len(), 2, "{steps:?}");
    for output in passed {
        assert!(output.contains(&format!("{golden} passed")), "{output}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_readme_app_team_commands_are_the_guide_s() {
    let guide = std::fs::read_to_string(workspace().join("docs/policies.md")).expect("the guide");
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README");
    let section = readme
        .split_once("\n## Writing a policy")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default())
        .expect("README has a `## Writing a policy` section");
    let readme_steps = steps(section, "sh");
    assert!(readme_steps.len() >= 5, "{readme_steps:?}");
    let guide_steps = steps(&guide, "sh");
    for step in readme_steps {
        assert!(
            guide_steps.iter().any(|g| g.command == step.command),
            "README command `{}` is not in docs/policies.md, so no test runs it",
            step.command
        );
    }
}

#[test]
fn sh_blocks_are_read_as_commands_with_their_expected_exit_status() {
    let markdown = "text\n```sh\n# a comment\ncargo test -p x   # native\n\nfoo --bar    # exit status 3\n```\n```yaml\nnot: run\n```\n";
    assert_eq!(
        steps(markdown, "sh"),
        [
            Step {
                command: "cargo test -p x".into(),
                exit: 0
            },
            Step {
                command: "foo --bar".into(),
                exit: 3
            },
        ]
    );
}
