//! The `policyhost` command: the operator and its tools.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
