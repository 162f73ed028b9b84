//! The tests that count heap memory, in a binary of their own: they measure with a counting
//! `#[global_allocator]` (see `counting.rs`), which replaces the allocator for every test in
//! its process, so it stays out of `tests/all`. A module per area, as there: run one with
//! `cargo test --test alloc -- runtime_alloc::`.

#[path = "../shared/attention_cases.rs"]
mod attention_cases;
mod counting;

mod artifact_mapped;
mod attention_kernel;
mod runtime_alloc;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;
