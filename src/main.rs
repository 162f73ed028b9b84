//! `ladder`: the command-line front end. See README.md for the command reference.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
