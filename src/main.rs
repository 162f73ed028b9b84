//! `ladder`: the command-line front end. See README.md for the command reference.

mod cli;

/// Counts live heap bytes (two atomics per allocation), for `ladder bench`'s `peak_bytes`.
#[global_allocator]
static ALLOC: ladder::bench::CountingAlloc = ladder::bench::CountingAlloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
