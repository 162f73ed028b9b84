//! Progress on long work (loading, compiling, running, conformance, bench): a spinner or a
//! bar on stderr, drawn only when stderr is a terminal and `--quiet` is not given, and cleared
//! when the work ends, so piped and redirected output is never touched.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress and no notes (errors still print).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

fn hidden() -> bool {
    quiet() || !std::io::stderr().is_terminal()
}

/// A bar over `len` items of `what`; hidden (every call a no-op) where progress is not shown.
pub fn bar(len: usize, what: &str) -> ProgressBar {
    if hidden() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {prefix} [{bar:30}] {pos}/{len} {elapsed} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_prefix(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Runs `work` while a spinner says `what`, with the time so far; the line is cleared after.
pub fn spin<T>(what: &str, work: impl FnOnce() -> T) -> T {
    if hidden() {
        return work();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").unwrap_or_else(|_| ProgressStyle::default_spinner());
    pb.set_style(style);
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    let out = work();
    pb.finish_and_clear();
    out
}
