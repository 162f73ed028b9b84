//! Library calls (`Step::Matmul`, `Step::Conv`, `Step::Library`) by their ops' meanings: the
//! interpreter's implementation of the op on whole tensors, and a step's per-channel
//! post-op. The reference executor runs these, and a native backend wherever it has no
//! kernel of its own.

use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrValue, Attrs, DType, TensorType};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// Runs `kind` (matmul or conv) with `attrs` through the interpreter's implementation.
pub fn eval_library(
    kind: OpKind,
    attrs: &Attrs,
    args: &[&Tensor],
    out_dtype: DType,
    out_shape: &[usize],
) -> Result<Tensor, EvalError> {
    eval_library_with(kind, attrs, args, out_dtype, out_shape, Default::default())
}

/// [`eval_library`] with the run's size symbols (for ops whose attributes are sizes).
pub fn eval_library_with(
    kind: OpKind,
    attrs: &Attrs,
    args: &[&Tensor],
    out_dtype: DType,
    out_shape: &[usize],
    symbols: std::collections::HashMap<String, u64>,
) -> Result<Tensor, EvalError> {
    let views: Vec<View> = args.iter().map(|t| View::from_tensor(t)).collect();
    let mut ctx = EvalCtx::new(false, u64::MAX);
    ctx.symbols = symbols;
    ctx.out_shape = Some(out_shape.to_vec());
    let ty = TensorType::new(
        out_dtype,
        crate::ir::Shape::from_static(&out_shape.iter().map(|&d| d as u64).collect::<Vec<_>>()),
    );
    let out = (kind.spec().eval)(kind, &mut ctx, attrs, &views, &ty)?;
    if out.shape() != out_shape || out.dtype() != out_dtype {
        return Err(EvalError::Invalid(format!(
            "{kind} produced {}{:?}, the program expects {out_dtype}{out_shape:?}",
            out.dtype(),
            out.shape()
        )));
    }
    Ok(out.to_tensor())
}

/// The attributes of a matmul call.
pub fn matmul_attrs(m: &super::MatmulCall) -> Attrs {
    let given = vec![
        ("transpose_a".to_string(), AttrValue::Bool(m.transpose_a)),
        ("transpose_b".to_string(), AttrValue::Bool(m.transpose_b)),
    ];
    Attrs::resolve(OpKind::Matmul.spec().attrs, given).unwrap_or_default()
}

/// A step's [`super::ChannelPost`] applied to its result `t` (f32 `[N, C, spatial...]`):
/// the reference meaning every executor matches. `bias` is the tensor of an
/// [`super::Addend::Channel`] addend (`C` values).
pub fn channel_post(post: &super::ChannelPost, t: Tensor, bias: Option<&Tensor>) -> Result<Tensor, EvalError> {
    let shape = t.shape().to_vec();
    let TensorData::F32(mut v) = t.into_data() else {
        return Err(EvalError::Invalid("a per-channel post-op on a result that is not f32".into()));
    };
    let channels = shape.get(1).copied().unwrap_or(1).max(1);
    let plane = shape.iter().skip(2).product::<usize>().max(1);
    match &post.addend {
        None => {}
        Some(super::Addend::Scalar(s)) => {
            let s = *s as f32;
            v.iter_mut().for_each(|x| *x += s);
        }
        Some(super::Addend::Channel(b)) => {
            let bias = bias.and_then(Tensor::as_f32).filter(|b| b.len() == channels).ok_or_else(|| {
                EvalError::Invalid(format!("the per-channel addend {b} is not {channels} f32 values"))
            })?;
            for (i, x) in v.iter_mut().enumerate() {
                *x += bias[(i / plane) % channels];
            }
        }
    }
    if post.relu {
        // The `max` prim against +0: NaN stays, -0 and negatives become +0.
        v.iter_mut().filter(|x| !(x.is_nan() || **x > 0.0)).for_each(|x| *x = 0.0);
    }
    let t = Tensor::new(shape, TensorData::F32(v)).map_err(|e| EvalError::Invalid(e.to_string()))?;
    match &post.activation {
        Some((op, attrs)) => eval_library(*op, attrs, &[&t], DType::F32, t.shape()),
        None => Ok(t),
    }
}

/// A convolution step's result before its post-op: `conv(x, w)`, then its pooling if it has
/// one. `conv_shape` is the convolution's result shape (`out_shape` without a pooling, else
/// the shape of the pooling's `unpooled` buffer).
pub fn eval_conv(
    c: &super::ConvCall,
    x: &Tensor,
    w: &Tensor,
    dtype: DType,
    conv_shape: &[usize],
    out_shape: &[usize],
) -> Result<Tensor, EvalError> {
    let t = eval_library(OpKind::Conv, &conv_attrs(c), &[x, w], dtype, conv_shape)?;
    match &c.pool {
        None => Ok(t),
        Some(pool) => eval_library(OpKind::MaxPool2d, &pool.attrs, &[&t], dtype, out_shape),
    }
}

/// The attributes of a conv call.
pub fn conv_attrs(c: &super::ConvCall) -> Attrs {
    let given = vec![
        ("stride".to_string(), AttrValue::Ints(c.stride.clone())),
        ("padding".to_string(), AttrValue::Ints(c.padding.clone())),
        ("dilation".to_string(), AttrValue::Ints(c.dilation.clone())),
        ("groups".to_string(), AttrValue::Int(c.groups)),
    ];
    Attrs::resolve(OpKind::Conv.spec().attrs, given).unwrap_or_default()
}
