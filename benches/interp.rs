//! Baseline timing of the reference interpreter: parse the example encoder's text and run it
//! (batch 1, seq 16), reporting the median of N runs. No statistics beyond that on purpose;
//! it is a number to compare later work against, not a benchmark suite.
//!
//! `cargo bench --bench interp` (N defaults to 20; `-- --runs N` to change it).

use std::time::{Duration, Instant};

use ladder::interp::{self, Options};
use ladder::models::{example_encoder, random_tensor, Rng, D_MODEL};
use ladder::DType;

const SEQ: usize = 16;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(20)
        .max(1);
    let g = match example_encoder() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cannot build the example encoder: {e}");
            std::process::exit(1);
        }
    };
    let text = ladder::text::print(&g);
    let x = random_tensor(&mut Rng::new(0), DType::F32, &[1, SEQ, D_MODEL]).expect("input shape is small");
    let inputs = [x];

    let (mut parse_times, mut run_times, mut precise_times) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let g = ladder::text::parse(&text).expect("printed text parses");
        parse_times.push(t.elapsed());
        let t = Instant::now();
        interp::run(&g, &inputs, &Options::default()).expect("the example runs");
        run_times.push(t.elapsed());
        let t = Instant::now();
        interp::run(&g, &inputs, &Options { precise: true, ..Options::default() }).expect("the example runs");
        precise_times.push(t.elapsed());
    }
    println!("example encoder, seq {SEQ}, {} nodes, {} bytes of text, median of {runs} runs:", g.len(), text.len());
    println!("  parse           {:>10.3?}", median(parse_times));
    println!("  interp (f32)    {:>10.3?}", median(run_times));
    println!("  interp precise  {:>10.3?}", median(precise_times));
}
