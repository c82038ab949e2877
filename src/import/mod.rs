//! Importers: build a memplan-graph/1 [`Graph`](crate::Graph) from another framework's
//! model file. Each importer is one file; the result always goes through
//! [`Graph::parse`](crate::Graph::parse)'s checks, so an imported graph obeys every rule of
//! the format.
//!
//! - [`onnx`]: ONNX models (`.onnx`), with tensor sizes from the model's inferred shapes and
//!   the weights' data ([`onnx_data`]).

pub mod onnx;
pub mod onnx_data;
pub mod onnx_proto;
