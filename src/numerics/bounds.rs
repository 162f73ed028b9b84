//! Element bounds of the ops whose error analysis is more than a line: the norms, batch
//! norm, `lstm`, attention and `cross_entropy` (see NUMERICS.md for each derivation), and the
//! lengths of the dot products, pooling windows and broadcasts the bounds scale with.

use super::*;

/// `layer_norm`, `group_norm` and `rms_norm`: one normalised row per group of elements.
pub(super) fn norm_bounds(
    kind: BoundKind,
    op: OpKind,
    ctx: &CompareCtx,
    r: &[f64],
    dtype: DType,
) -> Result<Vec<ElemBound>, String> {
    let e = eps(dtype);
    let small = tiny(dtype);
    let maxf = max_finite(dtype);
    let node = ctx.graph.node(ctx.node);
    let x = arg_tensor(ctx, 0)?;
    let xs = x.shape().to_vec();
    let xv = x.to_f64_vec();
    check_len(&xv, r)?;
    let eps_attr = node.attrs.float("eps");
    let w = if arg_count(ctx) > 1 { Some(arg_tensor(ctx, 1)?.to_f64_vec()) } else { None };
    let b = if arg_count(ctx) > 2 { Some(arg_tensor(ctx, 2)?.to_f64_vec()) } else { None };
    // Row length and the parameter index of each element of a row.
    let (row, param): (usize, Box<dyn Fn(usize) -> usize>) = if op == OpKind::GroupNorm {
        let c = xs.get(1).copied().unwrap_or(0);
        let groups = usize::try_from(node.attrs.int("groups")).unwrap_or(1).max(1);
        let inner: usize = xs.iter().skip(2).product();
        let per = c / groups;
        let block = per * inner;
        (
            block,
            Box::new(move |flat: usize| ((flat / block.max(1)) % groups) * per + (flat % block.max(1)) / inner.max(1)),
        )
    } else {
        let axis = normalize_axis(node.attrs.int("axis"), xs.len()).map_err(|e| e.to_string())?;
        let n: usize = xs[axis..].iter().product();
        (n, Box::new(move |flat: usize| flat % n.max(1)))
    };
    let mut out = vec![ElemBound::new(0.0, true); r.len()];
    if row == 0 {
        return Ok(out);
    }
    for (ri, chunk) in xv.chunks(row).enumerate() {
        let s = group_stats(chunk);
        let in_range = |k: f64| k * s.n * s.max_abs * s.max_abs <= maxf;
        if kind == BoundKind::RmsNorm {
            let ms = chunk.iter().map(|v| v * v).sum::<f64>() / s.n;
            let rho =
                ((s.n + 2.0) * e * ms + e * eps_attr.abs() + 4.0 * small) / (2.0 * (ms + eps_attr).abs()) + 2.0 * e;
            let rs = 1.0 / (ms + eps_attr).sqrt();
            for (j, &v) in chunk.iter().enumerate() {
                let flat = ri * row + j;
                let wj = w.as_ref().and_then(|w| w.get(param(flat)).copied()).unwrap_or(1.0);
                // The last term: whichever pairwise product is formed first may be subnormal.
                let sub = 2.0 * small * e * (rs + wj.abs() + v.abs());
                // An infinite weight times an `x̂` below the smallest subnormal (`tiny eps`),
                // which may round to zero: ±inf or NaN, as for the centred norms.
                let xhat = v * rs;
                let sign_unknown = !wj.is_finite() && xhat.abs() <= xhat.abs() * (rho + e) + small * e;
                out[flat] = ElemBound::new(
                    2.0 * r[flat].abs() * (rho + 2.0 * e) + sub,
                    in_range(4.0) && rho < 0.25 && !sign_unknown,
                );
            }
            continue;
        }
        let var = s.ss / s.n;
        let (ess, delta) = ss_error(&s, e, small);
        let evar = ess / s.n + e * (var + eps_attr.abs());
        let rho = evar / (2.0 * (var + eps_attr).abs()) + 2.0 * e;
        let rs = 1.0 / (var + eps_attr).sqrt();
        for (j, &v) in chunk.iter().enumerate() {
            let flat = ri * row + j;
            let p = param(flat);
            let wj = w.as_ref().and_then(|w| w.get(p).copied()).unwrap_or(1.0);
            let bj = b.as_ref().and_then(|b| b.get(p).copied()).unwrap_or(0.0);
            let xhat = (v - s.mean) * rs;
            let err_xhat = xhat.abs() * (rho + e) + delta * rs;
            // The last term: whichever pairwise product of `x - mean`, `r` and `w` is formed
            // first may be subnormal (spacing `tiny eps`).
            let abs = 2.0 * (wj.abs() * err_xhat + e * ((xhat * wj).abs() + bj.abs() + r[flat].abs()))
                + 2.0 * small * e * ((v - s.mean).abs() + rs + wj.abs());
            // An infinite weight times an `x̂` whose sign rounding decides (0 in the reference,
            // `±tiny` computed) is NaN or ±inf: either is the op's value to within rounding.
            // (Below the smallest subnormal, `tiny eps`, `x̂` may round to zero itself.)
            let sign_unknown = !wj.is_finite() && xhat.abs() <= err_xhat + small * e;
            out[flat] = ElemBound::new(abs, in_range(16.0) && rho < 0.25 && !sign_unknown);
        }
    }
    Ok(out)
}

pub(super) fn batch_norm_bounds(ctx: &CompareCtx, r: &[f64], dtype: DType) -> Result<Vec<ElemBound>, String> {
    let (e, maxf) = (eps(dtype), max_finite(dtype));
    let node = ctx.graph.node(ctx.node);
    let x = arg_tensor(ctx, 0)?;
    let xs = x.shape().to_vec();
    let xv = x.to_f64_vec();
    check_len(&xv, r)?;
    let params: Vec<Vec<f64>> =
        (1..arg_count(ctx)).map(|i| arg_tensor(ctx, i).map(Tensor::to_f64_vec)).collect::<Result<_, _>>()?;
    let eps_attr = node.attrs.float("eps");
    let c = xs.get(1).copied().unwrap_or(1).max(1);
    let inner: usize = xs.iter().skip(2).product::<usize>().max(1);
    Ok((0..xv.len())
        .map(|flat| {
            let ch = (flat / inner) % c;
            let p = |i: usize, default: f64| params.get(i).and_then(|v| v.get(ch).copied()).unwrap_or(default);
            let (mean, var, w, b) = (p(0, 0.0), p(1, 1.0), p(2, 1.0), p(3, 0.0));
            let rho = e * (var.abs() + eps_attr.abs()) / (2.0 * (var + eps_attr).abs()) + 2.0 * e;
            let xhat = (xv[flat] - mean) / (var + eps_attr).sqrt();
            // The last term: whichever pairwise product is formed first (a weight folded into
            // the scale, the mean into the shift) may be subnormal (spacing `tiny eps`).
            let rs = 1.0 / (var + eps_attr).sqrt();
            let abs = 2.0 * ((xhat * w).abs() * (rho + 2.0 * e) + e * b.abs() + e * r[flat].abs())
                + 2.0 * tiny(dtype) * e * (xv[flat].abs() + mean.abs() + rs.abs() + w.abs());
            // `var + eps` cancelling to within a quarter of itself: not determined by the dtype.
            // An infinite `x - mean` (either infinite) times a scale `rsqrt(var + eps) w` that
            // the dtype may round to 0 (below its smallest normal) is ±inf or NaN.
            let underflow = (xv[flat] - mean).is_infinite() && (rs * w).abs() < tiny(dtype);
            // A product past the dtype's range (`x · rsqrt(var + eps) w`, or the mean's, or the
            // scale `rsqrt(var + eps) w` itself, which times an `x - mean` of 0 is NaN) is ±inf
            // or NaN where the reference may stay finite, and with an infinite bias NaN.
            let scale = (rs * w).abs();
            let fits = |v: f64| !v.is_finite() || v.abs() <= maxf;
            let in_range = fits(scale) && fits(xv[flat] * scale) && fits(mean * scale) && fits(xhat * w);
            ElemBound::new(abs, rho < 0.25 && !underflow && in_range)
        })
        .collect())
}

/// `lstm`: the recurrence run again in f64 beside a first-order bound on the error of each
/// computed state (`E_h`, `E_c`, zero at the inputs), in the compute dtype (f32 for f16 and
/// bf16, whose one final rounding the comparison's `2 ulp` covers). Per step and batch row,
/// with `e` the compute dtype's epsilon:
/// - gate `g_j = xw_j + Σ_k h_k r_jk`: `E_g = (H + 2) e S_j + Σ_k |r_jk| E_h,k + H tiny`,
///   `S_j = |xw_j| + Σ_k |h_k r_jk|`;
/// - `σ(g)`: `σ'(g*) E_g + 4 e σ(g)`, `tanh(g)`: `tanh'(g*) E_g + 2 e |tanh g|`, where `g*` is
///   the point of `[g - E_g, g + E_g]` nearest 0 (both slopes fall with `|g|`);
/// - `c' = f c + i c̃`: the products' errors (`|f| E_c + |c| E_f + E_f E_c`, likewise for
///   `i c̃`) and three roundings; `h' = o tanh(c')` the same way.
///
/// Each element's bound is twice its `E`. A batch row is excused from the first step where a
/// value is non-finite or a gate's `S` overflows the dtype.
pub(super) fn lstm_bounds(ctx: &CompareCtx, r: &[f64]) -> Result<Vec<ElemBound>, String> {
    let (xw, w) = (arg_tensor(ctx, 0)?, arg_tensor(ctx, 1)?);
    let (h0, c0) = (arg_tensor(ctx, 2)?, arg_tensor(ctx, 3)?);
    let xs = xw.shape().to_vec();
    let [steps, batch, gates] = xs[..] else { return Err(format!("lstm xw has shape {xs:?}")) };
    let hd = gates / 4;
    let reverse = ctx.graph.node(ctx.node).attrs.bool("reverse");
    let dtype = xw.dtype();
    let (e, tiny_c, maxf) = if dtype == DType::F64 {
        (f64::EPSILON, f64::MIN_POSITIVE, f64::MAX)
    } else {
        (f32::EPSILON as f64, f32::MIN_POSITIVE as f64, max_finite(dtype))
    };
    let (xw, w) = (xw.to_f64_vec(), w.to_f64_vec());
    let (mut h, mut c) = (h0.to_f64_vec(), c0.to_f64_vec());
    let (mut eh, mut ec) = (vec![0.0; h.len()], vec![0.0; c.len()]);
    let mut ok: Vec<bool> =
        (0..batch).map(|b| h[b * hd..][..hd].iter().chain(&c[b * hd..][..hd]).all(|v| v.is_finite())).collect();
    let mut out = vec![ElemBound::new(0.0, false); r.len()];
    if out.len() != steps * 2 * batch * hd {
        return Err(format!("lstm reference has {} elements", out.len()));
    }
    // The slopes at `a >= 0`, without cancellation: σ(a) σ(-a), and 4t / (1 + t)² with
    // t = e^(-2a) (= 1 - tanh²(a)).
    let nearest0 = |g: f64, err: f64| (g.abs() - err).max(0.0);
    let dsig = |a: f64| crate::ops::nn::sigmoid(a) * crate::ops::nn::sigmoid(-a);
    let dtanh = |a: f64| {
        let t = (-2.0 * a).exp();
        4.0 * t / ((1.0 + t) * (1.0 + t))
    };
    let (mut gv, mut ge) = (vec![0.0; gates], vec![0.0; gates]);
    for k in 0..steps {
        let t = if reverse { steps - 1 - k } else { k };
        for b in 0..batch {
            let (hb, ehb) = (&h[b * hd..][..hd], &eh[b * hd..][..hd]);
            for j in 0..gates {
                let x = xw[(t * batch + b) * gates + j];
                let row = &w[j * hd..][..hd];
                let dot: f64 = row.iter().zip(hb).map(|(a, v)| a * v).sum();
                let s = x.abs() + row.iter().zip(hb).map(|(a, v)| (a * v).abs()).sum::<f64>();
                // A zero weight passes on no error, even an unbounded one (no `0 * inf`).
                let inherited: f64 =
                    row.iter().zip(ehb).filter(|(a, _)| **a != 0.0).map(|(a, err)| a.abs() * err).sum();
                gv[j] = x + dot;
                ge[j] = (hd as f64 + 2.0) * e * s + inherited + hd as f64 * tiny_c;
                ok[b] &= x.is_finite() && s <= maxf && gv[j].is_finite();
            }
            for j in 0..hd {
                let sg = |n: usize| {
                    let (g, err) = (gv[n * hd + j], ge[n * hd + j]);
                    let v = crate::ops::nn::sigmoid(g);
                    // Plus `tiny`: σ of a very negative gate underflows (`σ(-133)` is 1e-58,
                    // 0 in f32), which a huge state it multiplies (`f c` with c = 1e30) shows.
                    (v, dsig(nearest0(g, err)) * err + 4.0 * e * v + tiny_c)
                };
                let ((i, ei), (o, eo), (f, ef)) = (sg(0), sg(1), sg(2));
                let (gc, egc) = (gv[3 * hd + j], ge[3 * hd + j]);
                let cand = gc.tanh();
                let ecand = dtanh(nearest0(gc, egc)) * egc + 2.0 * e * cand.abs();
                let at = b * hd + j;
                let (cv, cerr) = (c[at], ec[at]);
                let cn = f * cv + i * cand;
                let ecn = f.abs() * cerr
                    + cv.abs() * ef
                    + ef * cerr
                    + i.abs() * ecand
                    + cand.abs() * ei
                    + ei * ecand
                    + e * ((f * cv).abs() + (i * cand).abs() + cn.abs())
                    + 2.0 * tiny_c;
                let tc = cn.tanh();
                let etc = dtanh(nearest0(cn, ecn)) * ecn + 2.0 * e * tc.abs();
                let hn = o * tc;
                let ehn = o.abs() * etc + tc.abs() * eo + eo * etc + e * hn.abs() + tiny_c;
                // An error bound past every value (a state of 1e30 feeds a gate whose
                // inputs cancel) bounds nothing from here on: the row is excused.
                ok[b] &= cn.is_finite() && cn.abs() <= maxf && ecn.is_finite() && ehn.is_finite();
                (c[at], ec[at], h[at], eh[at]) = (cn, ecn, hn, ehn);
                let pos = |s: usize| ((t * 2 + s) * batch + b) * hd + j;
                out[pos(0)] = ElemBound::new(2.0 * ehn, ok[b]);
                out[pos(1)] = ElemBound::new(2.0 * ecn, ok[b]);
            }
        }
    }
    Ok(out)
}

pub(super) fn attention_bounds(ctx: &CompareCtx, r: &[f64], dtype: DType) -> Result<Vec<ElemBound>, String> {
    let e = eps(dtype);
    let maxf = max_finite(dtype);
    let g = ctx.graph;
    let node = g.node(ctx.node);
    let (q, k, v) = (arg_tensor(ctx, 0)?, arg_tensor(ctx, 1)?, arg_tensor(ctx, 2)?);
    let (qs, ks) = (q.shape().to_vec(), k.shape().to_vec());
    let d = qs[qs.len() - 1];
    let s_len = ks[ks.len() - 2];
    let scale = match node.attrs.float("scale") {
        sc if sc.is_nan() => {
            if d == 0 {
                0.0
            } else {
                1.0 / (d as f64).sqrt()
            }
        }
        sc => sc,
    };
    // P = attention(q, k, |v|, mask): the weights' contact with |v|. `v` gets an input of its
    // own, as it may be the same graph input as `q` or `k`.
    let p = {
        let mut pg = Graph::new("attention_abs_v");
        let mut args = Vec::new();
        for (i, &x) in g.inputs().iter().enumerate() {
            pg.add_input(&g.input_name(i), g.ty(x).clone()).map_err(|e| e.to_string())?;
        }
        let abs_v = pg.add_input("abs_v", g.ty(node.args[2]).clone()).map_err(|e| e.to_string())?;
        for (j, &a) in node.args.iter().enumerate() {
            let i = g.inputs().iter().position(|&x| x == a).ok_or("an argument is not an input")?;
            args.push(if j == 2 { abs_v } else { pg.inputs()[i] });
        }
        let out = pg.add_node(node.op, &args, node.attrs.clone()).map_err(|e| e.to_string())?;
        pg.add_output("out", out).map_err(|e| e.to_string())?;
        let mut inputs = ctx.inputs.to_vec();
        inputs.push(map_numbers(v, f64::abs));
        let o =
            interp::run(&pg, &inputs, &Options { precise: true, ..Options::default() }).map_err(|e| e.to_string())?;
        o.outputs.first().map(Tensor::to_f64_vec).ok_or("no output")?
    };
    check_len(&p, r)?;
    // Q[b.., l] = max_j Σ_d |q_ld| |k_jd|, by a helper graph run in precise mode.
    let mut h = Graph::new("attention_scores");
    let aq = h.add_input("q", g.ty(node.args[0]).clone()).map_err(|e| e.to_string())?;
    let ak = h.add_input("k", g.ty(node.args[1]).clone()).map_err(|e| e.to_string())?;
    let attr = |pairs: Vec<(&str, AttrValue)>, op: OpKind| {
        Attrs::resolve(op.spec().attrs, pairs.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
            .map_err(|e| e.to_string())
    };
    let mm = h
        .add_node(OpKind::Matmul, &[aq, ak], attr(vec![("transpose_b", AttrValue::Bool(true))], OpKind::Matmul)?)
        .map_err(|e| e.to_string())?;
    let mx = h
        .add_node(OpKind::ReduceMax, &[mm], attr(vec![("axes", AttrValue::Ints(vec![-1]))], OpKind::ReduceMax)?)
        .map_err(|e| e.to_string())?;
    h.add_output("out", mx).map_err(|e| e.to_string())?;
    let abs_in = [map_numbers(q, finite_abs), map_numbers(k, finite_abs)];
    let qk = interp::run(&h, &abs_in, &Options { precise: true, ..Options::default() }).map_err(|e| e.to_string())?;
    let qk_t = qk.outputs.first().ok_or("no output")?;
    let (qk_shape, qk_vals) = (qk_t.shape().to_vec(), qk_t.to_f64_vec());
    // Largest finite |mask| per row (its own last axis), for float masks.
    let mask = if arg_count(ctx) > 3 { Some(arg_tensor(ctx, 3)?) } else { None };
    let mask_rows: Option<(Vec<usize>, Vec<f64>)> = mask.filter(|m| m.dtype().is_float()).map(|m| {
        let ms = m.shape().to_vec();
        let vals = m.to_f64_vec();
        if ms.is_empty() {
            let x = vals.first().copied().unwrap_or(0.0);
            return (Vec::new(), vec![if x.is_finite() { x.abs() } else { 0.0 }]);
        }
        let last = ms[ms.len() - 1].max(1);
        let rows: Vec<f64> = vals
            .chunks(last)
            .map(|c| c.iter().filter(|x| x.is_finite()).fold(0.0, |a: f64, x| a.max(x.abs())))
            .collect();
        let mut rs = ms[..ms.len() - 1].to_vec();
        if vals.is_empty() {
            rs = vec![0];
        }
        (rs, rows)
    });
    let vmax = v.to_f64_vec().iter().filter(|x| x.is_finite()).fold(0.0, |a: f64, x| a.max(x.abs()));
    // The output's concrete shape: the batch dims of q, k, v broadcast, then [L, Dv].
    let vs = v.shape();
    let mut out_dims = broadcast_dims(&broadcast_dims(&qs[..qs.len() - 2], &ks[..ks.len() - 2]), &vs[..vs.len() - 2]);
    out_dims.extend([qs[qs.len() - 2], vs[vs.len() - 1]]);
    let sf = s_len as f64;
    Ok((0..r.len())
        .map(|flat| {
            let idx = unravel(flat, &out_dims);
            let row_idx = &idx[..idx.len() - 1];
            let qmax = if qk_vals.is_empty() { 0.0 } else { qk_vals[broadcast_flat(row_idx, &qk_shape)].max(0.0) };
            let mmax = match &mask_rows {
                Some((rs, vals)) if !vals.is_empty() => vals[broadcast_flat(row_idx, rs).min(vals.len() - 1)],
                _ => 0.0,
            };
            // With D = 0 (or nothing to multiply) every score is exactly 0, whatever the scale.
            let scaled = if d == 0 || qmax == 0.0 { 0.0 } else { scale.abs() * qmax };
            let score_err = (d as f64 + 2.0) * e * scaled + e * mmax;
            let pi = p[flat].abs();
            // The last term: probabilities below `tiny` may be flushed.
            // A score error E moves each weight by at most a factor e^(±2E).
            let abs = 2.0
                * ((2.0 * e * (sf + 2.0) + (2.0 * score_err).exp_m1() + (sf + 1.0) * e) * pi
                    + 2.0 * e * sf.max(1.0).ln() * vmax
                    + sf * tiny(dtype) * vmax);
            // Scores are formed unscaled or scaled first: both must stay in range.
            // Beyond E = 1 the dtype cannot resolve the softmax of this row at all (a float
            // mask of 1e18 swallows scores of 1e5): excused like an overflow. A flash-style
            // kernel sums `Σ e_i v_i` before dividing by `Σ e_i` (each `e_i <= 1`, the sum up
            // to `S`), so the weighted values must stay in range `S` times over.
            let in_range =
                qmax.max(scaled) <= maxf / 4.0 && mmax <= maxf / 4.0 && pi * sf.max(1.0) <= maxf && score_err <= 1.0;
            ElemBound::new(abs, in_range)
        })
        .collect())
}

pub(super) fn cross_entropy_bounds(ctx: &CompareCtx, r: &[f64], dtype: DType) -> Result<Vec<ElemBound>, String> {
    let e = eps(dtype);
    let node = ctx.graph.node(ctx.node);
    let (logits, target) = (arg_tensor(ctx, 0)?, arg_tensor(ctx, 1)?);
    let ls = logits.shape().to_vec();
    let (nb, c, inner) = match ls.len() {
        0 => return Err("cross_entropy logits of rank 0".into()),
        1 => (1, ls[0], 1),
        _ => (ls[0], ls[1], ls[2..].iter().product()),
    };
    let xv = logits.to_f64_vec();
    let tv = int_values(target);
    let ignore = node.attrs.int("ignore_index");
    let smoothing = node.attrs.float("label_smoothing");
    let cf = c as f64;
    let mut per = Vec::with_capacity(tv.len());
    let mut mags = Vec::with_capacity(tv.len());
    let mut rows_in_range = Vec::with_capacity(tv.len());
    // The log-probabilities, and with smoothing their sum over the classes, are formed in the
    // dtype (as PyTorch does): where they leave its range the loss is infinite there while
    // the precise loss need not be (a tiny smoothing times a huge sum).
    let limit = max_finite(dtype) * (1.0 - 4.0 * e);
    for b in 0..nb {
        for i in 0..inner {
            let t = tv.get(b * inner + i).copied().unwrap_or(ignore);
            if t == ignore || c == 0 {
                per.push(0.0);
                mags.push(0.0);
                rows_in_range.push(true);
                continue;
            }
            let row: Vec<f64> = (0..c).map(|k| xv[(b * c + k) * inner + i]).collect();
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x));
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            let logp: Vec<f64> = row.iter().map(|x| x - lse).collect();
            let nll = usize::try_from(t).ok().and_then(|t| logp.get(t)).map_or(0.0, |l| l.abs());
            let total = logp.iter().map(|x| x.abs()).sum::<f64>();
            let in_range = if smoothing > 0.0 { total <= limit } else { nll <= limit };
            let smooth = if smoothing > 0.0 { smoothing / cf * total } else { 0.0 };
            let l = (1.0 - smoothing) * nll + smooth;
            per.push(e * (5.0 * l + 2.0 * (cf + 2.0)));
            mags.push(l);
            rows_in_range.push(in_range);
        }
    }
    let count = tv.iter().filter(|&&t| t != ignore).count() as f64;
    let n = per.len() as f64;
    match node.attrs.str("reduction") {
        "none" => Ok(per.into_iter().zip(rows_in_range).map(|(b, ok)| ElemBound::new(b, ok)).collect()),
        red => {
            let sum_l = mags.iter().sum::<f64>();
            let total = per.iter().sum::<f64>() + n * e * sum_l;
            let b = if red == "sum" { total } else { total / count.max(1.0) };
            // The sum of the losses is formed before a mean divides it.
            let in_range = sum_l <= max_finite(dtype) && rows_in_range.iter().all(|&ok| ok);
            Ok(r.iter().map(|&rv| ElemBound::new(b + 2.0 * e * rv.abs(), in_range)).collect())
        }
    }
}

/// The accumulation length of one output element of a contraction.
pub(super) fn dot_length(op: OpKind, ctx: &CompareCtx) -> Result<usize, String> {
    let node = ctx.graph.node(ctx.node);
    let shape = |i: usize| arg_tensor(ctx, i).map(|t| t.shape().to_vec());
    let last = |s: &[usize], k: usize| s.get(s.len().wrapping_sub(k)).copied().unwrap_or(0);
    Ok(match op {
        OpKind::Bmm => last(&shape(0)?, 1),
        OpKind::Linear => last(&shape(0)?, 1) + usize::from(arg_count(ctx) > 2),
        OpKind::Addmm => last(&shape(1)?, 1) + 1,
        OpKind::Matmul => last(&shape(0)?, if node.attrs.bool("transpose_a") { 2 } else { 1 }),
        OpKind::Conv2d => shape(1)?.iter().skip(1).product::<usize>() + usize::from(arg_count(ctx) > 2),
        _ => shape(1)?.iter().skip(1).product::<usize>(),
    })
}

/// The window size of one output element of a pool.
pub(super) fn pool_length(op: OpKind, ctx: &CompareCtx) -> Result<usize, String> {
    let node = ctx.graph.node(ctx.node);
    if op == OpKind::AvgPool2d {
        return Ok(node.attrs.ints("kernel").iter().map(|k| k.unsigned_abs() as usize).product());
    }
    let s = arg_tensor(ctx, 0)?.shape().to_vec();
    Ok(s.iter().rev().take(2).product())
}

pub(super) fn broadcast_numel(a: &[usize], b: &[usize]) -> usize {
    broadcast_dims(a, b).iter().product()
}

/// The broadcast of two shapes (NumPy's rule; sizes assumed compatible).
pub(super) fn broadcast_dims(a: &[usize], b: &[usize]) -> Vec<usize> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            if da == 1 {
                db
            } else {
                da
            }
        })
        .collect()
}

/// Error bound on a two-pass sum of squared deviations computed in the dtype, and `Δ`, the
/// bound on the error of one computed deviation. Each square may also underflow (`tiny`).
pub(super) fn ss_error(s: &GroupStats, e: f64, tiny: f64) -> (f64, f64) {
    // The last term: the mean's sum and quotient may round to subnormals, each off by up to
    // the subnormal spacing `tiny eps` (not relative to the value).
    let delta = s.n * e * s.mean_abs + e * s.max_dev + (s.n + 1.0) * tiny * e;
    (2.0 * (s.n + 3.0) * e * s.ss + 2.0 * s.n * delta * delta + 4.0 * s.n * tiny, delta)
}
