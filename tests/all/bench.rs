//! The benchmark harness (`ladder::bench`, `ladder bench`): workloads match the peers'
//! definitions (shapes, io bytes, FLOPs), selection by prefix, measurements and their JSON.
//! No assertion is about timing.

use ladder::bench::{self, BackendKind, FloorKind, Floors};

#[test]
fn workloads_match_the_peer_definitions() {
    // (name, output shape, io bytes as ../shared/peers/common.py counts them, flops)
    let f = 4usize;
    let cases: &[(&str, &[u64], usize, f64)] = &[
        ("W0_sgemm_1024", &[1024, 1024], 3 * 1024 * 1024 * f, 2.0 * 1024f64.powi(3)),
        ("W1_gelu_4M", &[4096, 1024], (2 * 4096 * 1024 + 2 * 1024) * f, 0.0),
        ("W1_gelu_16K", &[16, 1024], (2 * 16 * 1024 + 2 * 1024) * f, 0.0),
        ("W2_softmax_4096x1024", &[4096, 1024], 2 * 4096 * 1024 * f, 0.0),
        ("W2_softmax_64x128", &[64, 128], 2 * 64 * 128 * f, 0.0),
        ("W3_layernorm_4096x1024", &[4096, 1024], (2 * 4096 * 1024 + 2 * 1024) * f, 0.0),
        (
            "W4_mlp_256x1024x4096",
            &[256, 1024],
            (2 * 256 * 1024 + 2 * 1024 * 4096) * f,
            2.0 * 256.0 * 1024.0 * 4096.0 * 2.0,
        ),
        ("W5_attn_8x512x64", &[1, 8, 512, 64], 4 * 8 * 512 * 64 * f, 2.0 * 2.0 * 8.0 * 512.0 * 512.0 * 64.0),
        ("W5_attn_causal", &[1, 8, 512, 64], 4 * 8 * 512 * 64 * f, 2.0 * 8.0 * 512.0 * 512.0 * 64.0),
        ("W5_attn_S4096", &[1, 8, 4096, 64], 4 * 8 * 4096 * 64 * f, 2.0 * 2.0 * 8.0 * 4096.0 * 4096.0 * 64.0),
        (
            "W6_encoder_s128_d256",
            &[1, 128, 256],
            (2 * 128 * 256 + 4 * 256 + 256 * 768 + 768 + 256 * 256 + 256 + 256 * 1024 + 1024 + 1024 * 256 + 256) * f,
            2.0 * 128.0 * 256.0 * 768.0
                + 4.0 * 128.0 * 128.0 * 256.0
                + 2.0 * 128.0 * 256.0 * 256.0
                + 4.0 * 128.0 * 256.0 * 1024.0,
        ),
        (
            "W7_conv_resnet_56x56x64",
            &[1, 64, 56, 56],
            (2 * 64 * 3136 + 2 * (64 * 64 * 9 + 64)) * f,
            2.0 * 2.0 * 64.0 * 576.0 * 3136.0,
        ),
        (
            "W7_conv_depthwise_56x56x128",
            &[1, 128, 56, 56],
            (2 * 128 * 3136 + 128 * 9 + 128 + 128 * 128 + 128) * f,
            2.0 * 128.0 * 9.0 * 3136.0 + 2.0 * 128.0 * 128.0 * 3136.0,
        ),
        (
            "W7_conv_stem_224",
            &[1, 64, 112, 112],
            (3 * 224 * 224 + 64 * 147 + 64 + 64 * 12544) * f,
            2.0 * 64.0 * 147.0 * 12544.0,
        ),
        ("W9_call_overhead_add16", &[16], (2 * 16 + 1) * f, 0.0),
    ];
    assert_eq!(cases.len(), bench::WORKLOADS.len());
    for &(name, out, io, flops) in cases {
        let w = bench::workload(name).unwrap();
        let y = w.graph.outputs()[0].value;
        let dims: Vec<u64> = w.graph.ty(y).shape.dims().iter().map(|d| d.as_const().unwrap()).collect();
        assert_eq!(dims, out, "{name} output shape");
        assert_eq!(w.io_bytes, io, "{name} io bytes");
        assert_eq!(w.flops, flops, "{name} flops");
        let kind = if flops > 0.0 { FloorKind::Gemm } else { FloorKind::Copy };
        assert_eq!(w.floor, kind, "{name} floor kind");
        if flops > 0.0 {
            // The counter over the graph agrees with the stated FLOPs (W6's elementwise
            // work is not counted by either).
            assert_eq!(bench::graph_flops(&w.graph), flops, "{name} graph flops");
        }
    }
}

#[test]
fn attention_workloads_know_their_score_matrix() {
    // What a materialised f32 [batch..., L, S] score matrix takes, for peak_bytes to be read
    // against.
    for (name, bytes) in [("W5_attn_8x512x64", 8 * 512 * 512 * 4), ("W5_attn_S4096", 8 * 4096 * 4096 * 4)] {
        assert_eq!(bench::attention_scores_bytes(&bench::workload(name).unwrap().graph), bytes, "{name}");
    }
    assert_eq!(bench::attention_scores_bytes(&bench::workload("W0_sgemm_1024").unwrap().graph), 0);
}

#[test]
fn selection_by_prefix() {
    assert_eq!(bench::select(&[]).unwrap().len(), bench::WORKLOADS.len());
    assert_eq!(bench::select(&["W5".into()]).unwrap(), vec!["W5_attn_8x512x64", "W5_attn_causal", "W5_attn_S4096"]);
    assert_eq!(
        bench::select(&["W9".into(), "W1_gelu_16".into()]).unwrap(),
        vec!["W1_gelu_16K", "W9_call_overhead_add16"]
    );
    assert_eq!(bench::select(&["W7".into()]).unwrap().len(), 3);
    assert!(matches!(bench::select(&["W8".into()]), Err(bench::BenchError::NoMatch(_))));
    assert!(matches!(bench::workload("nope"), Err(bench::BenchError::NoMatch(_))));
}

#[test]
fn measurements_and_json() {
    let mut floors = Floors::default();
    for name in ["W9_call_overhead_add16", "W2_softmax_64x128"] {
        let w = bench::workload(name).unwrap();
        for threads in [1, 2] {
            let m =
                bench::run(&w, BackendKind::Interp, threads, Some(3), &mut floors, bench::Native::default()).unwrap();
            assert_eq!(m.timing.runs, 3);
            assert!(m.timing.median_us > 0.0 && m.timing.min_us <= m.timing.median_us);
            assert!(m.floor_us > 0.0 && m.floor_ratio > 0.0 && m.compile_ms >= 0.0);
            let j = m.to_json();
            for key in ["workload", "threads", "median_us", "floor_ratio", "compile_ms", "floor_us", "gb_per_s"] {
                assert!(j.get(key).is_some(), "{key} missing from {j}");
            }
            assert_eq!(j["workload"], name);
            assert_eq!(j["threads"], threads);
            // This test binary does not install the counting allocator.
            assert!(j["peak_bytes"].is_null() && m.peak_bytes.is_none(), "{j}");
        }
    }
    // The CPU backend compiles and times the same workloads.
    let w = bench::workload("W9_call_overhead_add16").unwrap();
    let cpu = bench::run(&w, BackendKind::Cpu, 1, Some(3), &mut floors, bench::Native::default())
        .expect("the cpu backend runs W9");
    assert!(format!("{cpu:?}").contains("median"), "{cpu:?}");
}

#[test]
fn a_model_from_text_counts_its_flops_and_bytes() {
    let src = "graph m(%x: f32[8, 16]) {\n  %w = const w : f32[16, 4]\n  %y = matmul(%x, %w)\n  return %y\n}\n";
    let g = match ladder::text::parse(src) {
        Ok(g) => g,
        // The text form may spell constants differently; build the same graph instead.
        Err(_) => {
            let mut b = ladder::GraphBuilder::new("m");
            let x =
                b.input("x", ladder::DType::F32, [8u64, 16].iter().map(|&d| ladder::Dim::new(d)).collect()).unwrap();
            let w = b.named_constant("w", ladder::Tensor::from_f32(&[16, 4], vec![0.5; 64]).unwrap()).unwrap();
            let y = b.matmul(x, w).unwrap();
            b.output("y", y).unwrap();
            b.finish().unwrap()
        }
    };
    let x = ladder::Tensor::from_f32(&[8, 16], vec![1.0; 128]).unwrap();
    let w = bench::model_workload("m", g, vec![x]).unwrap();
    assert_eq!(w.flops, 2.0 * 8.0 * 4.0 * 16.0);
    assert_eq!(w.io_bytes, (128 + 64 + 32) * 4);
    assert_eq!(w.out_bytes, 32 * 4);
    assert_eq!(w.floor, FloorKind::Max);
}

#[test]
fn a_model_with_symbolic_dims_gets_its_outputs_bytes_from_the_run() {
    // The output's size is known only from the inputs: the copy floor must write all of it
    // (counting only its static dims made the floor read 99% and write 1%).
    let g = ladder::text::parse("graph sm(%x: f32[n, 64]) {\n  %y = softmax(%x) {axis=-1}\n  return %y\n}\n").unwrap();
    let x = ladder::Tensor::from_f32(&[100, 64], vec![0.25; 6400]).unwrap();
    let w = bench::model_workload("sm", g, vec![x]).unwrap();
    assert_eq!((w.io_bytes, w.out_bytes), (2 * 6400 * 4, 6400 * 4));
    assert_eq!(w.flops, 0.0);
}

#[test]
fn cli_prints_json_and_a_table() {
    let exe = env!("CARGO_BIN_EXE_ladder");
    let out = std::process::Command::new(exe)
        .args(["bench", "--workload", "W9,W2_softmax_64", "--threads", "1,2", "--runs", "3", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let names: Vec<&str> = rows.iter().map(|r| r["workload"].as_str().unwrap()).collect();
    assert_eq!(names, ["W2_softmax_64x128", "W2_softmax_64x128", "W9_call_overhead_add16", "W9_call_overhead_add16"]);
    for r in rows {
        // peak_bytes: the binary counts its heap.
        for key in ["threads", "median_us", "floor_ratio", "compile_ms", "peak_bytes"] {
            assert!(r[key].is_number(), "{key} in {r}");
        }
    }
    let out = std::process::Command::new(exe)
        .args(["bench", "--workload", "W9", "--threads", "1", "--runs", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("W9_call_overhead_add16") && text.contains("floor") && text.contains("peak_bytes"), "{text}");
    // --no-pack-weights: the same workload with its weights through the `gemm` crate.
    let out = std::process::Command::new(exe)
        .args(["bench", "--backend", "cpu", "--workload", "W6", "--threads", "1", "--runs", "1", "--no-pack-weights"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("W6_encoder_s128_d256"));
    // --profile: one line per step of the compiled plan, with its share of the total.
    let out = std::process::Command::new(exe)
        .args(["bench", "--backend", "cpu", "--workload", "W4", "--threads", "1", "--runs", "1", "--profile"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let steps: Vec<&str> = text.lines().filter(|l| l.starts_with("    ")).collect();
    assert!(steps.iter().any(|l| l.contains("matmul") && l.contains("+ epilogue") && l.ends_with('%')), "{text}");
    assert!(steps.iter().any(|l| l.contains("gelu")), "{text}");
    for bad in [
        &["bench", "--backend", "gpu"][..],
        &["bench", "--workload", "W8"],
        &["bench", "--threads", "0"],
        &["bench", "--backend", "interp", "--workload", "W1", "--profile"],
    ] {
        let out = std::process::Command::new(exe).args(bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?} should fail");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{bad:?}");
    }
}

/// `LADDER_MAX_ISA` caps the path ladder's kernels run, and `ladder bench` says which ran.
#[test]
fn the_isa_cap_is_reported() {
    let exe = env!("CARGO_BIN_EXE_ladder");
    for cap in ["portable", "avx2"] {
        let out = std::process::Command::new(exe)
            .args(["bench", "--backend", "cpu", "--workload", "W9", "--runs", "3", "--json"])
            .env("LADDER_MAX_ISA", cap)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let row = &rows[0];
        assert_eq!(row["isa_cap"], cap);
        let cpu = ladder::backend::cpu::isa::Isa::from_name(row["cpu_isa"].as_str().unwrap()).unwrap();
        let want = cpu.min(ladder::backend::cpu::isa::Isa::from_name(cap).unwrap());
        assert_eq!(row["isa"], want.name(), "{row}");
    }
}

// ---------------------------------------------------------------------------------------------
// Compile-time workloads (`ladder bench --compile`)

/// Every compile workload family, built small, compiles for the CPU backend and agrees with the
/// interpreter; its size is at least what was asked (whole blocks are added).
#[test]
fn compile_workloads_run_and_agree_with_the_interpreter() {
    use ladder::bench::Family;
    for family in Family::ALL {
        for nodes in [family.min_nodes(), 2 * family.min_nodes()] {
            let w = family.build(&format!("{}_test", family.prefix()), nodes).unwrap();
            assert!(w.nodes() >= nodes, "{} has {} nodes, asked {nodes}", w.name, w.nodes());
            let want = ladder::interp::run(&w.graph, &w.inputs, &ladder::interp::Options::default())
                .unwrap_or_else(|e| panic!("{}: {e}", w.name))
                .outputs;
            let options = ladder::CompileOptions::native_cpu(2).unwrap();
            let plan = ladder::compile(&w.graph, &options).unwrap_or_else(|e| panic!("{}: {e}", w.name));
            let got = plan.run(&w.inputs).unwrap_or_else(|e| panic!("{}: {e}", w.name)).outputs;
            assert_eq!(got.len(), want.len());
            for (g, v) in got.iter().zip(&want) {
                let (g, v) = (g.to_f64_vec(), v.to_f64_vec());
                assert_eq!(g.len(), v.len());
                for (k, (a, b)) in g.iter().zip(&v).enumerate() {
                    assert!(b.is_finite(), "{}: the reference is not finite at {k}: {b}", w.name);
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{} element {k}: {a} vs {b}", w.name);
                }
            }
        }
    }
}

#[test]
fn compile_workloads_are_selected_by_prefix_and_named_by_size() {
    let all = bench::select_compile(&[]).unwrap();
    assert_eq!(all.len(), bench::COMPILE_WORKLOADS.len());
    assert_eq!(
        bench::select_compile(&["C1".into()]).unwrap(),
        ["C1_chain_1k", "C1_chain_4k", "C1_chain_16k", "C1_chain_100k"]
    );
    assert_eq!(bench::select_compile(&["C3_encoder_1k".into(), "C4".into()]).unwrap().len(), 4);
    assert!(matches!(bench::select_compile(&["W1".into()]), Err(bench::BenchError::NoCompileMatch(_))));
    assert!(matches!(bench::compile_workload("C9"), Err(bench::BenchError::NoCompileMatch(_))));
    // The sizes in the names are the node counts asked for.
    for &(name, family, nodes) in bench::COMPILE_WORKLOADS {
        assert!(name.starts_with(family.prefix()), "{name}");
        let size = name.rsplit('_').next().unwrap();
        let n: usize = size.trim_end_matches('k').parse::<usize>().unwrap() * 1000;
        assert_eq!(n, nodes, "{name}");
    }
    let w = bench::compile_workload("C1_chain_1k").unwrap();
    assert!((1000..1010).contains(&w.nodes()), "{}", w.nodes());
}

/// A compile measurement counts its runs, reports the plan's steps, and compares sizes of one
/// family by their scaling exponent (timings themselves are not asserted).
#[test]
fn compile_measurements_and_their_scaling() {
    let w = bench::Family::Rows.build("C2_rows_test", 40).unwrap();
    let m = bench::time_compile(&w, 1, Some(2), bench::Native::default()).unwrap();
    assert_eq!(m.timing.runs, 2);
    assert_eq!((m.nodes, m.threads, m.workload.as_str()), (w.nodes(), 1, "C2_rows_test"));
    assert!(m.steps > 0 && m.native_kernels > 0, "{m:?}");
    assert!(m.timing.min_us > 0.0 && m.timing.min_us <= m.timing.median_us);
    // This test binary does not install the counting allocator.
    assert!(m.heap_peak_bytes.is_none());
    // Scaling: time ratio 8 for 4 times the nodes is exponent 1.5; the base itself has none.
    let mut big = m.clone();
    big.nodes = 4 * m.nodes;
    big.timing.median_us = 8.0 * m.timing.median_us;
    let (ratio, exponent) = big.scaling(&m).unwrap();
    assert!((ratio - 8.0).abs() < 1e-9 && (exponent - 1.5).abs() < 1e-9, "{ratio} {exponent}");
    assert!(m.scaling(&m).is_none());
    let mut other = big.clone();
    other.family = bench::Family::Chain;
    assert_eq!(bench::scaling_bases(&[big.clone(), m.clone(), other]), [1, 1, 2]);
    let j = big.to_json(Some(&m));
    assert_eq!(j["base_workload"], "C2_rows_test");
    assert!((j["scaling_exponent"].as_f64().unwrap() - 1.5).abs() < 1e-9, "{j}");
    for key in ["nodes", "steps", "median_ms", "min_ms", "runs", "us_per_node", "time_ratio"] {
        assert!(j[key].is_number(), "{key} in {j}");
    }
}

#[test]
fn cli_times_compilation() {
    let exe = env!("CARGO_BIN_EXE_ladder");
    let out = std::process::Command::new(exe)
        .args(["bench", "--compile", "--workload", "C1_chain_1k", "--threads", "1", "--runs", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap();
    for column in
        ["workload", "thr", "nodes", "steps", "compile_ms", "runs", "us/node", "x_time", "exponent", "heap_MB"]
    {
        assert!(header.split_whitespace().any(|c| c == column), "{column} missing: {text}");
    }
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "C1_chain_1k");
    assert_eq!(row[1], "1");
    assert!(row[2].parse::<usize>().unwrap() >= 1000, "{text}");
    // The binary counts its heap.
    assert!(row[9].parse::<f64>().is_ok(), "{text}");
    // JSON, with two sizes of one family: the larger has a scaling exponent against the smaller.
    let out = std::process::Command::new(exe)
        .args([
            "bench",
            "--compile",
            "--workload",
            "C3_encoder_1k,C1_chain_1k",
            "--threads",
            "1",
            "--runs",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["workload"].as_str().unwrap()).collect();
    assert_eq!(names, ["C1_chain_1k", "C3_encoder_1k"]);
    for r in rows {
        assert!(r["median_ms"].is_number() && r["heap_peak_bytes"].is_number(), "{r}");
        assert!(r["scaling_exponent"].is_null(), "{r}");
    }
    for bad in [
        &["bench", "--compile", "--workload", "W1"][..],
        &["bench", "--compile", "--backend", "interp", "--workload", "C1_chain_1k"],
        &["bench", "--compile", "--profile", "--workload", "C1_chain_1k"],
    ] {
        let out = std::process::Command::new(exe).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} should be a usage error");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{bad:?}");
    }
}

#[test]
fn cli_times_training_steps() {
    let exe = env!("CARGO_BIN_EXE_ladder");
    let out = std::process::Command::new(exe)
        .args(["bench", "--train", "--workload", "T1", "--threads", "1", "--runs", "3", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["workload"], "T1_train_mlp_64x256x512x10");
    assert!(r["median_us"].as_f64().unwrap() > 0.0, "{r}");
    // The cut keeps less than everything the backward reads, and the binary counts its heap.
    assert!(r["saved_bytes"].as_u64().unwrap() < r["save_all_bytes"].as_u64().unwrap(), "{r}");
    assert!(r["peak_bytes"].as_u64().is_some(), "{r}");
    assert!(r["last_loss"].as_f64().unwrap() < r["first_loss"].as_f64().unwrap(), "{r}");
    for bad in [
        &["bench", "--train", "--workload", "W1"][..],
        &["bench", "--train", "--compile"],
        &["bench", "--train", "--backend", "interp"],
    ] {
        let out = std::process::Command::new(exe).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} should be a usage error");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{bad:?}");
    }
}

#[test]
fn cli_times_start_up() {
    let exe = env!("CARGO_BIN_EXE_ladder");
    let bert = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/bert_ts/model.onnx");
    let out = std::process::Command::new(exe)
        .args(["bench", bert, "--startup", "--threads", "1", "--runs", "1", "--json", "--dim", "seq=4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    // Named by its directory; the tiered session's first result came from the reference tier
    // (the native compile starts after the reference plan is built, and the first call is made
    // at once), and its native plan took over.
    assert_eq!((r["model"].as_str(), r["threads"].as_u64()), (Some("bert_ts"), Some(1)), "{r}");
    assert_eq!(r["first_tier"], "reference", "{r}");
    for key in ["compile_first_ms", "tiered_first_ms", "native_ready_ms", "reference_run_ms", "native_run_ms"] {
        assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r}");
    }
    let table = std::process::Command::new(exe).args(["bench", bert, "--startup", "--runs", "1"]).output().unwrap();
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap().contains("tiered_first_ms"), "{text}");
    assert!(text.lines().nth(1).unwrap().starts_with("bert_ts "), "{text}");
    for bad in [
        &["bench", "--startup"][..],
        &["bench", bert, "--startup", "--backend", "interp"],
        &["bench", bert, "--startup", "--compile"],
        &["bench", bert, "--startup", "--profile"],
    ] {
        let out = std::process::Command::new(exe).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} should be a usage error");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{bad:?}");
    }
}
