//! Named tensor data in the [safetensors](https://huggingface.co/docs/safetensors) format:
//! the weights `memplan import onnx --weights-out` writes, the inputs and weights `memplan run
//! --data` reads, and the outputs `memplan run --outputs-out` writes.
//!
//! Layout (what [`read`] accepts and [`write`](fn@write) produces):
//! - 8 bytes: `N`, the header's length, an unsigned little-endian 64-bit integer;
//! - `N` bytes: a UTF-8 JSON object `{NAME: {"dtype": D, "shape": [d0, ...], "data_offsets":
//!   [BEGIN, END]}, ...}`, optionally with a `"__metadata__"` object of string values (kept
//!   in [`TensorFile::metadata`]); the writer pads it with spaces to a multiple of 8 bytes;
//! - the data: tensor `NAME` is bytes `[BEGIN, END)` of what follows the header, raw
//!   little-endian elements in row-major order, `END − BEGIN = numel(shape) · size(D)`.
//!   The tensors cover the data without gaps or overlaps, as the reference implementation
//!   requires.
//!
//! `D` is one of `BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64`
//! ([`Dtype`]); memplan-graph/1 dtypes map onto them by name (`f32` ↔ `F32`, `bool` ↔
//! `BOOL`, ...; [`Dtype::from_graph`]). Written by hand rather than with the `safetensors`
//! crate: the format is this small, and the errors name the tensor and what is wrong.
//!
//! Cost: reading and writing are one pass over the bytes.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use thiserror::Error;

/// The largest header accepted (as the reference implementation: 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// An element type of the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dtype {
    /// Booleans, one byte each.
    Bool,
    /// Unsigned 8-bit integers.
    U8,
    /// Signed 8-bit integers.
    I8,
    /// 8-bit floats, 5 exponent bits.
    F8E5M2,
    /// 8-bit floats, 4 exponent bits.
    F8E4M3,
    /// Signed 16-bit integers.
    I16,
    /// Unsigned 16-bit integers.
    U16,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integers.
    I32,
    /// Unsigned 32-bit integers.
    U32,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 64-bit integers.
    U64,
}

impl Dtype {
    /// Every dtype.
    pub const ALL: [Dtype; 15] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8E5M2,
        Dtype::F8E4M3,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// The name in a safetensors header (`F32`, `BOOL`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// The dtype of a header name.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 | Dtype::F8E5M2 | Dtype::F8E4M3 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
        }
    }

    /// The dtype of a memplan-graph/1 dtype name (`f32`, `i64`, `bool`, ...); `None` for
    /// names without a fixed-size safetensors counterpart (`f8`, whose variant the graph
    /// does not say, complex and 4-bit types).
    pub fn from_graph(dtype: &str) -> Option<Dtype> {
        Some(match dtype {
            "bool" => Dtype::Bool,
            "u8" => Dtype::U8,
            "i8" => Dtype::I8,
            "i16" => Dtype::I16,
            "u16" => Dtype::U16,
            "f16" => Dtype::F16,
            "bf16" => Dtype::BF16,
            "i32" => Dtype::I32,
            "u32" => Dtype::U32,
            "f32" => Dtype::F32,
            "f64" => Dtype::F64,
            "i64" => Dtype::I64,
            "u64" => Dtype::U64,
            _ => return None,
        })
    }
}

/// One tensor: element type, shape and raw little-endian bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorData {
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions, outermost first (`[]`: a scalar).
    pub shape: Vec<u64>,
    /// `numel(shape) · dtype.size()` bytes.
    pub bytes: Vec<u8>,
}

impl TensorData {
    /// A tensor, checking that the bytes fit the shape (the error names `name`).
    pub fn new(
        name: &str,
        dtype: Dtype,
        shape: Vec<u64>,
        bytes: Vec<u8>,
    ) -> Result<TensorData, DataFileError> {
        let expected = byte_len(name, dtype, &shape)?;
        if expected != bytes.len() as u64 {
            return Err(DataFileError::Size {
                tensor: name.to_string(),
                dtype: dtype.name(),
                shape,
                expected,
                actual: bytes.len() as u64,
            });
        }
        Ok(TensorData {
            dtype,
            shape,
            bytes,
        })
    }

    /// An f32 tensor from values.
    pub fn from_f32(shape: Vec<u64>, values: &[f32]) -> TensorData {
        TensorData {
            dtype: Dtype::F32,
            shape,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// The elements as f32, when the dtype is F32.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == Dtype::F32).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// Named tensors (sorted by name) and the header's optional string metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorFile {
    /// The tensors by name.
    pub tensors: BTreeMap<String, TensorData>,
    /// `__metadata__`: free-form string pairs.
    pub metadata: BTreeMap<String, String>,
}

/// Why bytes are not a valid tensor file, or a tensor does not fit its shape.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum DataFileError {
    /// The file ends before its header or data does.
    #[error("truncated tensor file: {0}")]
    Truncated(String),
    /// The header is not the expected JSON.
    #[error("bad tensor file header: {0}")]
    Header(String),
    /// A tensor's entry in the header is malformed.
    #[error("tensor {tensor:?}: {message}")]
    Entry {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A dtype the format does not define.
    #[error("tensor {tensor:?}: unknown dtype {dtype:?} (expected one of BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)")]
    Dtype {
        /// The tensor.
        tensor: String,
        /// The dtype as written.
        dtype: String,
    },
    /// A tensor's byte count does not match its dtype and shape.
    #[error("tensor {tensor:?}: {dtype} {shape:?} needs {expected} bytes, the data has {actual}")]
    Size {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: &'static str,
        /// Its shape.
        shape: Vec<u64>,
        /// Bytes the dtype and shape need.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// The tensors' byte ranges leave a gap, overlap or do not end with the data.
    #[error("tensor data layout: {0}")]
    Layout(String),
}

/// `numel(shape) · size(dtype)`, checked.
fn byte_len(name: &str, dtype: Dtype, shape: &[u64]) -> Result<u64, DataFileError> {
    shape
        .iter()
        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
        .ok_or_else(|| DataFileError::Entry {
            tensor: name.to_string(),
            message: format!("shape {shape:?} overflows 64-bit byte counts"),
        })
}

/// Parses a tensor file (see the module docs for the layout and what is checked).
pub fn read(bytes: &[u8]) -> Result<TensorFile, DataFileError> {
    let Some(len) = bytes.get(..8) else {
        return Err(DataFileError::Truncated(format!(
            "{} bytes, fewer than the 8 of the header length",
            bytes.len()
        )));
    };
    let n = u64::from_le_bytes([
        len[0], len[1], len[2], len[3], len[4], len[5], len[6], len[7],
    ]);
    if n > MAX_HEADER_BYTES {
        return Err(DataFileError::Header(format!(
            "header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes"
        )));
    }
    let end = 8 + n as usize;
    let Some(header) = bytes.get(8..end) else {
        return Err(DataFileError::Truncated(format!(
            "the header is {n} bytes long, the file has {} after the length",
            bytes.len() - 8
        )));
    };
    let data = &bytes[end..];
    let text = std::str::from_utf8(header)
        .map_err(|e| DataFileError::Header(format!("not UTF-8 ({e})")))?;
    let doc: Value =
        serde_json::from_str(text).map_err(|e| DataFileError::Header(format!("not JSON ({e})")))?;
    let Value::Object(doc) = doc else {
        return Err(DataFileError::Header("not a JSON object".into()));
    };
    let mut file = TensorFile::default();
    let mut ranges: Vec<(u64, u64, String)> = Vec::new();
    for (name, entry) in doc {
        if name == "__metadata__" {
            file.metadata = metadata(&entry)?;
            continue;
        }
        let (tensor, range) = entry_of(&name, &entry, data)?;
        ranges.push((range.0, range.1, name.clone()));
        file.tensors.insert(name, tensor);
    }
    ranges.sort();
    let mut at = 0u64;
    for (begin, end, name) in &ranges {
        if *begin != at {
            return Err(DataFileError::Layout(format!(
                "tensor {name:?} starts at byte {begin} of the data, expected {at} (the tensors must cover the data without gaps or overlaps)"
            )));
        }
        at = *end;
    }
    if at != data.len() as u64 {
        return Err(DataFileError::Layout(format!(
            "the tensors cover {at} bytes of data, the file holds {}",
            data.len()
        )));
    }
    Ok(file)
}

fn metadata(v: &Value) -> Result<BTreeMap<String, String>, DataFileError> {
    let Value::Object(m) = v else {
        return Err(DataFileError::Header(
            "__metadata__ is not an object".into(),
        ));
    };
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(DataFileError::Header(format!(
                "__metadata__ value of {k:?} is not a string"
            ))),
        })
        .collect()
}

/// One header entry and its byte range in the data.
fn entry_of(name: &str, v: &Value, data: &[u8]) -> Result<(TensorData, (u64, u64)), DataFileError> {
    let bad = |message: String| DataFileError::Entry {
        tensor: name.to_string(),
        message,
    };
    let Value::Object(e) = v else {
        return Err(bad("the header entry is not an object".into()));
    };
    let dtype_name = e
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no \"dtype\" string".into()))?;
    let dtype = Dtype::from_name(dtype_name).ok_or_else(|| DataFileError::Dtype {
        tensor: name.to_string(),
        dtype: dtype_name.to_string(),
    })?;
    let ints = |key: &str| -> Result<Vec<u64>, DataFileError> {
        e.get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("no {key:?} list")))?
            .iter()
            .map(|x| {
                x.as_u64()
                    .ok_or_else(|| bad(format!("{key:?} holds {x}, not a non-negative integer")))
            })
            .collect()
    };
    let shape = ints("shape")?;
    let offsets = ints("data_offsets")?;
    let &[begin, end] = offsets.as_slice() else {
        return Err(bad(format!(
            "\"data_offsets\" has {} values, not [BEGIN, END]",
            offsets.len()
        )));
    };
    if begin > end {
        return Err(bad(format!(
            "data_offsets [{begin}, {end}] end before they begin"
        )));
    }
    if end > data.len() as u64 {
        return Err(DataFileError::Truncated(format!(
            "tensor {name:?} ends at byte {end} of the data, which has {} bytes",
            data.len()
        )));
    }
    let expected = byte_len(name, dtype, &shape)?;
    if end - begin != expected {
        return Err(DataFileError::Size {
            tensor: name.to_string(),
            dtype: dtype.name(),
            shape,
            expected,
            actual: end - begin,
        });
    }
    let bytes = data[begin as usize..end as usize].to_vec();
    Ok((
        TensorData {
            dtype,
            shape,
            bytes,
        },
        (begin, end),
    ))
}

/// The bytes of a tensor file: tensors in name order, the header padded with spaces to a
/// multiple of 8 bytes.
pub fn write(file: &TensorFile) -> Vec<u8> {
    let mut header = Map::new();
    if !file.metadata.is_empty() {
        header.insert(
            "__metadata__".into(),
            Value::Object(
                file.metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
        );
    }
    let mut at = 0u64;
    for (name, t) in &file.tensors {
        let end = at + t.bytes.len() as u64;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": t.dtype.name(), "shape": t.shape, "data_offsets": [at, end]}),
        );
        at = end;
    }
    let mut text = Value::Object(header).to_string();
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + at as usize);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    for t in file.tensors.values() {
        out.extend_from_slice(&t.bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TensorFile {
        let mut f = TensorFile::default();
        f.tensors.insert(
            "w".into(),
            TensorData::from_f32(vec![2, 2], &[1.0, -2.0, 3.5, 0.25]),
        );
        f.tensors.insert(
            "shape".into(),
            TensorData::new(
                "shape",
                Dtype::I64,
                vec![2],
                [1i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
            .unwrap(),
        );
        f.tensors.insert(
            "s".into(),
            TensorData::new("s", Dtype::F16, vec![], vec![0, 0x3c]).unwrap(),
        );
        f.metadata.insert("source".into(), "test".into());
        f
    }

    #[test]
    fn a_file_round_trips_with_its_dtypes_shapes_and_metadata() {
        let f = sample();
        let bytes = write(&f);
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(n % 8, 0, "the header is padded to 8 bytes");
        assert_eq!(read(&bytes).unwrap(), f);
        assert_eq!(
            read(&bytes).unwrap().tensors["w"].to_f32().unwrap(),
            vec![1.0, -2.0, 3.5, 0.25]
        );
        assert_eq!(
            read(&write(&TensorFile::default())).unwrap(),
            TensorFile::default()
        );
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_panic() {
        let bytes = write(&sample());
        for cut in [0, 5, 8, 20, bytes.len() - 1] {
            let e = read(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(e, DataFileError::Truncated(_) | DataFileError::Layout(_)),
                "{cut}: {e}"
            );
        }
        let e = read(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
        assert!(e.contains("\"w\""), "the tensor cut short is named: {e}");
    }

    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn bad_headers_name_what_is_wrong() {
        let cases = [
            ("[1]", "not a JSON object"),
            ("{\"x\": 3", "not JSON"),
            (
                "{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}",
                "\"data_offsets\"",
            ),
            (
                "{\"x\": {\"dtype\": \"Q7\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                "unknown dtype \"Q7\"",
            ),
            (
                "{\"x\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
                "not a non-negative integer",
            ),
            (
                "{\"__metadata__\": {\"a\": 1}}",
                "__metadata__ value of \"a\"",
            ),
        ];
        for (header, want) in cases {
            let e = read(&with_header(header, &[0; 4])).unwrap_err().to_string();
            assert!(e.contains(want), "{header}: {e}");
        }
        let mut huge = (MAX_HEADER_BYTES + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(read(&huge).unwrap_err().to_string().contains("limit"));
    }

    #[test]
    fn a_dtype_and_size_mismatch_names_the_tensor() {
        // 2×2 F32 needs 16 bytes; the offsets give 12.
        let e = read(&with_header(
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}",
            &[0; 12],
        ))
        .unwrap_err();
        assert_eq!(
            e,
            DataFileError::Size {
                tensor: "w".into(),
                dtype: "F32",
                shape: vec![2, 2],
                expected: 16,
                actual: 12
            }
        );
        let e = TensorData::new("b", Dtype::I64, vec![3], vec![0; 12]).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"b\": I64 [3] needs 24 bytes, the data has 12"),
            "{e}"
        );
    }

    #[test]
    fn gaps_overlaps_and_trailing_bytes_are_refused() {
        let gap = with_header(
            "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [3, 4]}}",
            &[0; 4],
        );
        assert!(matches!(read(&gap), Err(DataFileError::Layout(_))));
        let trailing = with_header(
            "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}",
            &[0; 3],
        );
        assert!(read(&trailing)
            .unwrap_err()
            .to_string()
            .contains("cover 2 bytes"));
    }

    #[test]
    fn graph_dtypes_map_onto_safetensors_names() {
        assert_eq!(Dtype::from_graph("f32"), Some(Dtype::F32));
        assert_eq!(Dtype::from_graph("bool").map(Dtype::name), Some("BOOL"));
        assert_eq!(Dtype::from_graph("c64"), None);
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
    }
}
