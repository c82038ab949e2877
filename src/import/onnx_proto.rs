//! The subset of ONNX's protobuf schema (onnx/onnx.proto, IR version ≤ 10) that the importer
//! reads, with a small protobuf wire-format decoder: the graph's nodes, initializers, inputs,
//! outputs and value_info, with tensor types, shapes and data. Field numbers follow
//! onnx.proto exactly. Fields not declared here (doc strings, subgraph bodies) are skipped
//! without being copied; tensor data (initializers, `Constant` values) is copied once. Repeated integers accept both
//! the packed and the unpacked encoding (proto2 writers emit unpacked `dims` and `ints`), as
//! the protobuf specification requires of parsers.
//!
//! Hand-written rather than generated: the schema subset is small and stable, and a
//! generated decoder's dependencies would perturb the build of HiGHS' bindings.
//!
//! Cost: one pass over the bytes (the weights' bytes are copied once); nesting is bounded by
//! the schema (subgraphs are skipped).

use thiserror::Error;

/// The bytes are not valid protobuf for the expected message.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{message} at byte {offset} of a {message_name}")]
pub struct DecodeError {
    /// What is wrong.
    pub message: String,
    /// Offset within the enclosing message.
    pub offset: usize,
    /// The message being decoded.
    pub message_name: &'static str,
}

/// One field's payload.
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    name: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], name: &'static str) -> Self {
        Reader { buf, pos: 0, name }
    }

    fn err(&self, message: impl Into<String>) -> DecodeError {
        DecodeError {
            message: message.into(),
            offset: self.pos,
            message_name: self.name,
        }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err("truncated varint"));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(self.err("varint overflows 64 bits"));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err(format!("field of {n} bytes runs past the end")))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field, or `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(self.err("field number 0"));
        }
        let w = match wire {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::Fixed64(u64::from_le_bytes([
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]))
            }
            2 => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| self.err("length overflows"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            w => return Err(self.err(format!("unsupported wire type {w} (field {field})"))),
        };
        Ok(Some((field, w)))
    }
}

fn string(r: &Reader<'_>, w: Wire<'_>) -> Result<String, DecodeError> {
    match w {
        Wire::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| r.err("string field is not UTF-8")),
        _ => Err(r.err("string field with a non-length-delimited wire type")),
    }
}

fn blob(r: &Reader<'_>, w: Wire<'_>) -> Result<Vec<u8>, DecodeError> {
    match w {
        Wire::Bytes(b) => Ok(b.to_vec()),
        _ => Err(r.err("bytes field with a non-length-delimited wire type")),
    }
}

fn int(r: &Reader<'_>, w: Wire<'_>) -> Result<i64, DecodeError> {
    match w {
        Wire::Varint(v) => Ok(v as i64),
        _ => Err(r.err("integer field with a non-varint wire type")),
    }
}

fn float(r: &Reader<'_>, w: Wire<'_>) -> Result<f32, DecodeError> {
    match w {
        Wire::Fixed32(v) => Ok(f32::from_bits(v)),
        _ => Err(r.err("float field with a non-32-bit wire type")),
    }
}

/// Appends one unpacked element or a packed run of varints.
fn ints(r: &Reader<'_>, w: Wire<'_>, out: &mut Vec<i64>) -> Result<(), DecodeError> {
    match w {
        Wire::Varint(v) => out.push(v as i64),
        Wire::Bytes(b) => {
            let mut p = Reader::new(b, r.name);
            while p.pos < b.len() {
                out.push(p.varint()? as i64);
            }
        }
        _ => return Err(r.err("repeated integer field with a 64/32-bit wire type")),
    }
    Ok(())
}

/// Appends one unpacked float or a packed run.
fn floats(r: &Reader<'_>, w: Wire<'_>, out: &mut Vec<f32>) -> Result<(), DecodeError> {
    match w {
        Wire::Fixed32(v) => out.push(f32::from_bits(v)),
        Wire::Bytes(b) if b.len() % 4 == 0 => out.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        _ => return Err(r.err("repeated float field with a bad encoding")),
    }
    Ok(())
}

/// Appends one unpacked double or a packed run.
fn doubles(r: &Reader<'_>, w: Wire<'_>, out: &mut Vec<f64>) -> Result<(), DecodeError> {
    match w {
        Wire::Fixed64(v) => out.push(f64::from_bits(v)),
        Wire::Bytes(b) if b.len() % 8 == 0 => out.extend(
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
        ),
        _ => return Err(r.err("repeated double field with a bad encoding")),
    }
    Ok(())
}

fn message<T>(
    r: &Reader<'_>,
    w: Wire<'_>,
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    match w {
        Wire::Bytes(b) => decode(b),
        _ => Err(r.err("message field with a non-length-delimited wire type")),
    }
}

/// Decodes the fields of one message with `on_field`, skipping the ones it ignores.
macro_rules! decode_fields {
    ($bytes:expr, $name:literal, $out:ident: $ty:ty, |$r:ident, $f:ident, $w:ident| $body:block) => {{
        let mut $r = Reader::new($bytes, $name);
        let mut $out = <$ty>::default();
        while let Some(($f, $w)) = $r.field()? {
            $body
        }
        Ok($out)
    }};
}

/// `ModelProto`: the file's top-level message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelProto {
    /// IR version (1).
    pub ir_version: Option<i64>,
    /// Tool that wrote the model (2).
    pub producer_name: Option<String>,
    /// The graph (7).
    pub graph: Option<GraphProto>,
    /// Operator sets imported (8).
    pub opset_import: Vec<OperatorSetIdProto>,
}

impl ModelProto {
    /// Decodes a model file's bytes.
    pub fn decode(bytes: &[u8]) -> Result<ModelProto, DecodeError> {
        decode_fields!(bytes, "ModelProto", m: ModelProto, |r, f, w| {
            match f {
                1 => m.ir_version = Some(int(&r, w)?),
                2 => m.producer_name = Some(string(&r, w)?),
                7 => m.graph = Some(message(&r, w, GraphProto::decode)?),
                8 => m.opset_import.push(message(&r, w, OperatorSetIdProto::decode)?),
                _ => {}
            }
        })
    }
}

/// `OperatorSetIdProto`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorSetIdProto {
    /// Domain ("" or "ai.onnx" for the standard set) (1).
    pub domain: Option<String>,
    /// Opset version (2).
    pub version: Option<i64>,
}

impl OperatorSetIdProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "OperatorSetIdProto", o: OperatorSetIdProto, |r, f, w| {
            match f {
                1 => o.domain = Some(string(&r, w)?),
                2 => o.version = Some(int(&r, w)?),
                _ => {}
            }
        })
    }
}

/// `GraphProto`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphProto {
    /// Nodes, topologically sorted (1).
    pub node: Vec<NodeProto>,
    /// Graph name (2).
    pub name: Option<String>,
    /// Constant tensors (weights) (5).
    pub initializer: Vec<TensorProto>,
    /// Sparse constant tensors (15).
    pub sparse_initializer: Vec<SparseTensorProto>,
    /// Graph inputs (may include initializers, IR < 4) (11).
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs (12).
    pub output: Vec<ValueInfoProto>,
    /// Types and shapes of intermediate values, filled by ONNX shape inference (13).
    pub value_info: Vec<ValueInfoProto>,
}

impl GraphProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "GraphProto", g: GraphProto, |r, f, w| {
            match f {
                1 => g.node.push(message(&r, w, NodeProto::decode)?),
                2 => g.name = Some(string(&r, w)?),
                5 => g.initializer.push(message(&r, w, TensorProto::decode)?),
                15 => g
                    .sparse_initializer
                    .push(message(&r, w, SparseTensorProto::decode)?),
                11 => g.input.push(message(&r, w, ValueInfoProto::decode)?),
                12 => g.output.push(message(&r, w, ValueInfoProto::decode)?),
                13 => g.value_info.push(message(&r, w, ValueInfoProto::decode)?),
                _ => {}
            }
        })
    }
}

/// `NodeProto`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeProto {
    /// Values read; "" marks an omitted optional input (1).
    pub input: Vec<String>,
    /// Values written; "" marks an omitted optional output (2).
    pub output: Vec<String>,
    /// Node name, optional in ONNX (3).
    pub name: Option<String>,
    /// Operator (4).
    pub op_type: Option<String>,
    /// Attributes (5).
    pub attribute: Vec<AttributeProto>,
    /// Operator domain, "" for the standard set (7).
    pub domain: Option<String>,
}

impl NodeProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "NodeProto", n: NodeProto, |r, f, w| {
            match f {
                1 => n.input.push(string(&r, w)?),
                2 => n.output.push(string(&r, w)?),
                3 => n.name = Some(string(&r, w)?),
                4 => n.op_type = Some(string(&r, w)?),
                5 => n.attribute.push(message(&r, w, AttributeProto::decode)?),
                7 => n.domain = Some(string(&r, w)?),
                _ => {}
            }
        })
    }
}

/// `AttributeProto`; subgraph bodies are skipped, their presence shows in `r#type` and
/// `has_graph`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttributeProto {
    /// Attribute name (1).
    pub name: Option<String>,
    /// A float (2).
    pub f: Option<f32>,
    /// An integer (3).
    pub i: Option<i64>,
    /// A string, as bytes (4).
    pub s: Option<Vec<u8>>,
    /// A tensor, for `Constant` (5).
    pub t: Option<TensorProto>,
    /// Floats (7).
    pub floats: Vec<f32>,
    /// Integers (8).
    pub ints: Vec<i64>,
    /// Strings, as bytes (9).
    pub strings: Vec<Vec<u8>>,
    /// A graph or graphs are present (6, 11).
    pub has_graph: bool,
    /// Discriminator (20): 1 FLOAT, 2 INT, 3 STRING, 4 TENSOR, 5 GRAPH, 6 FLOATS, 7 INTS,
    /// 8 STRINGS, 9 TENSORS, 10 GRAPHS, 11 SPARSE_TENSOR, 12 SPARSE_TENSORS.
    pub r#type: Option<i32>,
}

impl AttributeProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "AttributeProto", a: AttributeProto, |r, f, w| {
            match f {
                1 => a.name = Some(string(&r, w)?),
                2 => a.f = Some(float(&r, w)?),
                3 => a.i = Some(int(&r, w)?),
                4 => a.s = Some(blob(&r, w)?),
                5 => a.t = Some(message(&r, w, TensorProto::decode)?),
                6 | 11 => a.has_graph = true,
                7 => floats(&r, w, &mut a.floats)?,
                8 => ints(&r, w, &mut a.ints)?,
                9 => a.strings.push(blob(&r, w)?),
                20 => a.r#type = Some(int(&r, w)? as i32),
                _ => {}
            }
        })
    }
}

/// `ValueInfoProto`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueInfoProto {
    /// Value name (1).
    pub name: Option<String>,
    /// Its type (2).
    pub r#type: Option<TypeProto>,
}

impl ValueInfoProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "ValueInfoProto", v: ValueInfoProto, |r, f, w| {
            match f {
                1 => v.name = Some(string(&r, w)?),
                2 => v.r#type = Some(message(&r, w, TypeProto::decode)?),
                _ => {}
            }
        })
    }
}

/// `TypeProto`; only tensor types are decoded (sequences and maps stay `None`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeProto {
    /// A tensor type (1).
    pub tensor_type: Option<TypeTensor>,
}

impl TypeProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "TypeProto", t: TypeProto, |r, f, w| {
            if f == 1 {
                t.tensor_type = Some(message(&r, w, TypeTensor::decode)?);
            }
        })
    }
}

/// `TypeProto.Tensor`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeTensor {
    /// `TensorProto.DataType` (1).
    pub elem_type: Option<i32>,
    /// Shape, when known (2).
    pub shape: Option<TensorShapeProto>,
}

impl TypeTensor {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "TypeProto.Tensor", t: TypeTensor, |r, f, w| {
            match f {
                1 => t.elem_type = Some(int(&r, w)? as i32),
                2 => t.shape = Some(message(&r, w, TensorShapeProto::decode)?),
                _ => {}
            }
        })
    }
}

/// `TensorShapeProto`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorShapeProto {
    /// Dimensions, outermost first (1).
    pub dim: Vec<Dimension>,
}

impl TensorShapeProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "TensorShapeProto", s: TensorShapeProto, |r, f, w| {
            if f == 1 {
                s.dim.push(message(&r, w, Dimension::decode)?);
            }
        })
    }
}

/// `TensorShapeProto.Dimension`: a value, a symbol, or neither (unknown).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dimension {
    /// Static size (1).
    pub dim_value: Option<i64>,
    /// Symbolic size (2).
    pub dim_param: Option<String>,
}

impl Dimension {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "TensorShapeProto.Dimension", d: Dimension, |r, f, w| {
            match f {
                1 => d.dim_value = Some(int(&r, w)?),
                2 => d.dim_param = Some(string(&r, w)?),
                _ => {}
            }
        })
    }
}

/// `TensorProto` with its data in any of the forms ONNX allows: `raw_data` (little-endian
/// bytes) or one typed field, or a reference to external data (whose location the importer
/// only reports).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorProto {
    /// Shape (1).
    pub dims: Vec<i64>,
    /// `TensorProto.DataType` (2).
    pub data_type: Option<i32>,
    /// FLOAT and COMPLEX64 elements (4).
    pub float_data: Vec<f32>,
    /// INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16, BFLOAT16 and FLOAT8 elements, one
    /// per value (5).
    pub int32_data: Vec<i64>,
    /// Strings (6): present means a STRING tensor.
    pub has_string_data: bool,
    /// INT64 elements (7).
    pub int64_data: Vec<i64>,
    /// Name (8).
    pub name: Option<String>,
    /// The elements as little-endian bytes (9).
    pub raw_data: Option<Vec<u8>>,
    /// DOUBLE and COMPLEX128 elements (10).
    pub double_data: Vec<f64>,
    /// UINT32 and UINT64 elements (11).
    pub uint64_data: Vec<i64>,
    /// `external_data` key/value pairs (13): where the data lives outside the model.
    pub external_data: Vec<(String, String)>,
    /// `data_location` (14): 1 means EXTERNAL.
    pub data_location: Option<i32>,
}

impl TensorProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "TensorProto", t: TensorProto, |r, f, w| {
            match f {
                1 => ints(&r, w, &mut t.dims)?,
                2 => t.data_type = Some(int(&r, w)? as i32),
                4 => floats(&r, w, &mut t.float_data)?,
                5 => ints(&r, w, &mut t.int32_data)?,
                6 => t.has_string_data = true,
                7 => ints(&r, w, &mut t.int64_data)?,
                8 => t.name = Some(string(&r, w)?),
                9 => t.raw_data = Some(blob(&r, w)?),
                10 => doubles(&r, w, &mut t.double_data)?,
                11 => ints(&r, w, &mut t.uint64_data)?,
                13 => t.external_data.push(message(&r, w, string_pair)?),
                14 => t.data_location = Some(int(&r, w)? as i32),
                _ => {}
            }
        })
    }
}

/// `StringStringEntryProto` as `(key, value)`.
fn string_pair(bytes: &[u8]) -> Result<(String, String), DecodeError> {
    let mut r = Reader::new(bytes, "StringStringEntryProto");
    let (mut k, mut v) = (String::new(), String::new());
    while let Some((f, w)) = r.field()? {
        match f {
            1 => k = string(&r, w)?,
            2 => v = string(&r, w)?,
            _ => {}
        }
    }
    Ok((k, v))
}

/// `SparseTensorProto` (only what sizes it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseTensorProto {
    /// Non-default values; its `name` names the sparse tensor (1).
    pub values: Option<TensorProto>,
    /// Dense shape (3).
    pub dims: Vec<i64>,
}

impl SparseTensorProto {
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_fields!(bytes, "SparseTensorProto", s: SparseTensorProto, |r, f, w| {
            match f {
                1 => s.values = Some(message(&r, w, TensorProto::decode)?),
                3 => ints(&r, w, &mut s.dims)?,
                _ => {}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_packed_and_unpacked_integers_and_skipped_fields_decode() {
        // TensorProto: dims 3 (unpacked), dims [300, 1] (packed), data_type 1, a double
        // (field 10, fixed64), raw_data (9), name "t", and a skipped doc_string (12).
        let bytes = [
            0x08, 3, // dims = 3
            0x0a, 3, 0xac, 0x02, 1, // dims packed: 300, 1
            0x10, 1, // data_type = 1
            0x51, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // field 10, fixed64: 1.0
            0x4a, 2, 0xff, 0xfe, // raw_data
            0x42, 1, b't', // name
            0x62, 1, b'd', // doc_string (skipped)
        ];
        let t = TensorProto::decode(&bytes).unwrap();
        assert_eq!(t.dims, vec![3, 300, 1]);
        assert_eq!(t.data_type, Some(1));
        assert_eq!(t.name.as_deref(), Some("t"));
        assert_eq!(t.double_data, vec![1.0]);
        assert_eq!(t.raw_data.as_deref(), Some(&[0xff, 0xfe][..]));
    }

    #[test]
    fn truncated_and_malformed_bytes_are_errors_not_panics() {
        for bad in [
            &[0x08][..],          // key without value
            &[0x42, 5, b'a'][..], // length past the end
            &[0x0b][..],          // group start (wire type 3)
            &[0x00, 1][..],       // field 0
            &[0x42, 1, 0xff][..], // name not UTF-8
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
        ] {
            assert!(TensorProto::decode(bad).is_err(), "{bad:?}");
        }
        let e = ModelProto::decode(&[0x3a, 9, 1]).unwrap_err();
        assert!(e.to_string().contains("ModelProto"), "{e}");
    }
}
