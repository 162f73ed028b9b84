//! Frontends: importers that turn model files from other tools into ladder graphs.
//!
//! - [`onnx`]: ONNX models (`.onnx`, protobuf), opsets 11–23 of the default domain.

pub mod onnx;
